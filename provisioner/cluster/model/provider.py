"""The provider contract: what a provider must write (its core) and what it may add (capabilities).

A provider provisions machines, finds and deletes them, says where things are (a
Placement) and hands out a runner per machine. Everything else (`up`'s steps, status,
export-logs, verify) is written once, in provisioner/cluster and provisioner/verify, on
top of these.

The core is Provider's abstract methods: a subclass that leaves one out cannot be
instantiated (TypeError), and tests/unit/cluster/model/test_provider.py checks every
registered provider. The capabilities (CAPABILITIES, below) are small classes too; a
provider inherits those it has and callers ask ``isinstance(provider, Capability)``.
Without one, the caller does what the capability's docstring says (the documented
default), so a new backend can start with the core alone.

This module sits in the cluster model, below everything that uses a provider: it names
the state, the placement and the runners, never a `Cluster` (a method that needs a
cluster's facts takes its state and placement), so the model, the providers and the
code above them import it without a cycle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from provisioner.cluster.model.command_runner import Runner
from provisioner.cluster.model.jobfiles import HostDirFiles, JobFiles
from provisioner.cluster.model.placement import Placement
from provisioner.cluster.model.state import ClusterState
from provisioner.config.types import ClusterSpec
from provisioner.errors import UsageError
from provisioner.progress import Progress


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
        later commands load the stored one (cluster/model/handle.py: load_placement) and call
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

    def job_files(self, state: ClusterState, placement: Placement) -> JobFiles:
        """Where job files go (verify, the pytest plugin): by default the placement's job
        directory on this host, which the cluster sees at ``job_root_in_cluster``."""
        return HostDirFiles(placement.job_root, placement.job_root_in_cluster)

    def describe(self, state: ClusterState, placement: Placement) -> str:
        """The cluster as verify's header names it: "local cluster 'x'"."""
        return f"{self.name} cluster '{state.name}'"

    def logs_hint(self, state: ClusterState, placement: Placement) -> str:
        """Where a failed check's reader finds the daemon logs."""
        return f"see 'simcluster export-logs DIR --name {state.name}' for every daemon's log"


# -- capabilities: what a provider may add ---------------------------------------------------------
class Machines(ABC):
    """Machines that stay when stopped and start again (containers).
    Without it: no machine can be stopped as a whole ({} running), nothing to start."""

    @abstractmethod
    def machines_running(self, state: ClusterState) -> Dict[str, bool]:
        """{machine key: running} for every machine of the cluster."""

    @abstractmethod
    def start_machines(self, state: ClusterState, keys: List[str]) -> None:
        """Start the stopped machines ``keys`` (as machines_running names them), state kept."""


class Stoppable(ABC):
    """`simcluster stop` stops what is left once the daemons stopped.
    Without it: nothing is left to stop (the daemons were all)."""

    @abstractmethod
    def stop_machines(self, state: ClusterState) -> None:
        """After the daemons were stopped: stop what is left of the cluster (job processes,
        containers), keeping every file and the machines themselves."""


class NodeProcesses(ABC):
    """A virtual node's processes can be listed: `fault kill`/`pause` and verify's faults
    suite need it. Without it: simcluster cannot inject faults (those checks SKIP)."""

    @abstractmethod
    def node_pids(self, state: ClusterState, node: str) -> List[int]:
        """The processes of virtual node ``node`` as its runner numbers them: its slurmd, its
        slurmstepd and their job tasks (what dies with a crashed host)."""


class Crashable(ABC):
    """A node's machine can go down as a crashed host does: off its network first, so that the
    connections others hold to it are neither closed nor reset (a killed process's sockets
    would say FIN: srun takes that for a step that closed its output), then its processes
    killed and the machine gone (Machines.machines_running says so); the repair path starts
    it again (Machines.start_machines) with a fresh network stack, which answers the old
    connections with a reset, as a rebooted host does.
    Without it: `fault kill` kills the node's processes (NodeProcesses), whose connections
    then close cleanly."""

    @abstractmethod
    def crash_machine(self, state: ClusterState, node: str, kill: Callable[[], None]) -> bool:
        """Cut node ``node`` off its network, call ``kill`` (which SIGKILLs its processes),
        then take its machine down. False (``kill`` called all the same) where the node has
        no machine of its own to crash."""


class Pausable(ABC):
    """A node is a machine of its own that can be frozen (docker pause).
    Without it: `fault pause` stops the node's processes (SIGSTOP) instead."""

    @abstractmethod
    def pause_machine(self, state: ClusterState, node: str) -> bool:
        """Freeze node ``node``'s whole machine; True when it did."""

    @abstractmethod
    def unpause_machine(self, state: ClusterState, node: str) -> bool:
        """Undo pause_machine."""


class Orphans(ABC):
    """Clusters whose machines exist without a state file (made by an older simcluster).
    Without it: there are none (list and down --all show and remove none)."""

    @abstractmethod
    def orphans(self) -> List[str]:
        """Names of those clusters."""

    @abstractmethod
    def delete_orphan(self, name: str) -> None:
        """Remove orphaned cluster ``name``'s machines."""


class ExtraLogs(ABC):
    """More for export-logs' bundle than the shared part writes.
    Without it: the shared bundle (provisioner/cluster/inspect/logs.py) only."""

    @abstractmethod
    def extra_logs(self, state: ClusterState, out_dir: Path) -> List[Path]:
        """Write files only this backend has (docker inspect, container logs) under ``out_dir``."""

    @abstractmethod
    def versions(self) -> Dict[str, str]:
        """Versions of this backend's own software for versions.txt (docker engine)."""


class BootsDaemons(ABC):
    """Machines that start the cluster's daemons themselves as they first start (a
    container's entrypoint), so that the daemons start while the other machines still
    come up. The plan is the steps' own (cluster/lifecycle/steps.py: boot_plan): the same command
    lines, environments and log files. provision makes the machines without starting them
    where it can (boots() then holds); `up`'s "machines" step, after the configs are
    written, hands the plan over and starts them (boot_machines); the steps that follow
    then adopt each daemon instead of starting it (the runner's start_daemon returns the
    booted daemon's pid; a daemon that did not start is started as on every backend).
    Without it: the steps start every daemon."""

    @abstractmethod
    def boots(self, state: ClusterState) -> bool:
        """Were this cluster's machines made to start their daemons at their first start?
        Decided by provision and kept: `up` then runs the "machines" step, and the runners
        look for booted daemons before they start one."""

    @abstractmethod
    def boot_machines(self, state: ClusterState, plan: Dict[str, List[Any]]) -> None:
        """Give each machine its part of ``plan`` ({machine key: [steps.Boot, ...]}, in start
        order) and start the machines."""


class ReadOnly(ABC):
    """Clusters simcluster did not start and does not change (`simcluster deploy`'s, over
    SSH): no pids, no state directory, no config directory on this host, no repairs.
    Without it: daemons are simcluster's (liveness from their recorded pids), configs are
    in placement.config_dir on this host, and status hints at `simcluster up`/`start`."""

    @abstractmethod
    def daemons_alive(self, state: ClusterState, placement: Placement) -> Dict[str, bool]:
        """{daemon key: alive} from what the cluster answers (keys as ClusterState.pids names
        them: "slurmctld", "munged", "slurmd:<node>")."""

    @abstractmethod
    def config_files(self, state: ClusterState, placement: Placement) -> Dict[str, bytes]:
        """{file name: contents} of the cluster's config directory (``placement.paths.etc``),
        read where it is."""

    def host_services(self, state: ClusterState, placement: Placement, nodes: List[str]) -> Dict[str, Dict[str, str]]:
        """{host: {systemd unit: its state}} of the cluster's services, asked on the controller
        and on ``nodes`` (those whose slurmd answers); {} where no host runs systemd."""
        return {}

    def reach_url(self, state: ClusterState, url: str) -> str:
        """The URL this machine uses for ``url``, a service of the cluster (slurmrestd's) on
        the cluster's network: the same, where this machine reaches that network."""
        return url

    def fault_injector(self, cluster) -> Optional[object]:
        """What injects faults into ``cluster`` (a Cluster of this provider): an object with
        the methods of named_clusters.Injector (kill, kill_controller, stop_accounting, heal
        ...) and ``fast``; None where simcluster cannot (verify's fault checks SKIP)."""
        return None


class Scalable(ABC):
    """A provider whose clusters take and lose nodes while running (`simcluster scale`,
    cluster/lifecycle/scale.py). Without it: `scale` says the backend cannot."""

    @abstractmethod
    def add_machines(self, state: ClusterState, spec: ClusterSpec, nodes: List[str], progress: Progress) -> None:
        """Make the machines of ``nodes`` (already in ``spec``, the cluster's new spec): their
        ports, addresses, namespaces, cgroups or containers; store ``spec`` and the new
        placement in ``state``."""

    @abstractmethod
    def remove_machines(self, state: ClusterState, spec: ClusterSpec, nodes: List[str]) -> None:
        """Remove the machines of ``nodes`` (their daemons stopped already; ``spec`` no longer
        has them) and everything ``state`` recorded of them; store ``spec`` and the new placement."""


CAPABILITIES = (Machines, Stoppable, NodeProcesses, Crashable, Pausable, Orphans, ExtraLogs, ReadOnly, BootsDaemons,
                Scalable)


def machines_running(provider: object, state: ClusterState) -> Dict[str, bool]:
    """provider.machines_running(state), or {} where machines cannot be stopped as a whole."""
    return provider.machines_running(state) if isinstance(provider, Machines) else {}


def node_pids(provider: object, state: ClusterState, node: str) -> List[int]:
    """provider.node_pids(state, node); a one-line UsageError where it cannot list them."""
    if not isinstance(provider, NodeProcesses):
        raise UsageError(f"the {getattr(provider, 'name', '?')} backend cannot list a node's processes")
    return provider.node_pids(state, node)
