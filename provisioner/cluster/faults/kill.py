"""`fault kill NODE`: a crashed host (docs/faults.md)."""

from __future__ import annotations

import signal

from provisioner.cluster.faults.record import check_can_inject, record
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.provider import Crashable, node_pids


def kill_node(c: Cluster, node: str) -> str:
    """A crashed host: its processes SIGKILLed and, where the node has a machine of its own to
    crash (Crashable), off its network first, so that nobody hears its connections close;
    the repair (heal) brings it back as a rebooted host."""
    check_can_inject(c, node)
    pids = node_pids(c.provider, c.state, node)
    kill = lambda: c.runner(node).kill(pids, signal.SIGKILL)  # noqa: E731
    crashed = isinstance(c.provider, Crashable) and c.provider.crash_machine(c.state, node, kill)
    if not isinstance(c.provider, Crashable):
        kill()
    record(c, "kill", node, **({"machine": True} if crashed else {}))
    return (f"killed node {node}: slurmd and {max(0, len(pids) - 1)} job processes (SIGKILL)"
            + ("; cut off the network first and its machine is down, as a crashed host" if crashed else ""))
