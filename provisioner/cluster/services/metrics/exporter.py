"""What the exporter process serves: a registry for one cluster, and the HTTP server.

The process itself is `python -m provisioner.cli.metrics_exporter --state-dir DIR --addr A
--port P` (one per cluster made with `metrics`; metrics/__init__.py starts it), which reads
the cluster from its state directory once, then serves /metrics with prometheus_client's
HTTP server; every Slurm call goes through the cluster's own client
(cluster.client: local clusters, this host's Slurm commands with the cluster's SLURM_CONF,
on the cluster's network where the nodes have one of their own; docker clusters, an exec in
the controller container), so it reaches slurmctld wherever `simcluster exec sinfo` does.
SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.state import ClusterState
from provisioner.cluster.services.metrics.collector import DEFAULT_TTL, ClusterCollector, SlurmSource

SLURM_TIMEOUT = 20.0  # seconds a Slurm call may take before its source counts as down


def registry_for(cluster: Cluster, ttl: float = DEFAULT_TTL) -> Tuple[CollectorRegistry, ClusterCollector]:
    """The registry that serves ``cluster``: its Slurm calls through the cluster's client."""
    client = cluster.client

    def fetch(argv: Sequence[str]) -> Tuple[bool, str]:
        res = client.run(list(argv), timeout=SLURM_TIMEOUT)
        return res.ok, res.stdout
    gpu_dir = Path(cluster.placement.config_dir) if cluster.spec.fake_gpus else None
    layout = cluster.state.layout

    def minors() -> Dict[str, List[int]]:
        # The state file as it is now: `simcluster scale` adds nodes (and GPUs) to it.
        state = ClusterState.load(layout) or cluster.state
        return {n.name: list(n.gpus) for n in state.cluster_spec.nodes}
    collector = ClusterCollector(SlurmSource(fetch, ttl), cluster.name, gpu_dir, minors)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry, collector


def serve(registry: CollectorRegistry, addr: str, port: int, what: str) -> int:
    """Serve /metrics on ``addr``:``port`` until SIGTERM or SIGINT."""
    server, _ = start_http_server(port, addr=addr, registry=registry)
    print(f"serving http://{addr}:{port}/metrics for {what}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(3600):
        pass
    server.shutdown()
    return 0
