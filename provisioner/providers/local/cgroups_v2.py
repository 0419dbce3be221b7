"""cgroup v2 for the local backend's nodes (as root): a cgroup and a cgroup namespace per
node under /sys/fs/cgroup/simcluster/<tag>, the node's fstab and join script for them,
Slurm's CgroupPlugin for the host, and what systemd would have made for slurmd on a v2 host
without systemd. The why of the layout is in the comment below; cgroups.py picks v1 or v2.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.providers.local.cgroupfs import (MOUNT_SOURCE, NVIDIA_MAJOR, ROOT, controllers_of, find_program,
                                                  is_v2, probe, remove_tree, slurm_release)

# Where systemd's D-Bus listens: Slurm 22.05's cgroup/v2 plugin asks systemd for each
# slurmd's slurmstepd scope through it.
DBUS_SOCKET = "/run/dbus/system_bus_socket"
V2_SLICE = "system.slice"  # where slurmd puts its <node>_slurmstepd.scope
V2_CONTROLLERS = "+cpuset +cpu +memory +pids"


def v2_without_systemd(root: Path = ROOT, dbus_socket: str = DBUS_SOCKET) -> bool:
    """A cgroup v2 host with no systemd to ask (a container, a VM without systemd): Slurm's
    cgroup/v2 plugin, which slurmd loads whatever ProctrackType says, then stops slurmd
    ("cannot connect to dbus system daemon") unless cgroup.conf says IgnoreSystemd=yes."""
    return (root / "cgroup.controllers").exists() and not os.path.exists(dbus_socket)


def prepare_v2_without_systemd(root: Path = ROOT) -> str:
    """What systemd would have made for slurmd (as root): system.slice, and the controllers
    Slurm checks enabled for the children of the root and of the slice. Returns what could
    not be done ("" when all was); slurmd then says why in its log."""
    problems = []
    try:
        (root / V2_SLICE).mkdir(exist_ok=True)
    except OSError as exc:
        return f"cannot make {root / V2_SLICE}: {exc.strerror}"
    for parent in (root, root / V2_SLICE):
        try:
            (parent / "cgroup.subtree_control").write_text(V2_CONTROLLERS)
        except OSError as exc:
            problems.append(f"{parent}/cgroup.subtree_control: {exc.strerror}")
    return "; ".join(problems)


# -- cgroup v2 ----------------------------------------------------------------------------
#
# Slurm's cgroup/v2 plugin (22.05) in slurmd puts the node's job steps under
# <mount>/system.slice/<NodeName>_slurmstepd.scope/job_J/step_S/..., makes that scope itself
# where cgroup.conf says IgnoreSystemd=yes (else it asks systemd for a unit of that name,
# one name per host: two clusters' node1 would share it), and then moves itself into the
# scope's "slurmd" child. So each node gets a cgroup of its own,
# /sys/fs/cgroup/simcluster/<tag>/<node> (N), and a cgroup namespace rooted at N that its
# slurmd starts in, with cgroup2 mounted again in its mount namespace: there "/" is N, and
# /system.slice/node1_slurmstepd.scope is N's own, whatever other cluster has a node1.
#
# cgroup v2 lets a cgroup hold processes or give its children controllers, not both (the
# "no internal process" rule): N gives them (its subtree_control), so the node's starter
# and pid 1 live in N/init (the starter's outer half in N/starter), and a namespace rooted at N can only be made by a process in N
# while N gives nothing yet. That is why the namespace is made once per node, when N is
# made (a process in N unshares it and `unshare --cgroup=FILE` keeps it at FILE, as `ip
# netns` keeps a network namespace), and every start of the node joins N/init and then
# enters that namespace (setns): slurmd then sees itself in /init, N as the root.
#
# Devices: Slurm's eBPF program on each job and step denies the node's GPUs a job was not
# given; the GPUs of the other nodes, which every node of this host can see, are denied
# by one more program on N (deny_devices_v2), which the kernel runs too (attached with
# BPF_F_ALLOW_MULTI: a device opens only where every program of the cgroup's ancestors
# lets it).
#
# Nothing of this is a systemd unit: systemd leaves cgroups it did not make alone, and a
# controller that a child cgroup gives on cannot be taken from its parent.

V2_BASE = "simcluster"
# What Slurm's cgroup/v2 plugin checks for (cpuset, cpu, memory; io where it exists) and
# pids, so a node's process count is its own.
V2_WANTED = ("cpuset", "cpu", "io", "memory", "pids")
V2_NEEDED = ("cpuset", "cpu", "memory", "pids")
V2_INIT = "init"  # the leaf where the node's pid 1 and daemon live
# The leaf of the node's starter's process outside its PID namespace (simcluster-node-start's
# outer half, or `unshare` in the chain): Slurm 24.11's cgroup/v2 refuses a cgroup that
# holds processes from outside the namespace, so init holds only the node's own.
V2_OUTER = "starter"
CGNS_DIR = Path("/run/simcluster/cgroupns")


def v2_unavailable_reason() -> str:
    lacking = [c for c in V2_NEEDED if c not in controllers_of(ROOT)]
    if lacking:
        return f"cgroup v2 without the {', '.join(lacking)} controller(s): limits are not enforced"
    if not find_program("unshare"):
        return "no 'unshare' program (util-linux): limits are not enforced"
    return probe(ROOT / f"{V2_BASE}-probe-{os.getpid()}")


def v2_node_dir(tag: str, node: str, root: Path = ROOT) -> Path:
    return root / V2_BASE / tag / node


def cgroup_ns_path(tag: str, node: str) -> str:
    """The file that keeps node ``node``'s cgroup namespace (NODE_TOKEN works as ``node``)."""
    return f"{CGNS_DIR}/{tag}-{node}"


def _enable(path: Path, controllers: Iterable[str]) -> None:
    """Give ``controllers`` to the children of ``path`` (those it has and does not give yet)."""
    have = controllers_of(path)
    given = (path / "cgroup.subtree_control").read_text().split()
    todo = [c for c in controllers if c in have and c not in given]
    if todo:
        (path / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in todo))


def _v2_parents(tag: str, root: Path = ROOT) -> List[str]:
    """Make /simcluster/<tag> with the controllers given down to its nodes; the controllers."""
    wanted = [c for c in V2_WANTED if c in controllers_of(root)]
    _enable(root, wanted)
    for d in (root / V2_BASE, root / V2_BASE / tag):
        d.mkdir(exist_ok=True)
        _enable(d, wanted)
    return wanted


def _make_namespaces(dirs: Dict[str, Path]) -> None:
    """One cgroup namespace per node, rooted at its directory, kept at its file ({file:
    directory}): one shell moves itself into each directory in turn and runs `unshare
    --cgroup=FILE true` there (the child starts where the shell is); each directory is
    empty again once the shell moved on or exited."""
    if not dirs:
        return
    CGNS_DIR.mkdir(parents=True, exist_ok=True)
    unshare = find_program("unshare") or "unshare"
    lines = ["set -e"]
    for ns_file, d in dirs.items():
        Path(ns_file).touch()
        lines += [f"echo $$ > '{d}/cgroup.procs'", f"'{unshare}' --cgroup='{ns_file}' true"]
    proc = subprocess.run(["sh", "-c", "\n".join(lines)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode != 0:
        from provisioner.errors import StartupError
        raise StartupError(f"making the nodes' cgroup namespaces failed: {proc.stdout.strip()[-300:]}",
                           "the nodes need root and util-linux's unshare", doc="docs/troubleshooting.md#cgroup-limits-not-enforced")


def _mount_points() -> set:
    """This mount namespace's mount points, read once for a whole cluster's nodes (a file that
    keeps a namespace is one: gone after a reboot, /run being a tmpfs)."""
    try:
        with open("/proc/self/mountinfo") as f:
            return {fields[4] for fields in (line.split() for line in f) if len(fields) > 4}
    except OSError:
        return set()


def create_v2(tag: str, nodes: Dict[str, List[int]], gpus: Iterable[int] = ()) -> None:
    """What create does, on cgroup v2: each node's N with its init leaf and system.slice
    (the controllers given down to the scope slurmd makes there), its cgroup namespace, and
    on N a device program that denies the GPUs that are not the node's own."""
    wanted = _v2_parents(tag)
    all_gpus = sorted(set(gpus) | {g for own in nodes.values() for g in own})
    fresh: Dict[str, Path] = {}
    mounted = _mount_points()
    for n in nodes:
        d = v2_node_dir(tag, n)
        d.mkdir(exist_ok=True)
        if cgroup_ns_path(tag, n) not in mounted:  # no namespace kept for it yet
            fresh[cgroup_ns_path(tag, n)] = d
    # The namespaces first: a namespace is made by a process in N, which N takes only while
    # it gives no controller (a node made before has its namespace, so it is skipped).
    _make_namespaces(fresh)
    for n in nodes:
        d = v2_node_dir(tag, n)
        (d / V2_INIT).mkdir(exist_ok=True)
        (d / V2_OUTER).mkdir(exist_ok=True)
        _enable(d, wanted)
        (d / "system.slice").mkdir(exist_ok=True)
        _enable(d / "system.slice", wanted)
        from provisioner.providers.local import bpfdevices  # lazy: ctypes, only on cgroup v2
        try:
            bpfdevices.deny(d, NVIDIA_MAJOR, [g for g in all_gpus if g not in nodes[n]])
        except OSError as exc:
            from provisioner.errors import StartupError
            raise StartupError(f"cannot attach the device program that denies {n} the other nodes' GPUs "
                               f"({exc.strerror})", "the kernel needs eBPF cgroup device programs "
                               "(CONFIG_CGROUP_BPF), as Slurm's own ConstrainDevices on cgroup v2 does",
                               doc="docs/troubleshooting.md#cgroup-limits-not-enforced")


def _forget_namespaces(files: List[str]) -> None:
    """Unmount and remove the files that keep nodes' cgroup namespaces."""
    points = _mount_points()
    mounted = [f for f in files if f in points]
    if mounted:
        umount = find_program("umount") or "umount"
        subprocess.run([umount, "-l", *mounted], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for f in files:
        try:
            os.unlink(f)
        except OSError:
            pass
    for d in (CGNS_DIR, CGNS_DIR.parent):  # the last cluster's down leaves nothing of simcluster
        try:
            os.rmdir(d)
        except OSError:
            pass  # another cluster's namespaces are still in it


def remove_v2(tag: str) -> List[str]:
    """remove, on cgroup v2: the namespaces' files, then the tree, deepest first."""
    try:
        files = [str(CGNS_DIR / f) for f in os.listdir(CGNS_DIR) if f.startswith(f"{tag}-")]
    except OSError:
        files = []
    _forget_namespaces(files)
    top = ROOT / V2_BASE / tag
    left = remove_tree(top) if top.is_dir() else []
    try:
        os.rmdir(ROOT / V2_BASE)
    except OSError:
        pass  # another cluster's cgroups are still in it
    return left


def remove_nodes_v2(tag: str, nodes: List[str]) -> List[str]:
    _forget_namespaces([cgroup_ns_path(tag, n) for n in nodes])
    left: List[str] = []
    for n in nodes:
        d = v2_node_dir(tag, n)
        if d.is_dir():
            left += remove_tree(d)
    return left


def fstab_lines_v2() -> List[str]:
    """The node's cgroup2 mount, seen from its cgroup namespace (its root is N), over a fresh
    tmpfs: the kernel refuses a second mount of a filesystem on the root of a mount of that
    same filesystem (EBUSY), which the host's /sys/fs/cgroup is. Two sources, so that
    `mount -a` (the start chain without simcluster-node-start) does not take the second
    line, same source and target, for one already mounted."""
    return [f"{MOUNT_SOURCE}-base {ROOT} tmpfs rw,nosuid,nodev,noexec,mode=755 0 0",
            f"{MOUNT_SOURCE} {ROOT} cgroup2 rw,nosuid,nodev,noexec 0 0"]


def join_script_v2(tag: str) -> str:
    """join_script, on cgroup v2: the shell moves itself into N/starter ("$0" is the node's
    name); the next program of the argv enters the node's cgroup namespace, and the node's
    namespace script moves pid 1 and itself on into N/init (names.namespace_prefix)."""
    return f'echo $$ > "{ROOT}/{V2_BASE}/{tag}/$0/{V2_OUTER}/cgroup.procs" || exit 1; exec "$@"'


def procs_files_v2(tag: str) -> List[str]:
    return [f"{ROOT}/{V2_BASE}/{tag}/{NODE_TOKEN}/{V2_INIT}/cgroup.procs"]


def outer_procs_file_v2(tag: str) -> str:
    """Where simcluster-node-start's outer half goes once the node's pid 1 is forked."""
    return f"{ROOT}/{V2_BASE}/{tag}/{NODE_TOKEN}/{V2_OUTER}/cgroup.procs"


def slurm_plugin(nodes_use_cgroups: bool, slurm_version: Optional[str], root: Path = ROOT) -> str:
    """cgroup.conf's CgroupPlugin. slurmd always loads a cgroup plugin, and on a cgroup v2
    host autodetect picks cgroup/v2, whose init makes the slurmstepd scope (a cgroup, or a
    systemd unit through D-Bus) and stops slurmd where it cannot: a rootless node cannot.
    Where the nodes use no cgroups (proctrack/linuxproc, no task/cgroup) the plugin is then
    one that touches nothing: "disabled" from Slurm 24.05 on (24.11's slurmd otherwise stops
    at "cannot setup the scope for cgroup"), before that cgroup/v1, whose init only sets up
    lists (it is used only by cgroup plugins)."""
    if nodes_use_cgroups or not is_v2(root):
        return "autodetect"
    return plugin_without_cgroups(slurm_version)


def plugin_without_cgroups(slurm_version: Optional[str]) -> str:
    """The CgroupPlugin of nodes that use no cgroups on a cgroup v2 host (slurm_plugin; the
    docker backend's unprivileged nodes too): "disabled" from Slurm 24.05 on, else cgroup/v1."""
    release = slurm_release(slurm_version)
    return "disabled" if release and release >= (24, 5) else "cgroup/v1"
