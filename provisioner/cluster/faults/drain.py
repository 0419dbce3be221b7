"""`fault drain NODE --reason TEXT`: running jobs finish, no new ones start; heal undrains."""

from __future__ import annotations

from typing import Dict

from provisioner.cluster.faults.record import check_can_inject, record
from provisioner.cluster.model.handle import Cluster
from provisioner.errors import UsageError


def drain_node(c: Cluster, node: str, reason: str = "slurm_faults") -> str:
    check_can_inject(c, node)
    res = c.client.run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"], timeout=20)
    if not res.ok:
        raise UsageError(f"draining {node} failed: {res.error_line()}")
    record(c, "drain", node, reason=reason)
    return f"drained node {node} (reason: {reason})"


def undrain(c: Cluster, fault: Dict) -> str:
    """Heal's undo of one drain record: the node resumes (already resumed is fine)."""
    res = c.client.run(["scontrol", "update", f"nodename={fault['node']}", "state=resume"], timeout=20)
    if not res.ok and "Invalid node state" not in res.stderr:
        raise UsageError(f"undraining {fault['node']} failed: {res.error_line()}")
    return f"undrained {fault['node']}"
