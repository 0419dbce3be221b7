"""The narrow interface every backend implements (after kind's providers).

A provider only provisions machines, discovers and deletes them, says where things are
(a Placement), hands out a runner per machine, and adds its own files to a log bundle.
Everything else (`up`'s steps, status, export-logs, verify) is written once, in
provisioner/cluster and provisioner/verify, on top of these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional

from provisioner.cluster.placement import Placement
from provisioner.cluster.runner import Runner
from provisioner.cluster.state import ClusterState
from provisioner.config.types import ClusterSpec
from provisioner.errors import UsageError

Progress = Callable[[str], None]


class Provider:
    name = "?"
    poll_s = 0.2  # how often waits and job trackers poll through this provider's runners

    def available(self) -> bool:
        """Can this backend answer on this machine (without raising)? Used by list and down --all."""
        return True

    def sanity_checks(self, spec: ClusterSpec) -> None:
        """Raise a PrerequisiteError/UsageError before anything is created (molecule's idea)."""

    def provision(self, spec: ClusterSpec, state: ClusterState, progress: Progress) -> None:
        """Make the machines (directories, containers) and fill ``state`` with what was chosen
        (ports, provider_data) and with the cluster's placement, computed here once:
        ``state.placement = self.placement(state).to_dict()``. Called with the state
        directory already created."""
        raise NotImplementedError

    def placement(self, state: ClusterState) -> Placement:
        """Where the cluster's files, daemons and jobs live, computed from the state and, where
        the backend needs it, the host (local: /etc/hosts, Open MPI's parameter file, tini,
        the CPU count), everything found recorded in the Placement. provision calls it once;
        later commands load the stored one (cluster/placement.py:load_placement) and call
        this only for a state file written before placements were stored."""
        raise NotImplementedError

    def runner(self, state: ClusterState, key: str) -> Runner:
        """The runner of machine ``key``: "controller" or a node name."""
        raise NotImplementedError

    def machines_running(self, state: ClusterState) -> Dict[str, bool]:
        """{machine: running} for machines that can be stopped as a whole (containers); {} if none."""
        return {}

    # -- stop, start and faults (simcluster stop/start/fault) -------------------------------------
    def start_machines(self, state: ClusterState, keys: List[str]) -> None:
        """Start the stopped machines ``keys`` (as machines_running names them), state kept."""

    def stop_machines(self, state: ClusterState) -> None:
        """After the daemons were stopped: stop what is left of the cluster (job processes,
        containers), keeping every file and the machines themselves."""

    def node_pids(self, state: ClusterState, node: str) -> List[int]:
        """The processes of virtual node ``node`` as its runner numbers them: its slurmd, its
        slurmstepd and their job tasks (what dies with a crashed host)."""
        raise UsageError(f"the {self.name} backend cannot list a node's processes")

    def pause_machine(self, state: ClusterState, node: str) -> bool:
        """Freeze node ``node``'s whole machine (docker pause); False where a node is no
        machine of its own (the caller then stops the node's processes instead)."""
        return False

    def unpause_machine(self, state: ClusterState, node: str) -> bool:
        return False

    def delete(self, state: ClusterState) -> List[int]:
        """Stop every process or container of the cluster and remove its machines and state
        directory; return the pids that would not die (if any)."""
        raise NotImplementedError

    def discover(self, name: str) -> Optional[ClusterState]:
        """A cluster of this backend that has no state file (made by an older version); None."""
        return None

    def orphans(self) -> List[str]:
        """Names of clusters whose machines exist without a state file (list / down --all)."""
        return []

    def delete_orphan(self, name: str) -> None:
        raise NotImplementedError

    def extra_logs(self, state: ClusterState, out_dir: Path) -> List[Path]:
        """Files only this backend has for a bug report (docker inspect, container logs)."""
        return []

    def versions(self) -> Dict[str, str]:
        """Versions of this backend's own software for the log bundle (docker engine)."""
        return {}
