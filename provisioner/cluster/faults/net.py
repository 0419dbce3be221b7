"""`fault net NODE`: the node's network goes away while its processes keep running (a pulled
cable, a dead switch port); heal brings the link back and the node answers again.

The node's interface in its own network namespace is set down: nothing it sends leaves
and nothing reaches it, but slurmd and the job steps run on. slurmctld finds the node
not responding at its next ping and marks it DOWN after SlurmdTimeout (ReturnToService=2
returns it once it answers again). Only where a node has a network of its own: the local
backend as root (a namespace per node, entered through its slurmd's /proc/PID/ns/net) and
the docker backend where the containers may change their network (CAP_NET_ADMIN);
elsewhere it refuses with one line.
"""

from __future__ import annotations

import os
from typing import Dict, List

from provisioner.cluster.faults.record import active, check_can_inject, record
from provisioner.cluster.model.handle import Cluster
from provisioner.errors import UsageError

NODE_IF = "eth0"  # a node's interface on both backends (local: network.NODE_IF; docker's default)


def _link_command(c: Cluster, node: str, updown: str) -> List[str]:
    """The command that sets ``node``'s interface ``updown``, run by the node's runner, or a
    one-line UsageError where the node has no network of its own to take away."""
    if c.provider.name == "docker":
        return ["ip", "link", "set", NODE_IF, updown]  # the runner runs it inside the container
    # Local: the namespace the node's slurmd runs in, entered as root from this host.
    pid = c.state.pids.get(f"slurmd:{node}")
    ns = _netns_of(pid) if c.provider.name == "local" and os.geteuid() == 0 and pid else None
    if not ns or ns == _netns_of("self"):
        why = "without root" if c.provider.name == "local" and os.geteuid() != 0 else "no namespace per node"
        raise UsageError(f"cluster '{c.name}': its nodes have no network of their own to take away "
                         f"(the {c.provider.name} backend, {why})",
                         "'simcluster fault kill' or 'fault pause' stop a node on every backend")
    return ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "link", "set", NODE_IF, updown]


def _netns_of(pid) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


def _set_link(c: Cluster, node: str, updown: str) -> None:
    res = c.runner(node).run(_link_command(c, node, updown), timeout=20)
    if not res.ok:
        raise UsageError(f"setting {node}'s network {updown} failed: {res.error_line()}",
                         "docker: the node containers need CAP_NET_ADMIN" if c.provider.name == "docker" else "")


def disconnect_node(c: Cluster, node: str) -> str:
    check_can_inject(c, node)
    if active(c, "net", node):
        raise UsageError(f"node {node} is already off the network", f"simcluster fault heal --name {c.name}")
    _set_link(c, node, "down")
    record(c, "net", node)
    return (f"took node {node} off the network ({NODE_IF} down; its processes run on): slurmctld marks it "
            f"not responding, then DOWN after SlurmdTimeout")


def reconnect(c: Cluster, fault: Dict) -> str:
    """Heal's undo of one record, before the repair (which would take the silent slurmd for hung)."""
    _set_link(c, fault["node"], "up")
    return f"{fault['node']} back on the network"
