"""`fault net NODE`: the node's network goes away while its processes keep running (a pulled
cable, a dead switch port); heal brings the link back and the node answers again.

The node's interface in its own network namespace is set down: nothing it sends leaves
and nothing reaches it, but slurmd and the job steps run on. slurmctld finds the node
not responding at its next ping and marks it DOWN after SlurmdTimeout (ReturnToService=2
returns it once it answers again). Only where a node has a network of its own: the local
backend as root (a namespace per node, entered through its slurmd's /proc/PID/ns/net) and
the docker backend where the containers may change their network (CAP_NET_ADMIN);
elsewhere it refuses with one line.

A stop, a start or a repairing `up` of a cluster with a node off the network first brings
the link back (registry.undo_first_faults), as heal does: a stop would otherwise leave the
local node's namespace, which outlives the stop, with its interface down, so the start's
slurmd came up with no network and the start waited for it in vain; a repair would take
the silent slurmd for hung and restart it into the same dead network. So, like the daemons
a fault killed, a fault net ends with a stop, a start or a repair (the command says so).
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from provisioner.cluster.faults.record import active, check_can_inject, record
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.cluster.model.provider import Machines
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


def _namespace_file(c: Cluster, node: str) -> Optional[str]:
    """The file of a local node's network namespace, as its placement's slurmd prefix names
    it (``--net PATH`` or ``--net=PATH``, the node's name as NODE_TOKEN), where it exists:
    it outlives the node's slurmd (kept across stop/start), so the link can be brought back
    while no slurmd runs there. None elsewhere (docker: the runner runs in the container)."""
    prefix = list(c.placement.slurmd_prefix)
    for i, arg in enumerate(prefix):
        path = arg[len("--net="):] if arg.startswith("--net=") else \
            (prefix[i + 1] if arg == "--net" and i + 1 < len(prefix) else "")
        if NODE_TOKEN in path:
            path = path.replace(NODE_TOKEN, node)
            return path if os.path.exists(path) else None
    return None


def reconnect(c: Cluster, fault: Dict) -> str:
    """The undo of one record: heal's, before its repair (which would take the silent slurmd
    for hung), and a stop's, start's or repairing up's (registry.undo_first_faults). A node
    whose machine is gone (a stopped container, a namespace a reboot took) starts again with
    a network of its own, up: nothing is left to undo."""
    node = fault["node"]
    if isinstance(c.provider, Machines) and not c.provider.machines_running(c.state).get(node, True):
        return f"{node} back on the network (its machine starts with a fresh one)"
    ns = _namespace_file(c, node) if c.provider.name == "local" else None
    if ns:
        res = c.runner(node).run(["nsenter", f"--net={ns}", "ip", "link", "set", NODE_IF, "up"], timeout=20)
        if not res.ok:
            raise UsageError(f"setting {node}'s network up failed: {res.error_line()}")
    else:
        _set_link(c, node, "up")
    return f"{node} back on the network"
