"""cgroup limits for the local backend's nodes, as production enforces them.

Each virtual node gets a cgroup of its own in every cgroup v1 hierarchy Slurm uses
(/sys/fs/cgroup/<controller>/simcluster/<tag>/<node>), and its slurmd starts in a cgroup
namespace rooted there, with those hierarchies mounted again in its mount namespace. So
the node's slurmd sees its own cgroup as the root, makes its /slurm/uid_N/job_N/step_N
tree there (/slurm_<node>/... with Debian's multiple-slurmd build) as on a host of its
own, and
proctrack/cgroup, task/cgroup and cgroup.conf (ConstrainRAMSpace, ConstrainDevices,
ConstrainCores) act as in production: a job over --mem ends OUT_OF_MEMORY, a step is
killed as a whole, a task cannot open a GPU device it was not given.

On a cgroup v2 host (systemd's default: Debian 12 and 13, Ubuntu, RHEL 9) the same holds
through Slurm's cgroup/v2 plugin; see the "cgroup v2" part below (create_v2).

Needs root and cgroup v1 controllers mounted under /sys/fs/cgroup, or cgroup v2 with the
controllers Slurm uses (unavailable_reason says what is missing otherwise); `down` removes
the cluster's cgroups (remove). An ordinary user on a cgroup v2 host whose systemd delegates
a subtree to them gets the same per-node tree inside it ("delegated to an ordinary user" below).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.paths import REPO_ROOT

ROOT = Path("/sys/fs/cgroup")
# What Slurm's cgroup/v1 plugin uses: freezer (proctrack/cgroup), cpuset, memory and
# devices (task/cgroup); cpuacct for jobacct_gather/cgroup. pids goes with them so a
# node's process count is its own.
CONTROLLERS = ("freezer", "cpuset", "memory", "devices", "cpuacct", "pids")
BASE = "simcluster"
MOUNT_SOURCE = "simcluster-cgroup"  # a source no existing mount has: `mount -a` then mounts it


def _mounts(mounts_file: str = "/proc/self/mounts") -> Dict[str, str]:
    """{mount point: mount options} of the cgroup v1 hierarchies under ROOT."""
    found: Dict[str, str] = {}
    try:
        lines = open(mounts_file).read().splitlines()
    except OSError:
        return found
    for line in lines:
        f = line.split()
        if len(f) >= 4 and f[2] == "cgroup" and f[1].startswith(f"{ROOT}/"):
            found[f[1]] = ",".join(o for o in f[3].split(",") if o not in ("relatime", "noatime"))
    return found


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


def unavailable_reason() -> str:
    """Why node cgroups cannot be used here ("" when they can). An ordinary user: see
    delegation()."""
    if os.geteuid() != 0:
        return delegation().reason
    if is_v2():
        return _v2_unavailable_reason()
    have = _mounts()
    lacking = [c for c in CONTROLLERS if f"{ROOT}/{c}" not in have]
    if lacking:
        return f"cgroup v1 controllers not mounted under {ROOT}: {', '.join(lacking)}: limits are not enforced"
    return _probe(ROOT / "memory" / f"{BASE}-probe-{os.getpid()}")


def _probe(cgroup: Path) -> str:
    """Make and remove one cgroup: "" when that works, else why limits cannot be enforced."""
    try:
        cgroup.mkdir()
        cgroup.rmdir()
    except OSError as exc:
        return f"cannot make a cgroup ({exc.strerror}): limits are not enforced"
    return ""


def node_dir(controller: str, tag: str, node: str) -> Path:
    return ROOT / controller / BASE / tag / node


def _copy_cpuset(src: Path, dst: Path) -> None:
    """A cpuset cgroup takes no task until it has CPUs and memory nodes: its parent's."""
    for f in ("cpuset.cpus", "cpuset.mems"):
        if not (dst / f).read_text().strip():
            (dst / f).write_text((src / f).read_text())


NVIDIA_MAJOR = 195  # /dev/nvidiaN is char 195:N (simcluster's fake GPU devices too)


def host_gpu_minors(dev: Path = Path("/dev")) -> List[int]:
    """Minors of this host's GPU devices (/dev/nvidia0, 1, ...)."""
    return sorted(int(p.name[6:]) for p in dev.glob("nvidia[0-9]*") if p.name[6:].isdigit())


def create(tag: str, nodes: Dict[str, List[int]], gpus: Iterable[int] = ()) -> None:
    """Make each node's cgroup in every hierarchy (what exists is kept). ``nodes``: {node:
    its GPU ids}; ``gpus``: every GPU id a node could open (the cluster's, the host's).
    A node's devices cgroup denies the GPUs that are not its own, as a host has only its
    own: Slurm's ConstrainDevices then acts on the node's GPUs, as in production."""
    if is_v2():
        return create_v2(tag, nodes, gpus)
    all_gpus = sorted(set(gpus) | {g for own in nodes.values() for g in own})
    for c in CONTROLLERS:
        parent = ROOT / c
        for d in (parent / BASE, parent / BASE / tag):
            d.mkdir(parents=True, exist_ok=True)
            if c == "cpuset":
                _copy_cpuset(d.parent, d)
        for n in nodes:
            d = parent / BASE / tag / n
            d.mkdir(exist_ok=True)
            if c == "cpuset":
                _copy_cpuset(d.parent, d)
            elif c == "devices":
                _deny(d / "devices.deny", [g for g in all_gpus if g not in nodes[n]])


def _deny(path: Path, minors: List[int]) -> None:
    """One devices.deny rule per GPU minor (the kernel takes one rule per write), through one
    open file: N nodes with a GPU each are N*(N-1) rules (65,280 at 256 nodes), and an
    open and close per rule cost ~2 s of a 256-node `up`."""
    if not minors:
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        for g in minors:
            os.write(fd, f"c {NVIDIA_MAJOR}:{g} rwm".encode())
    finally:
        os.close(fd)


def remove(tag: str) -> List[str]:
    """Remove the cluster's cgroups, deepest first (Slurm's own job and step cgroups below a
    node's included); return those that could not be removed (a process still in one)."""
    if is_v2():
        return remove_v2(tag)
    left: List[str] = []
    for c in CONTROLLERS:
        top = ROOT / c / BASE / tag
        if not top.is_dir():
            continue
        left += _remove_tree(top)
        try:
            os.rmdir(ROOT / c / BASE)  # the last cluster's down leaves nothing of simcluster
        except OSError:
            pass  # another cluster's cgroups are still in it
    return left


def remove_nodes(tag: str, nodes: List[str]) -> List[str]:
    """Remove the cgroups of ``nodes`` only (nodes leaving a running cluster), deepest
    first; return those that could not be removed (a process still in one)."""
    if is_v2():
        return remove_nodes_v2(tag, nodes)
    left: List[str] = []
    for c in CONTROLLERS:
        for n in nodes:
            top = node_dir(c, tag, n)
            if top.is_dir():
                left += _remove_tree(top)
    return left


def _remove_tree(top: Path) -> List[str]:
    """rmdir every cgroup under ``top`` and ``top`` itself, deepest first (a cgroup goes only
    once empty of children and processes); the paths that could not be removed."""
    left: List[str] = []
    for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
        try:
            os.rmdir(dirpath)
        except OSError:
            left.append(dirpath)
    return left


def leftovers(tag: str) -> List[str]:
    if is_v2():
        return [str(p) for p in (ROOT / V2_BASE / tag,) if p.exists()]
    return [str(ROOT / c / BASE / tag) for c in CONTROLLERS if (ROOT / c / BASE / tag).exists()]


def fstab_lines(mounts_file: str = "/proc/self/mounts") -> List[str]:
    """fstab lines that give a node this host's cgroup v1 layout, seen from its own cgroup
    namespace: a fresh tmpfs over /sys/fs/cgroup, then the hierarchies of CONTROLLERS (those
    the node has a cgroup in; each mount is CPU time of every node's start), and name=systemd
    (Slurm's cgroup version probe stats /sys/fs/cgroup/systemd and fails without it), mounted in it
    (in a node's cgroup namespace the mount's root is the node's cgroup, cgroup_namespaces(7)).
    Not over the host's own mounts: the kernel refuses a second mount of a hierarchy on the
    root of a mount of it (EBUSY); X-mount.mkdir makes the mount points in the tmpfs."""
    lines = [f"{MOUNT_SOURCE} {ROOT} tmpfs rw,nosuid,nodev,noexec,mode=755 0 0"]
    lines += [f"{MOUNT_SOURCE} {point} cgroup {opts},X-mount.mkdir 0 0"
              for point, opts in sorted(_mounts(mounts_file).items())
              if point.rsplit("/", 1)[1] in CONTROLLERS or "name=systemd" in opts.split(",")]
    return lines


def procs_files(tag: str) -> List[str]:
    """The node's cgroup.procs files in every hierarchy of CONTROLLERS (NODE_TOKEN for the
    node's name): what join_script writes to, for simcluster-node-start's --cgroup-procs."""
    return [f"{ROOT}/{c}/{BASE}/{tag}/{NODE_TOKEN}/cgroup.procs" for c in CONTROLLERS]


def join_script(tag: str) -> str:
    """sh text run before the node's namespaces are made: the shell moves itself into the
    node's cgroups ("$0" is the node's name), then execs the rest of the argv, which makes
    the cgroup namespace: it is rooted where the process is when it is made (on cgroup v2
    the namespace exists already: join_script_v2)."""
    dirs = " ".join(f"{ROOT}/{c}/{BASE}/{tag}" for c in CONTROLLERS)
    return f'for d in {dirs}; do echo $$ > "$d/$0/cgroup.procs" || exit 1; done; exec "$@"'


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


def is_v2(root: Path = ROOT) -> bool:
    """A unified (cgroup v2 only) host."""
    return (root / "cgroup.controllers").exists()


def _controllers(path: Path) -> List[str]:
    try:
        return (path / "cgroup.controllers").read_text().split()
    except OSError:
        return []


def _release(version: Optional[str]) -> Optional[tuple]:
    m = re.search(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _v2_unavailable_reason() -> str:
    lacking = [c for c in V2_NEEDED if c not in _controllers(ROOT)]
    if lacking:
        return f"cgroup v2 without the {', '.join(lacking)} controller(s): limits are not enforced"
    if not find_program("unshare"):
        return "no 'unshare' program (util-linux): limits are not enforced"
    return _probe(ROOT / f"{V2_BASE}-probe-{os.getpid()}")


def find_program(name: str) -> Optional[str]:
    from provisioner.cluster.model.command_runner import find_binary  # the same lookup as the node start chain
    return find_binary(name)


def v2_node_dir(tag: str, node: str, root: Path = ROOT) -> Path:
    return root / V2_BASE / tag / node


def cgroup_ns_path(tag: str, node: str) -> str:
    """The file that keeps node ``node``'s cgroup namespace (NODE_TOKEN works as ``node``)."""
    return f"{CGNS_DIR}/{tag}-{node}"


def _enable(path: Path, controllers: Iterable[str]) -> None:
    """Give ``controllers`` to the children of ``path`` (those it has and does not give yet)."""
    have = _controllers(path)
    given = (path / "cgroup.subtree_control").read_text().split()
    todo = [c for c in controllers if c in have and c not in given]
    if todo:
        (path / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in todo))


def _v2_parents(tag: str, root: Path = ROOT) -> List[str]:
    """Make /simcluster/<tag> with the controllers given down to its nodes; the controllers."""
    wanted = [c for c in V2_WANTED if c in _controllers(root)]
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
    left = _remove_tree(top) if top.is_dir() else []
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
            left += _remove_tree(d)
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
    release = _release(slurm_version)
    return "disabled" if release and release >= (24, 5) else "cgroup/v1"


# -- cgroup v2 delegated to an ordinary user ---------------------------------------------------
#
# Without root no cgroup of /sys/fs/cgroup/simcluster can be made, but a cgroup v2 host whose
# systemd runs a user manager for the user (a login, or `loginctl enable-linger USER`) gives
# them a subtree of their own: user@UID.service is Delegate=yes (Debian 12: the pids, memory
# and cpu controllers; an admin's drop-in can add cpuset), and `systemd-run --user --scope -p
# Delegate=yes` makes a scope there that belongs to the user, with the calling process in it
# (systemd, which may move the process there; the user may not, from a cgroup outside that
# subtree). Each start of a node runs in a scope of its own (scope_argv): that scope is the
# node's N of the v2 part above, whatever its name, and the node's chain makes in it what
# create_v2 makes as root: the starter and init leaves, system.slice with the controllers
# given down, and a cgroup namespace rooted at N, made by the first process while it is still
# in N (SCOPE_JOIN_SCRIPT); the node's mount namespace then mounts N as its /sys/fs/cgroup and
# moves its pid 1 into N/init, as root's do. Slurm's cgroup/v2 plugin in the node's slurmd,
# in the cluster's user namespace and as the user who owns N, makes its slurmstepd scope, job
# and step cgroups there and writes memory.max (--mem), cpuset.cpus (cores, where cpuset is
# delegated) and cgroup.kill/freeze (whole-step kill). The scope is made anew at every start
# (a cgroup namespace cannot be kept for it: systemd removes an empty scope), and it goes with
# the node's last process, so `down` has no cgroup to remove.
#
# Devices: Slurm confines them with eBPF programs attached to job cgroups, which the kernel
# lets only a process with CAP_BPF/CAP_SYS_ADMIN in the initial user namespace load: an
# ordinary user's nodes keep ConstrainDevices off, and jobs see every GPU (the TaskProlog maps
# Slurm's indices to the node's own, as without cgroups).

# What Slurm's cgroup/v2 needs delegated for the limits it enforces here: memory (--mem,
# task/cgroup's ConstrainRAMSpace); cpuset for ConstrainCores, where delegated.
DELEGATED_NEEDED = ("memory",)
# The unit name of a node's scope: the cluster's tag, the node, the starting shell's pid (a
# node started again while systemd still removes its last scope gets a new one).
SCOPE_UNIT_PREFIX = "simcluster-"
# Run in the node's fresh scope N, as root of the cluster's user namespace ("$0" the node's
# name): the leaves and system.slice in N, then a cgroup namespace rooted at N (unshare,
# while this process is N's only one), in which the shell moves itself into N/starter and
# gives N's and system.slice's children the controllers N has; then the rest of the chain.
# INVOCATION_ID (systemd-run sets it) would tell slurmd that systemd started it, and slurmd
# would then stay in /init instead of moving into its slurmstepd scope, as root's do.
SCOPE_JOIN_SCRIPT = (
    'read l < /proc/self/cgroup; n=/sys/fs/cgroup${{l#0::}}; '
    'mkdir -p "$n/{outer}" "$n/{init}" "$n/system.slice" || exit 1; unset INVOCATION_ID; '
    "exec {unshare} --cgroup {sh} -c '"
    'echo $$ > "$0/{outer}/cgroup.procs" || exit 1; c=; '
    'for x in $(cat "$0/cgroup.controllers"); do case " {wanted} " in *" $x "*) c="$c +$x";; esac; done; '
    'for d in "$0" "$0/system.slice"; do [ -z "$c" ] || echo $c > "$d/cgroup.subtree_control" || exit 1; done; '
    "exec \"$@\"' \"$n\" \"$@\"")


# Preloaded into the node's slurmd (nodestart/simcluster-cgroup-chown.c, built by `make setup`):
# Slurm chowns each cgroup it makes to root, who has no id in the node's user namespace.
CHOWN_SHIM = REPO_ROOT / "nodestart" / "build" / "libsimcluster-cgroup-chown.so"


class Delegation:
    """What an ordinary user's systemd delegates to them here: ``reason`` "" when the nodes
    can have cgroups in it, else why not (one line, for status); ``controllers`` those a scope
    of theirs has; ``runtime_dir`` where their user manager listens."""

    def __init__(self, reason: str, controllers: Sequence[str] = (), runtime_dir: str = "") -> None:
        self.reason, self.controllers, self.runtime_dir = reason, list(controllers), runtime_dir

    @property
    def cores(self) -> bool:
        return "cpuset" in self.controllers


ROOTLESS_V1 = ("rootless on cgroup v1: no cgroup can be made without root, so --mem, devices and cores are "
               "not enforced")


def user_runtime_dir(uid: int) -> str:
    """Where the user's systemd manager listens ($XDG_RUNTIME_DIR, else /run/user/UID: a
    shell without a login session, `su` or a cron job, has no XDG_RUNTIME_DIR)."""
    return os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"


def _scope_probe_argv(systemd_run: str, sh: str) -> List[str]:
    return [systemd_run, "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes",
            f"--unit={SCOPE_UNIT_PREFIX}probe-{os.getpid()}", "--", sh, "-c",
            'read l < /proc/self/cgroup; cat "/sys/fs/cgroup${l#0::}/cgroup.controllers"']


# Slurm releases whose cgroup/v2 plugin runs in a delegated scope as shown in the bookworm VM
# (tests/vm): 24.11's takes the first cgroup2 mount of the node's /proc/1/mountinfo, and an
# ordinary user's node cannot unmount the host's (a mount locked by the user namespace).
DELEGATED_SLURM_BELOW = (23, 0)


LINGER_DIR = "/var/lib/systemd/linger"  # logind's: a file per user whose manager runs without a login


def delegation(slurm_version: Optional[str] = None, root: Path = ROOT, linger_dir: str = LINGER_DIR) -> Delegation:
    """Whether this ordinary user's nodes can have cgroups here: a cgroup v2 host, a Slurm
    release whose cgroup/v2 runs there, systemd's user manager answering (systemd-run --user
    makes a delegated scope, the probe's process reads the controllers it has there), and
    the memory controller among them. The manager must linger (run without a login): it
    stops at the user's last logout, and the nodes in its scopes with it."""
    if not is_v2(root):
        return Delegation(ROOTLESS_V1)
    release = _release(slurm_version)
    if release and release >= DELEGATED_SLURM_BELOW:
        return Delegation(f"rootless on cgroup v2: the nodes' cgroups in a user's delegated subtree are made for "
                          f"Slurm 22.05's cgroup plugin, not yet for this host's {slurm_version}: limits are not "
                          "enforced")
    lacking = [c for c in DELEGATED_NEEDED if c not in _controllers(root)]
    if lacking:
        return Delegation(f"rootless: cgroup v2 without the {', '.join(lacking)} controller(s): limits are not enforced")
    systemd_run, sh = find_program("systemd-run"), find_program("sh") or "/bin/sh"
    if not CHOWN_SHIM.exists():
        return Delegation(f"rootless on cgroup v2: {CHOWN_SHIM.name} is not built (make setup builds it: "
                          "Slurm's cgroup plugin needs it in a user namespace): limits are not enforced")
    if not systemd_run:
        return Delegation("rootless on cgroup v2 without systemd (no systemd-run): no cgroup is delegated to this "
                          "user, so --mem, devices and cores are not enforced")
    user = _user_name()
    if not os.path.exists(os.path.join(linger_dir, user)):
        # Without lingering the manager stops at the user's last logout, and with it every
        # scope it holds: the nodes would die then.
        return Delegation(f"rootless on cgroup v2: this user's systemd manager, which would hold the nodes' cgroups, "
                          f"stops (with the nodes) at the last logout unless it lingers: `loginctl enable-linger "
                          f"{user}`, then up again. Until then --mem, devices and cores are not enforced")
    runtime = user_runtime_dir(os.getuid())
    env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
    try:
        res = subprocess.run(_scope_probe_argv(systemd_run, sh), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=30, env=env, stdin=subprocess.DEVNULL)
        ok, out = res.returncode == 0, (res.stdout.strip() if res.returncode == 0 else res.stderr.strip())
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, out = False, str(exc)
    if not ok:
        return Delegation(f"rootless on cgroup v2: this user's systemd manager gave no delegated cgroup "
                          f"(systemd-run --user: {out.splitlines()[-1][:160] if out else 'failed'}): --mem, devices "
                          "and cores are not enforced")
    have = out.split()
    lacking = [c for c in DELEGATED_NEEDED if c not in have]
    if lacking:
        return Delegation(f"rootless on cgroup v2: this user's systemd delegates no {', '.join(lacking)} controller "
                          f"(it delegates: {' '.join(have) or 'none'}; an admin adds them with a drop-in for "
                          "user@.service: Delegate=cpu cpuset io memory pids): limits are not enforced")
    return Delegation("", have, runtime)


def _user_name() -> str:
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def scope_argv(tag: str, runtime_dir: str) -> List[str]:
    """The argv prefix that starts a node (NODE_TOKEN: its name) in a delegated scope of its
    own, in this host's namespaces (systemd must see the user's own process): systemd-run
    execs the rest, keeping the pid."""
    sh = find_program("sh") or "/bin/sh"
    return [sh, "-c", f'r=$1; shift; XDG_RUNTIME_DIR={shlex.quote(runtime_dir)} exec "$r" --user --scope --quiet '
                      f'--collect -p Delegate=yes --unit="{SCOPE_UNIT_PREFIX}{tag}-$0-$$" -- "$@"',
            NODE_TOKEN, find_program("systemd-run") or "systemd-run"]


def preload_argv() -> List[str]:
    """What comes right before slurmd in the node's chain: CHOWN_SHIM preloaded."""
    return [find_program("env") or "env", f"LD_PRELOAD={CHOWN_SHIM}"]


def scope_join_script() -> str:
    """SCOPE_JOIN_SCRIPT with its programs by absolute path ("$0": the node's name, unused)."""
    return SCOPE_JOIN_SCRIPT.format(outer=V2_OUTER, init=V2_INIT, wanted=" ".join(V2_WANTED),
                                    unshare=shlex.quote(find_program("unshare") or "unshare"),
                                    sh=shlex.quote(find_program("sh") or "/bin/sh"))


def stop_scopes(tag: str, runtime_dir: str) -> None:
    """Stop the cluster's node scopes that are left (a process that outlived its node's
    kill): systemd kills what is in them and removes their cgroups."""
    systemctl = find_program("systemctl")
    if not systemctl:
        return
    subprocess.run([systemctl, "--user", "stop", f"{SCOPE_UNIT_PREFIX}{tag}-*.scope"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
                   env=dict(os.environ, XDG_RUNTIME_DIR=runtime_dir), stdin=subprocess.DEVNULL)
