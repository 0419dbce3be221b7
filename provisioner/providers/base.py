"""What a provider must write (its core) and what it may add (capabilities).

A provider provisions machines, finds and deletes them, says where things are (a
Placement) and hands out a runner per machine. Everything else (`up`'s steps, status,
export-logs, verify) is written once, in provisioner/cluster and provisioner/verify, on
top of these.

The core is Provider's abstract methods: a subclass that leaves one out cannot be
instantiated (TypeError), and tests/unit/cluster/model/test_provider.py checks every registered
provider. The capabilities are small classes too; a provider inherits those it
has (Machines, Stoppable, NodeProcesses, Pausable, Orphans, ExtraLogs, ReadOnly, BootsDaemons: defined
in provisioner/cluster/model/provider.py, so that cluster/ checks them without importing
the providers, and re-exported here), and callers ask ``isinstance(provider, Capability)``.
Without one, the caller does what the capability's docstring says (the documented
default), so a new backend can start with the core alone.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable, List, Optional

from provisioner.cluster.model.provider import (CAPABILITIES, BootsDaemons, Crashable, ExtraLogs,  # noqa: F401
                                              Machines, NodeProcesses, Orphans, Pausable, ReadOnly, Stoppable, daemons_alive,
                                              machines_running)
from provisioner.cluster.model.jobfiles import HostDirFiles, JobFiles
from provisioner.cluster.model.placement import Placement
from provisioner.cluster.model.command_runner import Runner
from provisioner.cluster.model.state import ClusterState
from provisioner.config.types import ClusterSpec

if TYPE_CHECKING:
    from provisioner.cluster.model.handle import Cluster

Progress = Callable[[str], None]


class Provider(ABC):
    """The core every provider writes: provision, placement, runner, delete, discover."""

    name = "?"  # its name in the registry (provisioner/providers/__init__.py) and state files
    poll_s = 0.2  # how often waits and job trackers poll through this provider's runners

    # -- the core ---------------------------------------------------------------------------------
    @abstractmethod
    def provision(self, spec: ClusterSpec, state: ClusterState, progress: Progress) -> None:
        """Make the machines (directories, containers) and fill ``state`` with what was chosen
        (ports, provider_data) and with the cluster's placement, computed here once:
        ``state.placement = self.placement(state).to_dict()``. Called with the state
        directory already created."""

    @abstractmethod
    def placement(self, state: ClusterState) -> Placement:
        """Where the cluster's files, daemons and jobs live, computed from the state and, where
        the backend needs it, the host (local: /etc/hosts, Open MPI's parameter file, tini,
        the CPU count), everything found recorded in the Placement. provision calls it once;
        later commands load the stored one (cluster/model/placement.py:load_placement) and call
        this only for a state file written before placements were stored."""

    @abstractmethod
    def runner(self, state: ClusterState, key: str) -> Runner:
        """The runner of machine ``key``: "controller" or a node name."""

    @abstractmethod
    def delete(self, state: ClusterState) -> List[int]:
        """Stop every process or container of the cluster and remove its machines and state
        directory; return the pids that would not die (if any)."""

    @abstractmethod
    def discover(self, name: str) -> Optional[ClusterState]:
        """The state of cluster ``name`` when it has no state file here (a cluster made by an
        older version; a deployed cluster read from its controller); None if not found."""

    # -- defaults a provider may override ---------------------------------------------------------
    def available(self) -> bool:
        """Can this backend answer on this machine (without raising)? Used by list and down --all."""
        return True

    def sanity_checks(self, spec: ClusterSpec) -> None:
        """Raise a PrerequisiteError/UsageError before anything is created (molecule's idea)."""

    def job_files(self, cluster: "Cluster") -> JobFiles:
        """Where job files go (verify, the pytest plugin): by default the placement's job
        directory on this host, which the cluster sees at ``job_root_in_cluster``."""
        return HostDirFiles(cluster.placement.job_root, cluster.placement.job_root_in_cluster)

    def describe(self, cluster: "Cluster") -> str:
        """The cluster as verify's header names it: "local cluster 'x'"."""
        return f"{self.name} cluster '{cluster.name}'"

    def logs_hint(self, cluster: "Cluster") -> str:
        """Where a failed check's reader finds the daemon logs."""
        return f"see 'simcluster export-logs DIR --name {cluster.name}' for every daemon's log"
