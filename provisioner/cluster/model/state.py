"""The per-cluster state file (state.json): what was started where, with which ports and pids.

Every backend keeps one, in $SIMCLUSTER_HOME/<name>/state.json; its ``backend`` picks the
provider that made the cluster. Since version 2 it also holds the cluster's placement
(cluster/model/placement.py), computed once when the provider provisioned the machines, so
later commands take it from this file instead of asking the host again.

Written atomically (temp file + rename) so a crash never leaves half a file behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

from provisioner.config.types import ClusterSpec
from provisioner.errors import UsageError
from provisioner.paths import ClusterLayout, simcluster_home, state_dir_mode

# 1: no placement stored (it was computed by every command); 2: the placement is stored.
STATE_VERSION = 2
# Daemons that run on this host whatever the backend (runner key "host"): the metrics
# exporter serves this host's loopback and reaches Slurm through the cluster's own client.
HOST_DAEMONS = ("metrics",)


@dataclass
class ClusterState:
    name: str
    backend: str
    spec: Dict
    root: str
    hostname: str
    user: str
    controller_port: int
    node_ports: Dict[str, int]
    # Daemon pids as their machine numbers them: "slurmctld", "munged", "slurmdbd",
    # "mariadbd" on the controller; "slurmd:<node>" (and "munged:<node>" where each node
    # has its own munged) on that node's runner.
    pids: Dict[str, int] = field(default_factory=dict)
    phase: str = "starting"  # starting -> running <-> stopped (simcluster stop / start)
    created: float = field(default_factory=time.time)
    nss_wrapper_lib: Optional[str] = None
    # accounting: true only (defaults keep older state files loadable).
    mariadb_port: Optional[int] = None
    slurmdbd_port: Optional[int] = None
    # rest: true only: slurmrestd's port (local; docker: its own network), and its URL as
    # this host reaches it, recorded each time slurmrestd starts.
    rest_port: Optional[int] = None
    rest_url: Optional[str] = None
    # metrics: true only: the exporter's port (picked with the others) and its URL once started.
    metrics_port: Optional[int] = None
    metrics_url: Optional[str] = None
    # What the provider keeps about the machines it made (docker: image, network, shared dir).
    provider_data: Dict = field(default_factory=dict)
    # Faults injected with `simcluster fault` and not undone yet: {"what", "node", "since", ...}.
    faults: List[Dict] = field(default_factory=list)
    # Placement.to_dict(), stored by the provider at provision time; None in a state file
    # written before version 2 (load_placement then computes it, the legacy path).
    placement: Optional[Dict] = None
    version: int = STATE_VERSION

    @property
    def layout(self) -> ClusterLayout:
        return ClusterLayout(Path(self.root))

    @property
    def cluster_spec(self) -> ClusterSpec:
        return ClusterSpec.from_dict(self.spec)

    @staticmethod
    def runner_key(daemon: str) -> str:
        """The runner a daemon key lives on: "slurmd:node1" -> "node1", "slurmctld" -> controller,
        "metrics" -> host (HOST_DAEMONS: this host on every backend)."""
        if daemon in HOST_DAEMONS:
            return "host"
        return daemon.partition(":")[2] or "controller"

    def save(self) -> None:
        path = self.layout.state_file
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, layout: ClusterLayout) -> Optional["ClusterState"]:
        try:
            data = json.loads(layout.state_file.read_text())
        except (OSError, ValueError):
            return None
        data.pop("version", None)
        try:
            return cls(**data)
        except TypeError:
            return None


def all_states(home: Optional[Path] = None) -> List[ClusterState]:
    """Every cluster with a readable state file under ``home`` (default $SIMCLUSTER_HOME)."""
    home = home or simcluster_home()
    if not home.is_dir():
        return []
    states = []
    for child in sorted(home.iterdir()):
        if child.is_dir():
            st = ClusterState.load(ClusterLayout(child))
            if st is not None:
                states.append(st)
    return states


def reserved_ports(exclude: str = "") -> List[int]:
    """Ports recorded by other clusters' state files."""
    ports: List[int] = []
    for st in all_states():
        if st.name != exclude:
            ports.append(st.controller_port)
            ports.extend(st.node_ports.values())
            ports.extend(p for p in (st.mariadb_port, st.slurmdbd_port, st.rest_port, st.metrics_port) if p)
    return ports


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """Serialize up/down of one cluster, and port allocation across clusters."""
    with _lock_file(f".{name}.lock"):
        yield


@contextlib.contextmanager
def port_lock() -> Iterator[None]:
    with _lock_file(".ports.lock"):
        yield


@contextlib.contextmanager
def _lock_file(filename: str) -> Iterator[None]:
    """An exclusive lock on $SIMCLUSTER_HOME/``filename``. Only the owner of the clusters there
    can take it: another user (root's clusters are theirs to use, not to change) is told so."""
    home = simcluster_home()
    path = home / filename
    try:
        if not home.is_dir():
            home.mkdir(parents=True, exist_ok=True)
            home.chmod(state_dir_mode())  # whatever the umask
        fh = open(path, "w")
    except PermissionError:
        try:
            owner = pwd.getpwuid(home.stat().st_uid).pw_name
        except (OSError, KeyError):
            owner = "its owner"
        raise UsageError(f"the clusters in {home} are {owner}'s: only {owner} may change them (permission denied "
                         f"on {path})", f"status, env, exec and list work for every user; up, down, stop, start, "
                         f"scale and fault as {owner}", doc="docs/users.md") from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
