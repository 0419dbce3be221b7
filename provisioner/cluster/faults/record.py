"""What every fault kind shares: its record in the cluster's state (``state.faults``: what,
node, since, and what its undo needs), and the check before one is injected.

A kind's record is what `status` lists (its ``what`` is the kind's verb) until the fault
is undone: by its undo verb (`fault resume`), by `fault heal`, or by a repairing
`up`/`start`, which restarts the daemons a fault killed and keeps only the drains and the
GPU faults (a restart repairs no GPU).
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional

from provisioner.cluster.model.handle import Cluster
from provisioner.errors import UsageError


def record(c: Cluster, what: str, node: Optional[str] = None, **extra) -> None:
    """Add the fault ``what`` (a kind's verb) to the cluster's state file."""
    c.state.faults.append({"what": what, "node": node, "since": round(time.time(), 3), **extra})
    c.state.save()


def active(c: Cluster, what: str, node: Optional[str] = None) -> List[Dict]:
    """The records of fault ``what`` still in effect (on ``node``, where given)."""
    return [f for f in c.state.faults if f.get("what") == what and (node is None or f.get("node") == node)]


def check_can_inject(c: Cluster, node: Optional[str] = None) -> None:
    """Bad input is one line, exit 2, nothing changed: an unknown node, a stopped cluster."""
    if node is not None and node not in c.node_names:
        shown = ", ".join(c.node_names[:8]) + (" ..." if len(c.node_names) > 8 else "")
        raise UsageError(f"unknown node '{node}' in cluster '{c.name}' (nodes are: {shown})")
    if c.state.phase != "running" or not any(c.daemons_alive().values()):
        raise UsageError(f"cluster '{c.name}' is stopped: nothing to inject a fault into",
                         f"start it first: simcluster start --name {c.name}")
