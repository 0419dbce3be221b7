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
through Slurm's cgroup/v2 plugin: cgroups_v2.py (create_v2). This module is the cgroup v1
hierarchies and the entry points that pick v1 or v2 (create, remove, remove_nodes, leftovers,
unavailable_reason); cgroupfs.py is what both read of the host.

Needs root and cgroup v1 controllers mounted under /sys/fs/cgroup, or cgroup v2 with the
controllers Slurm uses (unavailable_reason says what is missing otherwise); `down` removes
the cluster's cgroups (remove). An ordinary user on a cgroup v2 host whose systemd delegates
a subtree to them gets the same per-node tree inside it (cgroups_delegated.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, List

from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.providers.local.cgroupfs import MOUNT_SOURCE, NVIDIA_MAJOR, ROOT, is_v2, probe, remove_tree
from provisioner.providers.local.cgroups_delegated import delegation
from provisioner.providers.local.cgroups_v2 import (V2_BASE, create_v2, remove_nodes_v2, remove_v2,
                                                    v2_unavailable_reason)

# What Slurm's cgroup/v1 plugin uses: freezer (proctrack/cgroup), cpuset, memory and
# devices (task/cgroup); cpuacct for jobacct_gather/cgroup. pids goes with them so a
# node's process count is its own.
CONTROLLERS = ("freezer", "cpuset", "memory", "devices", "cpuacct", "pids")
BASE = "simcluster"


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


def unavailable_reason() -> str:
    """Why node cgroups cannot be used here ("" when they can). An ordinary user: see
    delegation()."""
    if os.geteuid() != 0:
        return delegation().reason
    if is_v2():
        return v2_unavailable_reason()
    have = _mounts()
    lacking = [c for c in CONTROLLERS if f"{ROOT}/{c}" not in have]
    if lacking:
        return f"cgroup v1 controllers not mounted under {ROOT}: {', '.join(lacking)}: limits are not enforced"
    return probe(ROOT / "memory" / f"{BASE}-probe-{os.getpid()}")


def node_dir(controller: str, tag: str, node: str) -> Path:
    return ROOT / controller / BASE / tag / node


def _copy_cpuset(src: Path, dst: Path) -> None:
    """A cpuset cgroup takes no task until it has CPUs and memory nodes: its parent's."""
    for f in ("cpuset.cpus", "cpuset.mems"):
        if not (dst / f).read_text().strip():
            (dst / f).write_text((src / f).read_text())


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
        left += remove_tree(top)
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
                left += remove_tree(top)
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
