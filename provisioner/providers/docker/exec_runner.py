"""DockerExecRunner: one container as a Runner, through the engine's exec API (no docker CLI).

Every command is one exec. Its time limit is enforced inside the container by coreutils'
timeout (exit 124, as the Runner interface promises), so a hung command never holds an
engine request open. Standard input, when given, is written to the exec's attached
socket, so a password fed on stdin never lands in a file or on a command line.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import posixpath
import shlex
import signal
import socket
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from docker.errors import DockerException
from docker.utils.socket import consume_socket_output, demux_adaptor, frames_iter

from provisioner.cluster.model.command_runner import DEFAULT_TIMEOUT, NOT_FOUND, TIMED_OUT, Result, Runner, parse_pids_alive
from provisioner.providers.docker.engine import client


# runner.PIDS_ALIVE_SCRIPT, except that a pid written "+PID" (a daemon this process started:
# _STARTED) whose environment reads empty counts as ours: /proc/<pid>/environ reads empty
# while the process is inside execve (between the kernel's switch to the new image and its
# setting up the new stack), and a daemon that start_daemon has just forked goes through it
# twice (setsid, then the daemon), for milliseconds, or longer when the binary's pages come
# from disk (a fresh image): 4 in 300 just-started slurmctlds here. The marker was read as
# missing there and `up` reported a live slurmctld as "exited during startup" (a flaky CI
# run). Only those pids: a stale pid from the state file (after a container restart) that
# now numbers another process in the middle of an exec, this script's own subshells
# included, must still read as not ours.
PIDS_ALIVE_SCRIPT = (
    'm="$1"; shift; for a in "$@"; do p=${a#+}; s=$(sed "s/.*) //" /proc/$p/stat 2>/dev/null | cut -c1); '
    'case "$s" in ""|Z|X) echo "$p 0"; continue;; esac; '
    'if [ -n "$m" ]; then e=$({ tr "\\0" "\\n" </proc/$p/environ; } 2>/dev/null); '
    'if [ -z "$e" ] && [ "$a" != "$p" ]; then echo "$p 1"; continue; fi; '
    'if ! printf "%s\\n" "$e" | grep -qxF -- "$m"; then echo "$p 0"; continue; fi; fi; '
    'echo "$p 1"; done')

# Daemons started by this process, by container: {container: {pid, ...}} (PIDS_ALIVE_SCRIPT).
# A container that is started again numbers its processes anew: forget() drops its pids.
_STARTED: Dict[str, Set[int]] = {}


# (/proc/<pid> on this host of each container's first process, the container's id), where the
# engine runs on this host and this process sees its processes (host_proc); ("", "") if not.
_HOST_PROC: Dict[str, Tuple[str, str]] = {}


def forget(container: str) -> None:
    """The container was (re)started or removed: none of its pids is a daemon started here."""
    _STARTED.pop(container, None)
    _HOST_PROC.pop(container, None)


# File systems the engine's archive endpoint does not see as the container does (exists).
ENGINE_BLIND = ("/dev/", "/proc/", "/sys/")

# $0: this Python; $1-$3: images.py's arguments; $4: "--"; then the docker exec command.
EXEC_SCRIPT = ('case " $* " in *" --container-"*|*" sbatch "*) exec "$0" -m provisioner.providers.docker.images "$@";; '
               'esac; shift 4; exec "$@"')


# The container's boot directory (docker/entrypoint.sh): <boot_id>.pid per daemon its boot
# started, and "done" once the boot is over (or had nothing to do).
BOOT_STATE = "/run/simcluster-boot"
# How long start_daemon waits for a boot to start the daemon it asks for (the boot's own
# waits run out after 60 s each).
BOOT_ADOPT_TIMEOUT = 90.0
# One exec where the container's files cannot be read from this host: "done" or "-", the
# daemon's pid or "-", then its command line as /proc has it.
BOOT_STATUS_SCRIPT = ('d=' + BOOT_STATE + '; if [ -e "$d/done" ]; then echo done; else echo -; fi; '
                      'p=$(cat "$d/$1.pid" 2>/dev/null) || p=-; echo "$p"; '
                      '[ "$p" = - ] || cat "/proc/$p/cmdline" 2>/dev/null; true')


def boot_id(argv: List[str], log_path: str, env: Optional[Dict[str, str]]) -> str:
    """The name under which a container's boot records the daemon started with exactly
    these arguments (the provider's boot_script writes it, start_daemon looks it up)."""
    blob = json.dumps([list(map(str, argv)), str(log_path), sorted((env or {}).items())])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class DockerExecRunner(Runner):
    """Container ``container`` (a name or id) of a cluster. ``boots``: the container was
    made to start its daemons itself at its first start (BootsDaemons): start_daemon adopts
    those."""

    def __init__(self, container: str, shared: Optional[Tuple[str, str]] = None, boots: bool = False):
        self.container = container
        self.where = f"container {container}"
        # The controller's: (the cluster's shared directory here, the same in the container),
        # for the container images its commands name (exec_prefix).
        self.shared = shared
        self.boots = boots

    # -- the one primitive --------------------------------------------------------------------
    def _exec(self, argv: List[str], env=None, stdin: Optional[bytes] = None, timeout: Optional[float] = None,
              cwd: Optional[str] = None) -> Tuple[int, bytes, bytes]:
        """(exit code, stdout, stderr) of ``argv`` in the container; NOT_FOUND when the
        container is gone or stopped (the engine refuses the exec)."""
        if timeout is not None:
            # -k: a command that ignores SIGTERM is killed 2 s later.
            argv = ["timeout", "-k", "2", str(max(1, math.ceil(timeout))), *argv]
        api = client().api
        try:
            exec_id = api.exec_create(self.container, argv, stdout=True, stderr=True, stdin=stdin is not None,
                                      environment=dict(env) if env else None, workdir=cwd)["Id"]
            if stdin is None:
                out, err = api.exec_start(exec_id, demux=True)
            else:
                out, err = self._exec_with_stdin(exec_id, stdin)
            rc = api.exec_inspect(exec_id)["ExitCode"]
        except DockerException as exc:
            return NOT_FOUND, b"", f"{self.where}: {exc}".encode()
        return (NOT_FOUND if rc is None else rc), out or b"", err or b""

    @staticmethod
    def _exec_with_stdin(exec_id: str, data: bytes) -> Tuple[bytes, bytes]:
        sock = client().api.exec_start(exec_id, socket=True)
        raw = getattr(sock, "_sock", sock)

        def feed() -> None:
            # From a thread: a command that writes much before it reads all of its input
            # must not block on a full pipe while we are still writing.
            try:
                raw.sendall(data)
                raw.shutdown(socket.SHUT_WR)  # end of input: the command sees EOF
            except OSError:
                pass
        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        try:
            out, err = consume_socket_output((demux_adaptor(*f) for f in frames_iter(sock, tty=False)),
                                             demux=True)
        finally:
            writer.join(timeout=5)
            sock.close()
        return out, err

    # -- Runner -------------------------------------------------------------------------------
    def run(self, argv, env=None, stdin=None, timeout=DEFAULT_TIMEOUT, cwd=None) -> Result:
        argv = [str(a) for a in argv]
        rc, out, err = self._exec(argv, env, None if stdin is None else stdin.encode(), timeout, cwd)
        text_err = err.decode(errors="replace")
        if rc == TIMED_OUT:
            text_err += f"{argv[0]} did not finish within {timeout:.0f}s ({self.where})"
        return Result(argv, rc, out.decode(errors="replace"), text_err)

    def start_daemon(self, argv, log_path, env=None) -> int:
        argv = [str(a) for a in argv]
        pid = self._booted(argv, log_path, env) if self.boots else 0
        if pid:
            _STARTED.setdefault(self.container, set()).add(pid)
            return pid
        # setsid: the daemon gets a session of its own (no signal of the exec reaches it);
        # its parent sh exits at once, so docker-init (PID 1, --init) reaps it when it ends.
        script = f'setsid "$@" >>{shlex.quote(log_path)} 2>&1 </dev/null & echo $!'
        rc, out, err = self._exec(["sh", "-c", script, "sh", *argv], env, timeout=None)
        try:
            pid = int(out.split()[-1]) if rc == 0 else 0
        except (ValueError, IndexError):
            return 0
        if pid:
            _STARTED.setdefault(self.container, set()).add(pid)
        return pid

    def _booted(self, argv: List[str], log_path: str, env) -> int:
        """The pid of the daemon this container's boot started with exactly these arguments
        while it runs; 0 where the boot did not start it (none planned, it failed, it died
        since, the container was started again). While the boot is not over and has not
        started it yet, it is waited for: starting it here too would make two."""
        ident = boot_id(argv, log_path, env)
        want = ("\0".join(argv) + "\0").encode()
        deadline, delay = time.monotonic() + BOOT_ADOPT_TIMEOUT, 0.005
        while True:
            done, pid, cmdline = self._boot_status(ident)
            if pid:
                # Written once the process ran the daemon: the same command line, or it is gone.
                return pid if cmdline == want else 0
            if done or time.monotonic() > deadline:
                return 0
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)

    def _boot_status(self, ident: str) -> Tuple[bool, int, bytes]:
        """(the boot is over, the pid it recorded for ``ident`` or 0, that process's command
        line): read from this host where it sees the container (no exec), else one exec."""
        found = self._host_dir()
        if found is not None:
            root = found / "root"  # the container's own files, its /proc included
            state = root / BOOT_STATE.lstrip("/")
            done = (state / "done").exists()
            try:
                pid = int((state / f"{ident}.pid").read_text().strip() or 0)
            except (OSError, ValueError):
                return done, 0, b""
            try:
                return done, pid, (root / "proc" / str(pid) / "cmdline").read_bytes()
            except OSError:
                return done, pid, b""
        rc, out, _ = self._exec(["sh", "-c", BOOT_STATUS_SCRIPT, "sh", ident], timeout=10)
        if rc != 0:  # no answer (a stopped container): start_daemon's own exec says what is wrong
            return True, 0, b""
        head, _, rest = out.partition(b"\n")
        pid, _, cmdline = rest.partition(b"\n")
        return head.strip() == b"done", int(pid) if pid.strip().isdigit() else 0, cmdline

    def pids_alive(self, pids, marker=None) -> Dict[int, bool]:
        pids = [int(p) for p in pids if p]
        if not pids:
            return {}
        # One exec for all of them. After a container restart every recorded pid is stale and
        # may now number another process: the marker tells ours apart.
        started = _STARTED.get(self.container, set())
        argv = ["sh", "-c", PIDS_ALIVE_SCRIPT, "sh", marker or "",
                *(f"+{p}" if p in started else str(p) for p in pids)]
        for attempt in range(3):
            rc, out, _ = self._exec(argv, timeout=10)
            if rc == 0:
                return parse_pids_alive(out.decode(errors="replace"), pids)
            # No answer is not "dead": on a busy engine an exec can fail (the runtime's
            # exec times out, or a 5xx) while the container runs on. Only a container that
            # is gone or stopped has every pid dead.
            if attempt == 2 or not self._running():
                break
            time.sleep(0.1 * (attempt + 1))
        return {p: False for p in pids}

    def _running(self) -> bool:
        """Does the container run and take execs (not paused; False where the engine does
        not answer either)?"""
        try:
            st = client().api.inspect_container(self.container)["State"]
        except DockerException:
            return False
        return bool(st.get("Running")) and not st.get("Paused")

    def kill(self, pids, sig=signal.SIGKILL) -> None:
        pids = [str(int(p)) for p in pids if p]
        if pids:
            self._exec(["sh", "-c", f'kill -{int(sig)} "$@" 2>/dev/null; true', "sh", *pids], timeout=10)

    def read_file(self, path) -> Optional[bytes]:
        rc, out, _ = self._exec(["cat", str(path)], timeout=30)
        return out if rc == 0 else None

    def write_file(self, path, data, mode=0o644) -> None:
        """One put_archive: a tar holding the file with its mode (no exec, no shell quoting)."""
        directory, _, name = str(path).rpartition("/")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        try:
            client().api.put_archive(self.container, directory or "/", buf.getvalue())
        except DockerException as exc:
            raise OSError(f"writing {path} in {self.where}: {exc}") from None

    def exists(self, path) -> bool:
        """Asked of the engine first (a HEAD of the container's archive endpoint: ~2 ms, no
        process in the container; a docker exec of `test -e` is ~50 ms). The engine sees the
        container's image layers and its volumes and binds, not the file systems the runtime
        mounts inside (/dev, /proc, /sys) nor mounts made in the container: so it is trusted
        only where it finds the path; otherwise `test -e` in the container decides."""
        path = str(path)
        if path.startswith("/") and not posixpath.normpath(path).startswith(ENGINE_BLIND):
            api = client().api
            try:
                found = api.head(api._url("/containers/{0}/archive", self.container), params={"path": path})
                if found.status_code == 200:
                    return True
            except (DockerException, OSError, ValueError):
                pass
        return self.run(["test", "-e", path], timeout=10).ok

    def host_proc(self) -> Tuple[str, str]:
        """(/proc/<pid> of the container's first process as this host sees it, the container's
        id), or ("", "") where the engine's processes are out of sight (a remote or rootless
        engine, simcluster itself in a container). Files of the container's namespaces read
        there cost no exec (~50 ms): its net/tcp is the container's own table."""
        found = _HOST_PROC.get(self.container)
        if found is None:
            found = ("", "")
            try:
                info = client().api.inspect_container(self.container)
                pid, cid = info["State"].get("Pid") or 0, info["Id"]
                if not pid:
                    return found  # not running: asked again next time
                if cid in Path(f"/proc/{pid}/cgroup").read_text():
                    found = (f"/proc/{pid}", cid)
            except (DockerException, OSError, KeyError):
                pass
            _HOST_PROC[self.container] = found
        return found

    def _host_dir(self) -> Optional[Path]:
        """host_proc's /proc/<pid>, checked to be in the container's cgroup (a container
        started again has another first process, and its old pid may number anything), or
        None where the container cannot be read from here."""
        path, cid = self.host_proc()
        if not path:
            return None
        try:
            if cid in Path(path, "cgroup").read_text():
                return Path(path)
        except OSError:
            pass
        _HOST_PROC.pop(self.container, None)
        return None

    def _read_on_host(self, names: List[str]) -> Optional[bytes]:
        """The files ``names`` under _host_dir, or None where they cannot be read from here."""
        found = self._host_dir()
        if found is None:
            return None
        try:
            return b"".join((found / n).read_bytes() for n in names)
        except OSError:
            _HOST_PROC.pop(self.container, None)
            return None

    def listening(self, port: int, addr: str = "127.0.0.1") -> bool:
        # From this host's /proc where it sees the container's processes (no exec), else both
        # tables in one exec (the base class reads them one by one).
        out = self._read_on_host(["net/tcp", "net/tcp6"])
        if out is None:
            rc, out, _ = self._exec(["cat", "/proc/net/tcp", "/proc/net/tcp6"], timeout=10)
        want = f":{port:04X} "
        for line in out.decode(errors="replace").splitlines():
            fields = line.split()
            if len(fields) > 3 and (fields[1] + " ").endswith(want) and fields[3] == "0A":
                return True
        return False

    def exec_prefix(self, cwd, interactive) -> List[str]:
        # For the user's terminal (`simcluster exec`): the docker CLI attaches a TTY properly.
        prefix = ["docker", "exec", "-i", *(["-t"] if interactive else []), *(["-w", cwd] if cwd else []),
                  self.container]
        if not self.shared:
            return prefix
        # A command with a container option (or sbatch, whose script may name one) first
        # unpacks the dockerd:// images it names, here where the engine is (images.py); the
        # others (sinfo, squeue ...) start no Python.
        return ["sh", "-c", EXEC_SCRIPT, sys.executable, *self.shared, self.container, "--", *prefix]
