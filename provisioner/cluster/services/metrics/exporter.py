"""The exporter process: `python -m provisioner.cluster.services.metrics.exporter --state-dir DIR
--addr A --port P`, one per cluster made with `metrics` (metrics/__init__.py starts it).

It reads the cluster from its state directory once, then serves /metrics with
prometheus_client's HTTP server; every Slurm call goes through the cluster's own client
(cluster.client: this host's Slurm commands with the cluster's SLURM_CONF, on the cluster's
network where the nodes have one of their own), so it reaches slurmctld wherever `simcluster
exec sinfo` does. SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

from provisioner.cluster.services.metrics.collector import DEFAULT_TTL, ClusterCollector, SlurmSource

SLURM_TIMEOUT = 20.0  # seconds a Slurm call may take before its source counts as down


def build(state_dir: str, ttl: float = DEFAULT_TTL) -> Tuple[CollectorRegistry, ClusterCollector]:
    """The registry that serves the cluster whose state is in ``state_dir``."""
    from provisioner.cluster.model.handle import Cluster  # the cluster model: loaded by the process only
    from provisioner.cluster.model.state import ClusterState
    from provisioner.paths import ClusterLayout
    from provisioner.providers import provider_named
    state = ClusterState.load(ClusterLayout(Path(state_dir)))
    if state is None:
        raise SystemExit(f"simcluster metrics exporter: no cluster state in {state_dir}")
    cluster = Cluster(state, provider_named(state.backend))
    client = cluster.client

    def fetch(argv: Sequence[str]) -> Tuple[bool, str]:
        res = client.run(list(argv), timeout=SLURM_TIMEOUT)
        return res.ok, res.stdout
    gpu_dir = Path(cluster.placement.config_dir) if cluster.spec.fake_gpus else None
    minors = {n.name: list(n.gpus) for n in cluster.spec.nodes}
    collector = ClusterCollector(SlurmSource(fetch, ttl), cluster.name, gpu_dir, minors)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry, collector


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="simcluster-metrics", description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", required=True, help="the cluster's state directory")
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttl", type=float, default=DEFAULT_TTL, help="seconds Slurm's outputs are reused")
    args = ap.parse_args(argv)
    registry, _ = build(args.state_dir, args.ttl)
    server, thread = start_http_server(args.port, addr=args.addr, registry=registry)
    print(f"serving http://{args.addr}:{args.port}/metrics for {args.state_dir}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(3600):
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
