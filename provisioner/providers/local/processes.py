"""Find every process of a local cluster, and stop them.

Every process of a cluster is recognisable: daemons carry SIMCLUSTER_STATE_DIR=<its
directory> in their environment, slurmstepd inherits it from slurmd, and batch scripts
and job tasks descend from a slurmstepd. `down` sweeps /proc for the marker and the
descendants, so no job or stepd outlives its cluster, and a process that merely names the
cluster's files (another user reading its slurm.conf) is left alone. Where each node has a PID namespace of its own (names.py),
its processes are also the namespace's: they end with its init, whose command line
names the cluster, and a node's processes are found by their namespace.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

from provisioner.cluster.model.command_runner import process_alive as pid_alive
from provisioner.cluster.model.handle import MARKER_VAR
from provisioner.cluster.model.wait import WaitTimeout, poll_until


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def cluster_pids(root: Path, known: Iterable[int] = ()) -> List[int]:
    """Every live process that belongs to the cluster in ``root``: those that carry its
    marker in their environment (daemons, slurmstepd, the node starters), everything they
    started (batch scripts and job tasks, which get the job's environment, not the
    marker), and orphaned job processes that name the cluster's files. A process that only
    names the cluster's files (another user's `less .../etc/slurm.conf`) is not the
    cluster's: `down` must never kill it."""
    root_b = str(root).encode()
    marker = f"{MARKER_VAR}={root}".encode() + b"\0"
    me = os.getpid()
    found = set()
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        children.setdefault(_parent(pid), []).append(pid)
        environ = _read(f"/proc/{pid}/environ")
        if marker in environ:
            found.add(pid)
        elif b"\0SLURM_JOB_ID=" in b"\0" + environ and root_b + b"/" in _read(f"/proc/{pid}/cmdline"):
            found.add(pid)
    for pid in known:
        if pid and pid_alive(pid) and root_b in _read(f"/proc/{pid}/cmdline"):
            found.add(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return sorted(p for p in found if pid_alive(p))


def _parent(pid: int) -> int:
    """The parent of ``pid`` (field 4 of /proc/PID/stat, after the command's parentheses); 0 if gone."""
    stat = _read(f"/proc/{pid}/stat")
    try:
        return int(stat[stat.rindex(b")") + 2:].split()[1])
    except (ValueError, IndexError):
        return 0


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
        def gone() -> Tuple[bool, List[int]]:
            nonlocal pids
            _reap()
            pids = [p for p in pids if pid_alive(p)]
            return not pids, pids
        try:
            poll_until(gone, grace if sig == signal.SIGTERM else 2.0, first_delay=0.005, max_delay=0.05, factor=2)
        except WaitTimeout:
            pass  # after SIGTERM: SIGKILL next; after SIGKILL: returned as survivors
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


def _unix_socket_paths(prefix: str) -> dict:
    """{socket inode: path} of the listening unix sockets whose path starts with ``prefix``."""
    found = {}
    for line in _read("/proc/net/unix").decode(errors="replace").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7].startswith(prefix):
            found[fields[6]] = fields[7]
    return found


def pid_namespace(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def _namespace_pid(pid: int) -> int:
    """``pid``'s number in its own (innermost) PID namespace; 0 if unknown."""
    for line in _read(f"/proc/{pid}/status").decode(errors="replace").splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    return 0


def namespace_pids(slurmd_pid: int) -> List[int]:
    """Every process in the PID namespace of ``slurmd_pid`` but its init (tini): the node's
    slurmd, slurmstepd and job tasks; [] when that slurmd runs in this process's own
    namespace (no namespace per node) or is gone."""
    ns = pid_namespace(slurmd_pid) if slurmd_pid else ""
    if not ns or ns == pid_namespace(os.getpid()):
        return []
    found = [int(e) for e in os.listdir("/proc") if e.isdigit() and pid_namespace(int(e)) == ns]
    return sorted(p for p in found if _namespace_pid(p) != 1 and pid_alive(p))


def node_pids(root: Path, node: str, slurmd_pid: int = 0) -> List[int]:
    """The processes of virtual node ``node`` of the cluster in ``root``: its slurmd, the
    slurmstepd that listen on a socket in the node's spool directory (slurmstepd carries
    no node name, and is re-parented to init), and job tasks (SLURMD_NODENAME=<node>).
    Where the node has a PID namespace of its own, they are the namespace's processes
    (tasks then may carry no marker: no TaskProlog exports it)."""
    in_namespace = namespace_pids(slurmd_pid)
    if in_namespace:
        return in_namespace
    marker = f"{MARKER_VAR}={root}".encode()
    node_env = f"SLURMD_NODENAME={node}".encode()
    sockets = _unix_socket_paths(f"{root}/spool/{node}/")
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        env = _read(f"/proc/{pid}/environ").split(b"\0")
        if marker not in env:
            continue
        if node_env in env or pid == slurmd_pid:
            found.add(pid)
        elif _read(f"/proc/{pid}/cmdline").startswith(b"slurmstepd"):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:[") and link[8:-1] in sockets:
                    found.add(pid)
                    break
    return sorted(p for p in found if pid_alive(p))
