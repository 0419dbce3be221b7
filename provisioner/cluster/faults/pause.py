"""`fault pause NODE` and its undo, `fault resume NODE`: a frozen node."""

from __future__ import annotations

import signal

from provisioner.cluster.faults.record import active, check_can_inject, record
from provisioner.cluster.lifecycle.repair import unpause
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.provider import Pausable, node_pids
from provisioner.errors import UsageError


def pause_node(c: Cluster, node: str) -> str:
    """Freeze the node's machine where it has one (Pausable), else SIGSTOP its processes."""
    check_can_inject(c, node)
    if active(c, "pause", node):
        raise UsageError(f"node {node} is already paused", f"simcluster fault resume {node} --name {c.name}")
    if isinstance(c.provider, Pausable) and c.provider.pause_machine(c.state, node):
        record(c, "pause", node, machine=True)
        return f"paused node {node} (its container is frozen)"
    pids = node_pids(c.provider, c.state, node)
    c.runner(node).kill(pids, signal.SIGSTOP)
    record(c, "pause", node, pids=pids)
    return f"paused node {node}: SIGSTOP to slurmd and {max(0, len(pids) - 1)} job processes"


def resume_node(c: Cluster, node: str) -> str:
    """Undo `pause NODE` (heal, stop and the repairing up use repair.unpause directly)."""
    if not unpause(c, node):
        if node not in c.node_names:
            raise UsageError(f"unknown node '{node}' in cluster '{c.name}'")
        raise UsageError(f"node {node} is not paused", "see 'simcluster status' for the faults in effect")
    return f"resumed node {node}"
