"""The paths of a cluster as its daemons and jobs see them (NodePaths).

On the local backend they are the cluster's directory on this host (ClusterLayout); in
containers they are fixed paths inside the image and the mounts. The config templates
take every path from here (render.py), and so do the shared steps (daemon command lines,
log tails), so no backend needs a host layout it does not have.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict

from provisioner.paths import ClusterLayout

# Where munged puts its socket when not told otherwise, and where Slurm's and munge's
# client commands look first: daemons that use it need no AuthInfo=socket= line.
MUNGE_DEFAULT_SOCKET = "/run/munge/munge.socket.2"


@dataclass(frozen=True)
class NodePaths:
    """Paths as the daemons see them (the same on every machine of the cluster)."""

    etc: str  # the configs (slurm.conf, the munge key, the TaskProlog, the hosts file)
    log: str
    run: str
    spool: str
    state_save: str
    munge_key: str
    munge_socket: str
    munge_dir: str
    dev: str  # fake GPU devices (real ones are in /dev)
    db_dir: str  # the accounting database (MariaDB's data directory and socket)
    # The cluster's own directory as jobs see it (SIMCLUSTER_STATE_DIR in the TaskProlog);
    # several nodes on one host keep their TmpFS in <root>/tmp/<node>.
    root: str = ""

    @property
    def slurm_conf(self) -> str:
        return f"{self.etc}/slurm.conf"

    @property
    def task_prolog(self) -> str:
        return f"{self.etc}/task_prolog.sh"

    @property
    def jwt_key(self) -> str:
        """The cluster's HS256 key for JWT auth (rest: true; cluster/services/rest.py writes it)."""
        return f"{self.etc}/jwt_hs256.key"

    @property
    def hosts_file(self) -> str:
        return f"{self.etc}/hosts"

    def daemon_log(self, name: str) -> str:
        return f"{self.log}/{name}.log"

    def to_dict(self) -> Dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, str]) -> "NodePaths":
        return cls(**data)

    @classmethod
    def of_layout(cls, layout: ClusterLayout) -> "NodePaths":
        """The paths of daemons that run on this host, in the cluster's own directory."""
        return cls(etc=str(layout.etc), log=str(layout.log), run=str(layout.run), spool=str(layout.spool),
                   state_save=str(layout.state_save), munge_key=str(layout.munge_key),
                   munge_socket=str(layout.munge_socket), munge_dir=str(layout.munge_dir), dev=str(layout.dev),
                   db_dir=str(layout.root / "mariadb"), root=str(layout.root))
