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

Needs root and cgroup v1 controllers mounted under /sys/fs/cgroup (unavailable_reason says
what is missing otherwise); `down` removes the cluster's cgroups (remove).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, List

from provisioner.cluster.placement import NODE_TOKEN

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
    """Why node cgroups cannot be used here ("" when they can)."""
    if os.geteuid() != 0:
        return "rootless: no cgroup can be made without root, so --mem, devices and cores are not enforced"
    if (ROOT / "cgroup.controllers").exists():
        return ("this host has cgroup v2 only (simcluster enforces limits on cgroup v1 hosts so far): "
                "--mem, devices and cores are not enforced")
    have = _mounts()
    lacking = [c for c in CONTROLLERS if f"{ROOT}/{c}" not in have]
    if lacking:
        return f"cgroup v1 controllers not mounted under {ROOT}: {', '.join(lacking)}: limits are not enforced"
    probe = ROOT / "memory" / f"{BASE}-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
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
    the cgroup namespace: it is rooted where the process is when it is made."""
    dirs = " ".join(f"{ROOT}/{c}/{BASE}/{tag}" for c in CONTROLLERS)
    return f'for d in {dirs}; do echo $$ > "$d/$0/cgroup.procs" || exit 1; done; exec "$@"'
