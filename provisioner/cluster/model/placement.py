"""Where a provider put a cluster: the facts every shared step needs and the spec does not say.

A provider computes the Placement once, when it provisions the machines: there it may
look at the host (free ports, /etc/hosts, Open MPI's parameter file, tini, the CPU count)
and everything it found is recorded in the Placement, which is stored in the cluster's
state file. Every later command loads it from there without touching the host
(cluster/model/handle.py: load_placement); steps, status, export-logs and verify read it and never ask which
backend made the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from provisioner.cluster.model.command_runner import descendant_pid
from provisioner.nodepaths import NodePaths
from provisioner.render import RenderInputs

CONTROLLER = "controller"  # the runner key of the controller; nodes are keyed by their names
# The runner key of this host, where simcluster runs, whatever the backend: daemons that
# serve this host's users from here (the metrics exporter, HOST_DAEMONS in state.py) run
# there, not on one of the cluster's machines.
HOST = "host"
# Stands for the node's name in Placement.slurmd_prefix (a node's network namespace and
# cgroups are its own): daemons.slurmd_argv puts the name in.
NODE_TOKEN = "@NODE@"

__all__ = ["CONTROLLER", "HOST", "NODE_TOKEN", "NodePaths", "Placement"]


@dataclass(frozen=True)
class Placement:
    """What the shared steps need to know about where the cluster runs (plain data: it
    round-trips through the state file with to_dict / from_dict)."""

    render: RenderInputs  # template context beyond the spec; its ``paths`` are the daemons' paths
    daemon_user: str  # SlurmUser, and the owner of the accounting database
    munged_on: List[str]  # runner keys that run a munged of their own
    config_dir: Path  # on this host: where the rendered configs are written (the daemons see paths.etc)
    job_root: Path  # on this host: where verify writes job files ...
    job_root_in_cluster: str  # ... and the same directory as jobs see it
    python_bin: str  # the bin directory with the python/torchrun that jobs run
    gpus_renumbered: bool  # True: each node sees its GPUs as 0..n-1 (a machine of its own)
    client_env: Dict[str, str] = field(default_factory=dict)  # exports for Slurm commands run here (env, exec)
    # More files for config_dir, their text fixed at provision time (the hosts file, Open
    # MPI's parameter file made from the host's).
    extra_files: Dict[str, str] = field(default_factory=dict)
    dbd_port: Optional[int] = None
    # rest: true: where slurmrestd listens (cluster/services/rest.py): its port (None: Slurm's 6820)
    # and address, the controller's on the cluster's own network; "": the controller
    # machine's own address, asked when it starts (a container's).
    rest_port: Optional[int] = None
    rest_addr: str = ""
    storage_port: Optional[int] = None
    controller_where: str = "this host"  # where slurmctld runs, for status and messages
    usage: str = ""  # how to use the cluster, the second line of `up`'s summary
    install_hint: str = ""  # how to get the training stack where jobs run
    # Put before `slurmd ...` (the local backend's private /etc/hosts per slurmd); empty: none.
    slurmd_prefix: Tuple[str, ...] = ()
    # True: the prefix forks (a PID namespace per node, tini as its pid 1), so the slurmd's
    # own pid is found below the pid the runner started (slurmd_pid).
    slurmd_forks: bool = False
    # What the nodes see at /etc/slurm, Slurm's default config location (jobs that unset
    # SLURM_CONF read it): the cluster's config, or why not. Empty: not said (older states,
    # deployed clusters).
    node_etc_slurm: str = ""
    # Put before slurmctld, slurmdbd and MariaDB (the local backend's controller network
    # namespace); empty: none.
    controller_prefix: Tuple[str, ...] = ()
    # Where the host's Slurm commands and readiness checks reach the controller's daemons.
    controller_addr: str = "127.0.0.1"
    # What the nodes have of a host's network and limits, said by `status`: their network
    # (a namespace each, or the host's shared one and why) and the cgroup limits enforced
    # (or why none). Empty: not said (older states, deployed clusters).
    node_network: str = ""
    node_cgroups: str = ""
    # The nodes' boot time (what slurmd reports as uptime): their own, from each start of the
    # node (a time namespace each), or this host's and why. Empty: not said.
    node_boot_time: str = ""
    # What of a production host the nodes lack here, one line each (the network or limits
    # notes above that say why not): `up` prints them, so it is never a silent difference.
    shortfalls: List[str] = field(default_factory=list)

    @property
    def paths(self) -> NodePaths:
        """Paths as the daemons see them (the same object the templates are rendered from)."""
        return self.render.paths

    @property
    def slurmd_pid(self) -> Optional[Callable[[int], int]]:
        """Maps the pid the runner started to the slurmd's own; None: the same pid."""
        if not self.slurmd_forks:
            return None
        return lambda started: descendant_pid(started, "slurmd")

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["render"] = self.render.to_dict()
        data["config_dir"], data["job_root"] = str(self.config_dir), str(self.job_root)
        data["munged_on"], data["slurmd_prefix"] = list(self.munged_on), list(self.slurmd_prefix)
        data["controller_prefix"], data["shortfalls"] = list(self.controller_prefix), list(self.shortfalls)
        data["client_env"], data["extra_files"] = dict(self.client_env), dict(self.extra_files)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Placement":
        data = dict(data)
        data["render"] = RenderInputs.from_dict(data["render"])
        data["config_dir"], data["job_root"] = Path(data["config_dir"]), Path(data["job_root"])
        data["munged_on"], data["slurmd_prefix"] = list(data["munged_on"]), tuple(data["slurmd_prefix"])
        data["controller_prefix"] = tuple(data.get("controller_prefix", ()))
        return cls(**data)
