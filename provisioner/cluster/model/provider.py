"""The optional capabilities of a provider: what it may add to the core (cluster/model/provider.py).

A provider inherits the capabilities it has; code in cluster/ asks
``isinstance(cluster.provider, Capability)`` and, without one, does what the
capability's docstring says (the documented default). They live here, below the
providers, so that cluster/ never imports provisioner.providers; cluster/model/provider.py
re-exports them beside the core.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List

from provisioner.cluster.model.state import ClusterState
from provisioner.errors import UsageError

if TYPE_CHECKING:
    from provisioner.cluster.model.handle import Cluster


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
    def daemons_alive(self, cluster: "Cluster") -> Dict[str, bool]:
        """{daemon key: alive} from what the cluster answers (keys as ClusterState.pids names
        them: "slurmctld", "munged", "slurmd:<node>")."""

    @abstractmethod
    def config_files(self, cluster: "Cluster") -> Dict[str, bytes]:
        """{file name: contents} of the cluster's config directory, read where it is."""


CAPABILITIES = (Machines, Stoppable, NodeProcesses, Crashable, Pausable, Orphans, ExtraLogs, ReadOnly, BootsDaemons)


def machines_running(provider: object, state: ClusterState) -> Dict[str, bool]:
    """provider.machines_running(state), or {} where machines cannot be stopped as a whole."""
    return provider.machines_running(state) if isinstance(provider, Machines) else {}


def daemons_alive(cluster: "Cluster") -> Dict[str, bool]:
    """{daemon key: alive} of ``cluster``: its recorded pids asked on their machines, or
    what a read-only cluster answers."""
    provider = cluster.provider
    return provider.daemons_alive(cluster) if isinstance(provider, ReadOnly) else cluster.daemons_alive()


def node_pids(provider: object, state: ClusterState, node: str) -> List[int]:
    """provider.node_pids(state, node); a one-line UsageError where it cannot list them."""
    if not isinstance(provider, NodeProcesses):
        raise UsageError(f"the {getattr(provider, 'name', '?')} backend cannot list a node's processes")
    return provider.node_pids(state, node)
