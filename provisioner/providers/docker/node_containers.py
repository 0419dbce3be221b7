"""A docker cluster's containers as the engine makes them: their names and network, the
mounts and the paths the daemons see inside (CONTAINER_PATHS), Slurm's default ports (each
container has its own network namespace), the SDK's run() arguments of the controller and
of each node (container_config), and the script that leaves a --privileged node only its
own GPU devices. The provider (provider.py) makes and starts them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Dict, List, Optional

from docker.types import DeviceRequest, Mount

from provisioner.cluster.model.placement import CONTROLLER
from provisioner.cluster.services import fakegpus
from provisioner.config.types import ClusterSpec
from provisioner.nodepaths import MUNGE_DEFAULT_SOCKET, NodePaths
from provisioner.paths import ClusterLayout
from provisioner.providers.docker.engine import (LABEL_CLUSTER, LABEL_FAKE, LABEL_GPUS, LABEL_NODE, LABEL_ROLE,
                                                 LABEL_SPEC, LABEL_SPEC_JSON, LABEL_STATE)

CONTROLLER_HOST = "slurmctld"
CONFIG_MOUNT = "/etc/simcluster"
# The same directory again where Slurm's commands look when SLURM_CONF is not set, as on a
# production node (the image's own /etc/slurm, from the Debian packages, is covered).
ETC_SLURM = "/etc/slurm"
SHARED_MOUNT = "/shared"
# The container plugin's state directory below it (render.py): images unpacked, step layers.
CONTAINERS_DIR = "containers"
# Slurm's and MySQL's default ports: each container has its own network namespace.
CONTROLLER_PORT, SLURMD_PORT, DBD_PORT, STORAGE_PORT = 6817, 6818, 6819, 3306
CONTAINER_PATHS = NodePaths(etc=CONFIG_MOUNT, log="/var/log/slurm", run="/run/slurm", spool="/var/spool/slurmd",
                            state_save="/var/spool/slurmctld", munge_key=f"{CONFIG_MOUNT}/munge.key",
                            munge_socket=MUNGE_DEFAULT_SOCKET,  # munge's default: client commands find it
                            munge_dir="/run/munge", dev="/dev", db_dir="/var/lib/simcluster-db", root=SHARED_MOUNT)


def container_name(cluster: str, node: Optional[str] = None) -> str:
    return f"simcluster-{cluster}-{node or 'ctl'}"


def network_name(cluster: str) -> str:
    return f"simcluster-{cluster}"


def spec_digest(spec: ClusterSpec) -> str:
    return hashlib.sha256(json.dumps(spec.identity(), sort_keys=True).encode()).hexdigest()[:16]


def container_config(spec: ClusterSpec, layout: ClusterLayout, image_tag: str, node: Optional[str],
                     cgroups: bool = False, apparmor: bool = False) -> Dict:
    """The SDK's containers.run() arguments for the controller (``node`` None) or a node.
    ``cgroups``: the nodes enforce limits (cgroups_note): each node container gets a cgroup
    namespace of its own, so its slurmd sees the container's cgroup as the root.
    Nodes get CAP_SYS_ADMIN for the container options' mounts (a mount namespace, an overlay
    and binds per step, docs/containers.md); ``apparmor``: the engine confines containers
    with AppArmor, whose docker-default profile denies every mount, so nodes run unconfined."""
    labels = {LABEL_CLUSTER: spec.name, LABEL_ROLE: "node" if node else "controller", LABEL_SPEC: spec_digest(spec),
              LABEL_STATE: str(layout.root), LABEL_FAKE: str(spec.fake_gpus).lower()}
    config: Dict = dict(
        image=image_tag, name=container_name(spec.name, node), hostname=node or CONTROLLER_HOST,
        network=network_name(spec.name), detach=True, init=True,  # docker-init reaps exec'd daemons
        # SIMCLUSTER_MACHINE: the runner key, which names the container's boot script.
        environment={"SLURM_CONF": f"{CONFIG_MOUNT}/slurm.conf", "SIMCLUSTER_MACHINE": node or CONTROLLER},
        volumes={str(layout.etc): {"bind": CONFIG_MOUNT, "mode": "ro"},
                 str(layout.root / "shared"): {"bind": SHARED_MOUNT, "mode": "rw"}},
        mounts=[Mount(ETC_SLURM, str(layout.etc), type="bind", read_only=True)],
        privileged=spec.privileged)
    if node:
        gpus = spec.node(node).gpus
        labels[LABEL_NODE] = node
        labels[LABEL_GPUS] = ",".join(map(str, gpus))
        if cgroups:
            config["cgroupns"] = "private"
        if not spec.privileged:  # --privileged has every capability and no AppArmor profile
            config["cap_add"] = ["SYS_ADMIN"]
            # Slurm's own `srun --container` runs crun, which needs pivot_root and a session
            # keyring: docker's default seccomp profile refuses both even with CAP_SYS_ADMIN
            # (checked on this engine). kind's nodes run --privileged for the same reasons.
            config["security_opt"] = ["seccomp=unconfined"] + (["apparmor=unconfined"] if apparmor else [])
        if gpus and spec.fake_gpus:  # simcluster's nvidia-smi, on every PATH (provisioner/cluster/services/fakegpus)
            config["mounts"].append(Mount(fakegpus.CONTAINER_SHIM, str(fakegpus.shim_path(layout.etc)), type="bind",
                                          read_only=True))
        if gpus and not spec.fake_gpus:  # only this node's GPUs: inside they are 0..n-1
            config["device_requests"] = [DeviceRequest(device_ids=[",".join(map(str, gpus))],
                                                       capabilities=[["gpu"]])]
    else:
        labels[LABEL_SPEC_JSON] = json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"))
    config["labels"] = labels
    return config


def foreign_gpus_script(own: List[int]) -> str:
    """Removes the /dev/nvidiaN nodes of GPUs that are not ``own``: a --privileged container
    gets every device of the host, and a node must hold only its own GPUs (Slurm's device
    cgroups deny only the node's GPUs that a job was not given)."""
    keep = "|".join(map(str, own)) or "none"
    return (f'for d in /dev/nvidia[0-9]*; do [ -e "$d" ] || continue; '
            f'case "${{d#/dev/nvidia}}" in {keep}) ;; *) rm -f "$d";; esac; done')

