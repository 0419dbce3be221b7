"""Start daemons, tell whether they live, find every process of a cluster, stop them.

Every process of a cluster is recognisable: daemons carry the cluster directory in their
command line and in SIMCLUSTER_STATE_DIR, slurmstepd inherits it from slurmd, and job
tasks get it from the TaskProlog. `down` sweeps /proc for that marker, so no job or
stepd outlives its cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

MARKER_VAR = "SIMCLUSTER_STATE_DIR"


def spawn(argv: Sequence[str], out_path: Path, env: Dict[str, str]) -> subprocess.Popen:
    """Start a daemon in the foreground mode of its own session, output to ``out_path``."""
    with open(out_path, "ab") as out:
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=env, start_new_session=True, close_fds=True,
        )


def pid_alive(pid: Optional[int]) -> bool:
    """True if ``pid`` runs and is not a zombie."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # Field 3, after the parenthesised command name (which may contain spaces).
    state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
    return state not in (b"Z", b"X")


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


def tail_lines(path: Path, lines: int) -> Optional[List[str]]:
    """The last ``lines`` lines of a file (reading at most its last 64 KiB), None if unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    return text.splitlines()[-lines:]


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file, or a note that it is missing."""
    out = tail_lines(path, lines)
    return f"({path} does not exist)" if out is None else "\n".join(out)
