"""The cluster's Prometheus exporter (metrics: true, `up --metrics`; docs/metrics.md).

One exporter process per cluster (exporter.py), a daemon of the cluster like slurmrestd:
started by `up`'s "metrics" step and by `up`/`start` when it is dead (lifecycle/repair.py),
its pid in state.json under "metrics", stopped by `stop` and `down`, shown by `status`, its
URL printed by `simcluster env` as SIMCLUSTER_METRICS_URL.

It runs on this host and listens on loopback (127.0.0.1), where a Prometheus on this host
scrapes it, whichever network the nodes have: it calls Slurm's commands through the
cluster's own client, as `simcluster exec` does (rootless clusters: on the cluster's
network, from inside its user namespace), so nothing of the cluster's network has to be
reachable from the scraper. Its port is taken with the cluster's other ports (the local
provider), or is `metrics: {port: N}`. Local backend only: a docker cluster's controller
is a container without simcluster in it.

What a scrape reads and exports: collector.py (Slurm) and gpus.py (the fake GPUs).
"""

from __future__ import annotations

import shlex
import socket
import sys
from pathlib import Path
from typing import Dict, List

from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.services import daemons

DAEMON = "metrics"  # the exporter's key in state.json's pids (log: log/metrics.log)
LISTEN_ADDR = "127.0.0.1"
URL_VAR = "SIMCLUSTER_METRICS_URL"
EXPORTER_MODULE = "provisioner.cli.metrics_exporter"  # the process (the commands floor: it loads a cluster)
# The directory holding the provisioner package: the exporter runs this very code, whatever
# PYTHONPATH the caller had (a checkout, a wheel).
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[4])


def port(cluster: Cluster) -> int:
    return cluster.spec.metrics_port or cluster.state.metrics_port or 0


def url(cluster: Cluster) -> str:
    return f"http://{LISTEN_ADDR}:{port(cluster)}/metrics"


def exporter_argv(cluster: Cluster) -> List[str]:
    return [sys.executable, "-m", EXPORTER_MODULE, "--state-dir", cluster.state.root, "--addr", LISTEN_ADDR,
            "--port", str(port(cluster))]


def _listening(p: int) -> bool:
    try:
        with socket.create_connection((LISTEN_ADDR, p), timeout=1.0):
            return True
    except OSError:
        return False


def start_exporter(cluster: Cluster, timeout: float = 30.0) -> None:
    """Start the exporter and wait until it listens; its URL goes into the state."""
    p = port(cluster)
    daemons.start(cluster, DAEMON, exporter_argv(cluster), env={"PYTHONPATH": _PACKAGE_ROOT}, output=".log")
    daemons.wait_usable(cluster, DAEMON, f"listen on {LISTEN_ADDR}:{p}", lambda: _listening(p), timeout)
    cluster.state.metrics_url = url(cluster)


def health(cluster: Cluster, alive: Dict[str, bool]) -> Dict:
    """What `status` reports about the exporter: alive, and its URL."""
    if not cluster.spec.metrics:
        return {"enabled": False, "healthy": True, "alive": None, "url": None}
    ok = alive.get(DAEMON, False)
    return {"enabled": True, "healthy": ok, "alive": ok, "url": cluster.state.metrics_url or url(cluster)}


def env_lines(cluster: Cluster) -> List[str]:
    """`simcluster env`'s line for a cluster with metrics: the URL to scrape."""
    if not cluster.spec.metrics or not port(cluster):
        return []
    return [f"export {URL_VAR}={shlex.quote(url(cluster))}"]
