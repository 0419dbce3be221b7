"""Where a provider put a cluster: the facts every shared step needs and the spec does not say.

A provider computes a Placement from the cluster's state (ports, paths, users it chose
when it provisioned the machines); steps, status, export-logs and verify read it and
never ask which backend made the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from provisioner.paths import ClusterLayout
from provisioner.render import RenderInputs

CONTROLLER = "controller"  # the runner key of the controller; nodes are keyed by their names


@dataclass(frozen=True)
class NodePaths:
    """Paths as the daemons see them (the same on every machine of the cluster)."""

    etc: str
    log: str
    run: str
    spool: str
    state_save: str
    munge_key: str
    munge_socket: str
    munge_dir: str
    dev: str
    db_dir: str  # the accounting database (MariaDB's data directory and socket)

    @property
    def slurm_conf(self) -> str:
        return f"{self.etc}/slurm.conf"

    def daemon_log(self, name: str) -> str:
        return f"{self.log}/{name}.log"

    @classmethod
    def of_layout(cls, layout: ClusterLayout) -> "NodePaths":
        return cls(etc=str(layout.etc), log=str(layout.log), run=str(layout.run), spool=str(layout.spool),
                   state_save=str(layout.state_save), munge_key=str(layout.munge_key),
                   munge_socket=str(layout.munge_socket), munge_dir=str(layout.munge_dir), dev=str(layout.dev),
                   db_dir=str(layout.root / "mariadb"))


@dataclass
class Placement:
    """What the shared steps need to know about where the cluster runs."""

    paths: NodePaths
    render: RenderInputs  # template context beyond the spec
    daemon_user: str  # SlurmUser, and the owner of the accounting database
    munged_on: List[str]  # runner keys that run a munged of their own
    config_dir: Path  # on this host: where the rendered configs are written (the daemons see paths.etc)
    job_root: Path  # on this host: where verify writes job files ...
    job_root_in_cluster: str  # ... and the same directory as jobs see it
    python_bin: str  # the bin directory with the python/torchrun that jobs run
    gpus_renumbered: bool  # True: each node sees its GPUs as 0..n-1 (a machine of its own)
    client_env: Dict[str, str] = field(default_factory=dict)  # exports for Slurm commands run here (env, exec)
    extra_files: Dict[str, str] = field(default_factory=dict)  # more files for config_dir (hosts file)
    skip_files: Tuple[str, ...] = ()  # rendered files this placement does not use
    dbd_port: Optional[int] = None
    storage_port: Optional[int] = None
    controller_where: str = "this host"  # where slurmctld runs, for status and messages
    usage: str = ""  # how to use the cluster, the second line of `up`'s summary
    install_hint: str = ""  # how to get the training stack where jobs run
    # Put before `slurmd ...` (the local backend's private /etc/hosts per slurmd); empty: none.
    slurmd_prefix: Tuple[str, ...] = ()
    # The slurmd's own pid from the pid the runner started (the prefix forks: a PID
    # namespace per node); None: the same pid.
    slurmd_pid: Optional[Callable[[int], int]] = None
