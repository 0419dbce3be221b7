"""Find every process of a local cluster, and stop them.

Every process of a cluster is recognisable: daemons carry the cluster directory in their
command line and in SIMCLUSTER_STATE_DIR, slurmstepd inherits it from slurmd, and job
tasks get it from the TaskProlog. `down` sweeps /proc for that marker, so no job or
stepd outlives its cluster.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Iterable, List

from provisioner.cluster.handle import MARKER_VAR
from provisioner.cluster.runner import process_alive as pid_alive


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def cluster_pids(root: Path, known: Iterable[int] = ()) -> List[int]:
    """Every live process that belongs to the cluster in ``root``."""
    root_b = str(root).encode()
    marker = f"{MARKER_VAR}={root}".encode() + b"\0"
    me = os.getpid()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        cmdline = _read(f"/proc/{pid}/cmdline")
        if root_b + b"/" in cmdline or marker in _read(f"/proc/{pid}/environ"):
            found.add(pid)
    for pid in known:
        if pid and pid_alive(pid) and root_b in _read(f"/proc/{pid}/cmdline"):
            found.add(pid)
    return sorted(p for p in found if pid_alive(p))


def terminate(pids: Iterable[int], grace: float = 2.0) -> List[int]:
    """SIGTERM, wait up to ``grace`` seconds, SIGKILL what is left. Returns the survivors."""
    pids = [p for p in pids if pid_alive(p)]
    for sig in ((signal.SIGTERM, signal.SIGKILL) if grace > 0 else (signal.SIGKILL,)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            except PermissionError:
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 2.0)
        delay = 0.005
        while pids and time.monotonic() < deadline:
            _reap()
            pids = [p for p in pids if pid_alive(p)]
            if pids:
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        if not pids:
            break
    return pids


def _reap() -> None:
    """Collect exited children of this process (daemons started by this same process)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
