"""The user namespace of a rootless cluster's network (local backend, an ordinary user).

An ordinary user may not make network devices or namespaces in this host's namespaces, but
may in a user namespace of their own, where they are root (as rootless container tools
do). One process per cluster, the holder (`unshare --user --map-root-user --net --mount
sleep infinity`, started by `up` in a session of its own), keeps three namespaces alive:

- its user namespace, which owns everything below, so the user may manage it;
- its network namespace, which plays this host's part in network.py: the parent device,
  the "host" macvlan with the subnet's first address, where the user's Slurm commands run;
- its mount namespace, where each node's network namespace is kept as a bind mount on a
  file of the cluster's directory (network_plan.Network.netns_dir; root's are in /run/netns).

network.py's functions that change the network run in there, as that namespace's root, by
the same code (call: this module as a program under `nsenter`). Nodes start in there too
(enter_argv: the node's chain as root's, then an inner user namespace that maps the user
back to itself, so slurmd and jobs run as the user), and so do the user's Slurm commands
(ClusterNetRunner: `simcluster env` puts wrappers on PATH, `simcluster exec`, and the
cluster's own checks): they need the nodes' addresses, which only that network reaches.
The holder is no daemon of the cluster (its command line does not name the cluster's
directory): `stop` leaves it, so the nodes keep their namespaces and addresses, as root's
do; `down` ends it (stop_holder), and the kernel frees everything it kept.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from typing import List, Optional, Sequence

from provisioner.cluster.model.poll import WaitTimeout, poll_until
from provisioner.cluster.model.command_runner import SYSTEM_DIRS, HostRunner, Result, find_binary
from provisioner.errors import StartupError

HOLDER_PIDFILE = "holder.pid"  # in the network's netns_dir: "<pid> <start time>"
# Where in the cluster's directory the nodes' namespaces are kept (Network.netns_dir).
NETNS_SUBDIR = "netns"


def _start_time(pid: int) -> Optional[str]:
    """Field 22 of /proc/<pid>/stat (the process's start, in clock ticks since boot): with the
    pid, it names one process for good (a pid is reused after a reboot)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def holder_pid(netns_dir: str) -> Optional[int]:
    """The pid of the cluster's holder where it runs, else None."""
    try:
        pid, started = open(os.path.join(netns_dir, HOLDER_PIDFILE)).read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(pid) if _start_time(int(pid)) == started else None


def view(netns_dir: str) -> Optional[str]:
    """The prefix under which this host sees the holder's mounts (/proc/<pid>/root), or None
    where the holder is gone (after a reboot: every namespace of the cluster with it)."""
    pid = holder_pid(netns_dir)
    return f"/proc/{pid}/root" if pid else None


def start_holder(netns_dir: str) -> int:
    """Start the cluster's holder (unless it runs) and record it; its pid."""
    pid = holder_pid(netns_dir)
    if pid:
        return pid
    os.makedirs(netns_dir, exist_ok=True)
    me = os.readlink("/proc/self/ns/user")
    try:
        proc = subprocess.Popen([find_binary("unshare") or "unshare", "--user", "--map-root-user", "--net", "--mount",
                                 "--propagation", "private", find_binary("sleep") or "sleep", "infinity"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        raise StartupError(f"could not start the cluster's user namespace: {exc}") from None

    def in_namespace():
        if proc.poll() is not None:
            return True, False
        try:
            return os.readlink(f"/proc/{proc.pid}/ns/user") != me and \
                os.path.basename(open(f"/proc/{proc.pid}/cmdline", "rb").read().split(b"\0")[0]) == b"sleep", True
        except OSError:
            return False, True
    try:
        alive = poll_until(in_namespace, 10.0, first_delay=0.001, max_delay=0.05)
    except WaitTimeout:
        alive = False
    if not alive:
        err = proc.stderr.read().decode(errors="replace").strip() if proc.poll() is not None else "it did not start"
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        raise StartupError(f"this host gives ordinary users no user namespace with a network ({err[-200:]})")
    proc.stderr.close()
    with open(os.path.join(netns_dir, HOLDER_PIDFILE), "w") as f:
        f.write(f"{proc.pid} {_start_time(proc.pid)}\n")
    _keep.append(proc)
    return proc.pid


_keep: List[subprocess.Popen] = []  # holders started here: their Popen would warn "still running"


def stop_holder(netns_dir: str) -> None:
    """End the holder (SIGKILL: it is `sleep`); the kernel frees the namespaces and devices it
    kept once the last process in them (a node's, killed before) is gone."""
    pid = holder_pid(netns_dir)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for proc in _keep:
            if proc.pid == pid:
                proc.wait()
    try:
        os.unlink(os.path.join(netns_dir, HOLDER_PIDFILE))
    except OSError:
        pass


def _nsenter(pid: int, *what: str) -> List[str]:
    return [find_binary("nsenter") or "nsenter", "--preserve-credentials",
            *(f"--{w}=/proc/{pid}/ns/{ns}" for w, ns in (("user", "user"), ("mount", "mnt"), ("net", "net"))
              if w in what)]


def call(op: str, net, keys: Sequence[str]) -> str:
    """Run network.py's ``op`` (create, delete_nodes, unplug) for ``net`` and ``keys`` as the
    root of the cluster's user namespace (starting its holder first for create); its result
    as text. Raises StartupError with the error it printed."""
    pid = start_holder(net.netns_dir) if op == "create" else holder_pid(net.netns_dir)
    if not pid:
        return "" if op != "unplug" else "False"
    argv = _nsenter(pid, "user", "mount", "net") + [
        # network.py's own entry point (it imports this module, never the other way round)
        sys.executable, "-c", "import sys; from provisioner.providers.local.network import run_in_namespace; "
        "sys.exit(run_in_namespace(sys.argv[1:]))",
        op, json.dumps(net.to_dict()), json.dumps(list(keys))]
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if res.returncode != 0:
        raise StartupError(f"making the cluster's network in its user namespace failed: "
                           f"{(res.stderr.strip() or res.stdout.strip())[-300:]}",
                           "the nodes need user namespaces and the kernel's bridge and macvlan devices",
                           doc="docs/troubleshooting.md#network-namespaces")
    return res.stdout.strip()


def enter_argv(netns_dir: str) -> List[str]:
    """The argv prefix that puts a node's chain (names.namespace_prefix's ``enter``) into the
    holder's user and mount namespaces as their root. The holder's pid is read when the node
    starts (a holder made again after a reboot has another): one shell."""
    sh, nsenter = find_binary("sh") or "/bin/sh", find_binary("nsenter") or "nsenter"
    return [sh, "-c", 'read h t < "$0" || exit 1; n=$1; shift; '
                      'exec "$n" --preserve-credentials --user=/proc/$h/ns/user --mount=/proc/$h/ns/mnt "$@"',
            os.path.join(netns_dir, HOLDER_PIDFILE), nsenter]


def wrappers_dir(netns_dir: str) -> str:
    """Where `simcluster env` writes the cluster's wrappers (bin/ beside netns/)."""
    return os.path.join(os.path.dirname(netns_dir.rstrip("/")), "bin")


def find_client(name: str, netns_dir: str) -> str:
    """The absolute path of Slurm command ``name`` as find_binary finds it, with the
    cluster's wrappers' directory left out of PATH: a shell where `simcluster env` was
    evaluated has them first, and a wrapper run from inside the cluster's namespaces would
    enter them again, from a user namespace that may not (the command then fails)."""
    if "/" in name:
        return name
    skip = os.path.abspath(wrappers_dir(netns_dir))
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and os.path.abspath(d) != skip)
    found = (shutil.which(name, path=path) if path else None) or shutil.which(name, path=os.pathsep.join(SYSTEM_DIRS))
    return os.path.abspath(found) if found else name


def client_argv(netns_dir: str, uid: int, gid: int) -> List[str]:
    """The argv prefix that runs a command as the user on the cluster's network: the
    holder's user and network namespaces, then back to the user's own ids in an inner user
    namespace (Slurm's commands must see the user's uid, which munged also sees)."""
    sh, nsenter = find_binary("sh") or "/bin/sh", find_binary("nsenter") or "nsenter"
    # The command is found on PATH without the wrappers' directory (`simcluster env`'s, in
    # the cluster's directory): the wrapper would find itself again.
    wrappers = wrappers_dir(netns_dir)
    return [sh, "-c", 'read h t < "$0" 2>/dev/null || { echo "simcluster: the cluster\'s network is gone '
                      '(simcluster start, or up again)" >&2; exit 1; }; n=$1; w=$2; shift 2; '
                      'p=; IFS=:; for d in $PATH; do [ "$d" = "$w" ] || p=${p:+$p:}$d; done; unset IFS; PATH=$p; '
                      'exec "$n" --preserve-credentials --user=/proc/$h/ns/user --net=/proc/$h/ns/net "$@"',
            os.path.join(netns_dir, HOLDER_PIDFILE), nsenter, wrappers,
            find_binary("unshare") or "unshare", "--user", f"--map-user={uid}", f"--map-group={gid}"]


def controller_argv(netns_dir: str, netns: str, uid: int, gid: int) -> List[str]:
    """The argv prefix for a daemon in the controller's namespace (``netns``, kept in the
    holder's mount namespace) as the user."""
    return [*enter_argv(netns_dir), find_binary("nsenter") or "nsenter", f"--net={netns}",
            find_binary("unshare") or "unshare", "--user", f"--map-user={uid}", f"--map-group={gid}"]


class ClusterNetRunner(HostRunner):
    """This host, with every command on the cluster's network (client_argv): Slurm's
    commands reach the nodes' addresses there. Daemons start as HostRunner starts them
    (their own prefixes say where they run)."""

    def __init__(self, base_env, netns_dir: str):
        super().__init__(base_env)
        self.netns_dir = netns_dir

    def exec_prefix(self, cwd, interactive) -> List[str]:
        return client_argv(self.netns_dir, os.getuid(), os.getgid())

    def run(self, argv, env=None, stdin=None, timeout=30.0, cwd=None) -> Result:
        argv = [str(a) for a in argv]
        full = self.exec_prefix(cwd, False) + [find_client(argv[0], self.netns_dir), *argv[1:]]
        res = super().run(full, env=env, stdin=stdin, timeout=timeout, cwd=cwd)
        return Result(argv, res.rc, res.stdout, res.stderr)

    def listening(self, port: int, addr: str = "127.0.0.1") -> bool:
        # A connect on the cluster's network, by bash's /dev/tcp (no program to install).
        return self.run(["bash", "-c", f"exec 3<>/dev/tcp/{addr}/{int(port)}"], timeout=5).ok
