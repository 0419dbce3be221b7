"""Nodes are command runners (after kind's nodes): every action reaches a node through one.

A Runner runs a command and gives back a Result, starts a long-running daemon and tells
whether its pid lives, and reads and writes files, all on one machine: this host
(HostRunner, here), a container (providers/docker), or a host over SSH (providers/ssh).
Steps, checks, status and export-logs only ever talk to runners, so they never ask which
backend they are on.

One timeout convention: every call takes ``timeout`` seconds (default DEFAULT_TIMEOUT);
a command that runs past it is killed and comes back as rc 124 (like coreutils' timeout),
one that cannot be started as rc 127. ``run`` never raises for a failing command.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from provisioner.cluster.model.poll import WaitTimeout, poll_until

DEFAULT_TIMEOUT = 30.0
TIMED_OUT = 124
NOT_FOUND = 127


@dataclass
class Result:
    """What a command gave back (text, decoded with replacement)."""

    argv: List[str]
    rc: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0

    # subprocess.CompletedProcess spelling, for code that reads it either way.
    @property
    def returncode(self) -> int:
        return self.rc

    def error_line(self) -> str:
        """The last line of stderr (else stdout), or the exit code: for one-line errors."""
        lines = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return lines[-1] if lines else f"exit code {self.rc}"


class Runner:
    """The interface every node implements. ``where`` names the machine in messages."""

    where = "?"

    def run(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None, stdin: Optional[str] = None,
            timeout: float = DEFAULT_TIMEOUT, cwd: Optional[str] = None) -> Result:
        """Run ``argv``; ``env`` is added to the runner's environment (never replaces it)."""
        raise NotImplementedError

    def start_daemon(self, argv: Sequence[str], log_path: str, env: Optional[Mapping[str, str]] = None) -> int:
        """Start a foreground-mode daemon in its own session, output appended to ``log_path``;
        return its pid (as this runner's machine numbers it)."""
        raise NotImplementedError

    def pids_alive(self, pids: Iterable[int], marker: Optional[str] = None) -> Dict[int, bool]:
        """Which of ``pids`` run (a zombie is dead). Every pid is False when the machine is gone.
        With ``marker`` ("VAR=value"), a pid counts only if that line is in its environment:
        after a reboot or a container restart a recorded pid may be another process."""
        raise NotImplementedError

    def kill(self, pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to each pid that still runs."""
        raise NotImplementedError

    def read_file(self, path: str) -> Optional[bytes]:
        """A file's bytes, or None when it does not exist or cannot be read."""
        raise NotImplementedError

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Create or replace ``path`` (its directory must exist) with ``mode`` from the start."""
        raise NotImplementedError

    def exec_prefix(self, cwd: Optional[str], interactive: bool) -> List[str]:
        """What goes before a user's command to run it on this machine from a terminal here
        (`simcluster exec`, `simcluster env`); [] when it runs here as it is."""
        raise NotImplementedError

    def program(self, name: str) -> str:
        """How a daemon's argv names program ``name`` on this machine: its absolute path
        where this runner can find it (this host: PATH, then the sbin directories, whatever
        the caller's PATH), else ``name`` for the machine's own PATH to find (a container's
        root has the sbin directories on its PATH)."""
        return name

    def make_gpu_devices(self, dev_dir: str, ids: Iterable[int]) -> None:
        """Fake GPUs: character devices ``dev_dir``/nvidiaN (major 195, minor N, mode 666)
        or, without the right to mknod, links to /dev/null (Slurm only checks for a
        character device). One shell on the machine for all of them."""
        script = "; ".join(f"mknod -m 666 {dev_dir}/nvidia{g} c 195 {g} 2>/dev/null || "
                           f"ln -sf /dev/null {dev_dir}/nvidia{g}" for g in ids)
        self.run(["sh", "-c", script], timeout=30)

    # Derived helpers: the same for every runner.
    def pid_alive(self, pid: Optional[int]) -> bool:
        return bool(pid) and self.pids_alive([pid]).get(pid, False)

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path], timeout=10).ok

    def read_text(self, path: str) -> Optional[str]:
        data = self.read_file(path)
        return None if data is None else data.decode(errors="replace")

    def listening(self, port: int, addr: str = "127.0.0.1") -> bool:
        """Does something listen on TCP ``port`` of this machine (at ``addr``, where this
        runner connects to find out)? (/proc/net/tcp{,6}: no connection made, so nothing is
        logged by the daemon, and it works the same in a container.)"""
        want = f":{port:04X} "
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            text = self.read_text(table) or ""
            for line in text.splitlines()[1:]:
                fields = line.split()
                if len(fields) > 3 and (fields[1] + " ").endswith(want) and fields[3] == "0A":
                    return True
        return False


def process_alive(pid: Optional[int]) -> bool:
    """True if ``pid`` runs on this host and is not a zombie."""
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


def has_marker(pid: int, marker: str) -> bool:
    """Is ``marker`` ("VAR=value") a line of the environment of ``pid`` on this host? Where
    that environment cannot be read (root's daemons, for every other user looking at root's
    cluster: docs/users.md), its command line must name a path under the marker's value
    (the cluster's directory: every daemon's does). Such a process could not be signalled
    by the one asking either."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker.encode() in f.read().split(b"\0")
    except PermissionError:
        value = marker.partition("=")[2]
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return bool(value) and (value.rstrip("/") + "/").encode() in f.read()
        except OSError:
            return False
    except OSError:
        return False



def _children(pid: int) -> List[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


def _argv0(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return os.path.basename(f.read().split(b"\0", 1)[0].decode(errors="replace"))
    except OSError:
        return ""


def descendant_pid(started: int, program: str, timeout: float = 10.0) -> int:
    """The pid of ``program`` started on this host behind a prefix that forks (a PID
    namespace: `unshare` with pid ``started``, then tini, then ``program``): the first
    descendant that runs ``program``. ``started`` itself when the chain died or took longer
    than ``timeout``: the caller's liveness checks then see the failure and its log."""
    def found() -> Tuple[bool, int]:
        frontier, seen = [started], 0
        while frontier and seen < 16:
            pid = frontier.pop(0)
            if pid != started and _argv0(pid) == program:
                return True, pid
            frontier.extend(_children(pid))
            seen += 1
        return not os.path.exists(f"/proc/{started}"), started

    try:
        return poll_until(found, timeout, first_delay=0.001, max_delay=0.02, factor=2)
    except WaitTimeout:
        return started

# For runners that ask over a shell (containers, SSH): "<pid> <1|0>" per pid; 1 = runs, is
# no zombie, and (with a marker as $1, "" for none) has the marker in its environment.
PIDS_ALIVE_SCRIPT = (
    'm="$1"; shift; for p in "$@"; do s=$(sed "s/.*) //" /proc/$p/stat 2>/dev/null | cut -c1); '
    'case "$s" in ""|Z|X) echo "$p 0"; continue;; esac; '
    'if [ -n "$m" ] && ! { tr "\\0" "\\n" </proc/$p/environ; } 2>/dev/null | grep -qxF -- "$m"; then echo "$p 0"; '
    'else echo "$p 1"; fi; done')


def parse_pids_alive(stdout: str, pids: List[int]) -> Dict[int, bool]:
    seen = dict(line.split() for line in stdout.splitlines() if len(line.split()) == 2)
    return {p: seen.get(str(p)) == "1" for p in pids}


class ShellProcesses:
    """pids_alive and kill for a Runner that reaches its machine only through ``run`` (SSH,
    an srun task): one shell command each, with ``process_timeout`` seconds to answer."""

    process_timeout = 15.0

    def pids_alive(self, pids, marker=None) -> Dict[int, bool]:
        pids = [int(p) for p in pids]
        if not pids:
            return {}
        res = self.run(["sh", "-c", PIDS_ALIVE_SCRIPT, "sh", marker or "", *map(str, pids)],  # type: ignore[attr-defined]
                       timeout=self.process_timeout)
        return parse_pids_alive(res.stdout, pids)

    def kill(self, pids, sig=signal.SIGKILL) -> None:
        pids = [str(int(p)) for p in pids]
        if pids:
            self.run(["kill", f"-{int(sig)}", *pids], timeout=self.process_timeout)  # type: ignore[attr-defined]


# Where Debian's packages install daemons and helpers (slurmd, munged, mariadbd in /usr/sbin),
# searched after PATH: an ordinary user's PATH (Debian's default for users) has no sbin.
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def find_binary(name: str) -> Optional[str]:
    """The absolute path of program ``name``: on PATH, else in SYSTEM_DIRS, whatever the
    caller's PATH; None when not found. A name with a slash is returned as it is."""
    if "/" in name:
        return name
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(SYSTEM_DIRS))
    return os.path.abspath(found) if found else None


class HostRunner(Runner):
    """This machine: subprocess, /proc and the local filesystem."""

    where = "this host"

    def __init__(self, base_env: Optional[Mapping[str, str]] = None):
        self.base_env = dict(os.environ if base_env is None else base_env)

    def _env(self, env: Optional[Mapping[str, str]]) -> Dict[str, str]:
        full = dict(self.base_env)
        full.update(env or {})
        return full

    def run(self, argv, env=None, stdin=None, timeout=DEFAULT_TIMEOUT, cwd=None) -> Result:
        argv = [str(a) for a in argv]
        argv[0] = find_binary(argv[0]) or argv[0]
        try:
            proc = subprocess.run(argv, env=self._env(env), input=stdin, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, errors="replace", timeout=timeout, cwd=cwd)
        except subprocess.TimeoutExpired:
            return Result(argv, TIMED_OUT, "", f"{argv[0]} did not finish within {timeout:.0f}s")
        except OSError as exc:
            return Result(argv, NOT_FOUND, "", f"{argv[0]}: {exc.strerror or exc}")
        return Result(argv, proc.returncode, proc.stdout, proc.stderr)

    def make_gpu_devices(self, dev_dir, ids) -> None:
        # The same as Runner's shell, by system calls: a process per device cost ~2 ms each
        # (64 nodes: 0.13 s of up).
        for g in ids:
            path = f"{dev_dir}/nvidia{g}"
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, g))
                os.chmod(path, 0o666)  # mknod's mode is cut by the umask
            except FileExistsError:
                pass
            except OSError:
                try:
                    os.unlink(path)
                except OSError:
                    pass
                os.symlink("/dev/null", path)

    def start_daemon(self, argv, log_path, env=None) -> int:
        with open(log_path, "ab") as out:
            argv = [str(a) for a in argv]
            argv[0] = find_binary(argv[0]) or argv[0]
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=self._env(env), start_new_session=True,
                                    close_fds=True)
        _started.append(proc)  # keep the Popen: its __del__ would otherwise warn "still running"
        return proc.pid

    def pids_alive(self, pids, marker=None) -> Dict[int, bool]:
        reap_children()
        # A daemon this process started a moment ago may not show its environment yet
        # (/proc/<pid>/environ reads empty until exec completes: ~1 start in 8 on a busy
        # 2-core host); it is ours whatever it shows, so its marker is not asked.
        ours = {proc.pid for proc in _started}
        return {pid: bool(pid) and process_alive(pid) and (marker is None or pid in ours or has_marker(pid, marker))
                for pid in pids}

    def kill(self, pids, sig=signal.SIGKILL) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def read_file(self, path) -> Optional[bytes]:
        try:
            return Path(path).read_bytes()
        except OSError:
            return None

    def write_file(self, path, data, mode=0o644) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.fchmod(fd, mode)
            os.write(fd, data)
        finally:
            os.close(fd)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def exec_prefix(self, cwd, interactive) -> List[str]:
        return []  # this host, in the caller's own directory

    def program(self, name: str) -> str:
        return find_binary(name) or name

    def listening(self, port: int, addr: str = "127.0.0.1") -> bool:
        # Here a connect() is cheaper: /proc/net/tcp lists every socket of the host, TIME_WAIT
        # ones included (each Slurm RPC leaves one for 60 s), and took ~12 ms to read after a
        # few clusters had come and gone, against 0.03 ms for a connect to a loopback port.
        # ``addr``: a daemon in the controller's network namespace listens there, not on
        # this host's loopback.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.2)
            return s.connect_ex((addr, port)) == 0


_started: List[subprocess.Popen] = []


def reap_children() -> None:
    """Collect exited daemons this process started, so that they do not linger as zombies."""
    for proc in list(_started):
        if proc.poll() is not None:
            _started.remove(proc)
