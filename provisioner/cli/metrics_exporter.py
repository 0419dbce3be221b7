"""The metrics exporter's process (not a subcommand): `python -m provisioner.cli.metrics_exporter
--state-dir DIR --addr A --port P`, started by `up` for a cluster made with `metrics`
(provisioner/cluster/services/metrics/). It loads the cluster from its state directory, as
the commands do, and serves its registry until SIGTERM.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    # lazy: this module is imported with the CLI package; only the exporter's process loads these
    from provisioner.cluster.model.handle import Cluster
    from provisioner.cluster.model.state import ClusterState
    from provisioner.cluster.services.metrics.collector import DEFAULT_TTL
    from provisioner.cluster.services.metrics.exporter import registry_for, serve
    from provisioner.paths import ClusterLayout
    from provisioner.providers import provider_named
    ap = argparse.ArgumentParser(prog="simcluster-metrics", description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", required=True, help="the cluster's state directory")
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttl", type=float, default=DEFAULT_TTL, help="seconds Slurm's outputs are reused")
    args = ap.parse_args(argv)
    state = ClusterState.load(ClusterLayout(Path(args.state_dir)))
    if state is None:
        print(f"simcluster metrics exporter: no cluster state in {args.state_dir}", file=sys.stderr)
        return 2
    registry, _ = registry_for(Cluster(state, provider_named(state.backend)), args.ttl)
    return serve(registry, args.addr, args.port, args.state_dir)


if __name__ == "__main__":
    sys.exit(main())
