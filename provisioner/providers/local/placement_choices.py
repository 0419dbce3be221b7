"""What a local cluster's placement chooses from this host (LocalProvider.placement asks
these once, at provision time, and keeps the answers in the placement): whether the
cluster needs its TaskProlog, and what `status` says the nodes' cgroups enforce.
"""

from __future__ import annotations

import glob
from typing import Dict, Optional

from provisioner.config.types import ClusterSpec
from provisioner.providers.local import names


def needs_task_prolog(spec: ClusterSpec, pid_namespace: bool) -> bool:
    """Does this cluster need its TaskProlog? Starting it costs every job step a fork and
    a shell (~2 ms of CPU, a tenth of what a trivial job costs here), so it is left out
    where nothing needs it: nodes in PID namespaces (the node's processes are found by
    their namespace, not by the marker the prolog exports), no GPUs in the spec (nothing
    to map) nor on the host (nothing to hide from jobs), and Open MPI, if any, Debian's,
    whose parameter file the nodes mount with the loopback settings (names.openmpi_params).
    """
    if not pid_namespace or spec.fake_gpus or any(n.gpus for n in spec.nodes):
        return True
    if glob.glob("/dev/nvidia[0-9]*") or names.foreign_openmpi():
        return True
    return False


# What status says of an ordinary user's GPU devices where their nodes have cgroups.
ROOTLESS_DEVICES_NOTE = ("not confined rootless: Slurm's device programs (eBPF, ConstrainDevices) need CAP_BPF in the "
                         "host's initial user namespace, so a job can open every GPU of this host (CUDA_VISIBLE_DEVICES "
                         "still names only its own)")


def enforced_note(v2: bool, scope: Optional[Dict], real_shape: bool) -> str:
    """What `status` says the nodes' cgroups enforce (Placement.node_cgroups)."""
    if not scope:
        return (f"enforced: proctrack/cgroup and task/cgroup in each node's own cgroup tree "
                f"(cgroup v{2 if v2 else 1}: --mem, GPU devices"
                + (", cores)" if real_shape else "; cores not pinned: the nodes claim more CPUs than this host has)"))
    have = scope.get("controllers", [])
    cores = ("cores" if real_shape else "cores not pinned: the nodes claim more CPUs than this host has") \
        if "cpuset" in have else ("cores not confined by cgroups: this user's systemd delegates no cpuset "
                                  "(an admin's drop-in for user@.service, Delegate=cpu cpuset io memory pids, "
                                  "gives it)" + ("; task/affinity still binds tasks to CPUs" if real_shape else ""))
    return (f"enforced: proctrack/cgroup and task/cgroup in each node's own cgroup tree, in a systemd scope "
            f"delegated to this user (cgroup v2: --mem, whole-step kill; {cores}); GPU devices {ROOTLESS_DEVICES_NOTE}")
