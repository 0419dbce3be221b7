"""The cluster's Prometheus exporter (metrics: true, `up --metrics`; docs/metrics.md).

One exporter process per cluster (exporter.py), a daemon of the cluster like slurmrestd:
started by `up`'s "metrics" step and by `up`/`start` when it is dead (lifecycle/repair.py),
its pid in state.json under "metrics", stopped by `stop` and `down`, shown by `status`, its
URL printed by `simcluster env` as SIMCLUSTER_METRICS_URL.

It runs on this host, on every backend (runner key "host": state.HOST_DAEMONS), and
listens on loopback (127.0.0.1), where a Prometheus on this host scrapes it, whichever
network the nodes have: it calls Slurm's commands through the cluster's own client, as
`simcluster exec` does (rootless local clusters: on the cluster's network, from inside its
user namespace; docker clusters: an exec in the controller container), so nothing of the
cluster's network has to be reachable from the scraper; the fake GPUs' files it reads are
in the cluster's config directory on this host. Its port is taken with the cluster's other
ports (by the provider), or is `metrics: {port: N}`. Its log is log/metrics.log in the
state directory. `down` stops it by its pid and, where the state is gone, by its command
line (exporter_pids).

What a scrape reads and exports: collector.py (Slurm) and gpus.py (the fake GPUs).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Dict, List

from provisioner.cluster.model.command_runner import process_alive, reap_children
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
    log = Path(cluster.daemon_log(DAEMON))
    log.parent.mkdir(exist_ok=True)  # a docker cluster's state directory has no log/ of its own
    env = {**cluster.daemon_env(), "PYTHONPATH": _PACKAGE_ROOT}
    daemons.start_launch(cluster, daemons.Launch(DAEMON, exporter_argv(cluster), env, str(log)))
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


def exporter_pids(state_dir: str) -> List[int]:
    """This host's exporter processes of the cluster in ``state_dir``, found by their command
    line (`-m provisioner.cli.metrics_exporter --state-dir DIR`): for a `down` whose state
    file lost the pid or is gone. Another user's processes, unreadable, are not ours."""
    want = [EXPORTER_MODULE.encode(), b"--state-dir", str(state_dir).encode()]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                args = fh.read().split(b"\0")
        except OSError:
            continue
        for i in range(len(args) - 3):
            if args[i:i + 3] == [b"-m", want[0], want[1]] and args[i + 3] == want[2]:
                found.append(int(entry))
                break
    return found


def stop_exporters(state_dir: str, grace: float = 5.0) -> List[int]:
    """SIGTERM every exporter of the cluster in ``state_dir`` on this host, SIGKILL what is
    left after ``grace`` s; return the pids that would not die."""
    pids = exporter_pids(state_dir)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            reap_children()  # an exporter this process started would read alive as a zombie
            pids = [p for p in pids if process_alive(p)]
            if pids:
                time.sleep(0.05)
        if not pids:
            return []
    return pids
