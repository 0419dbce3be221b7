"""A network of its own for each local cluster: one network namespace per virtual node and
one for the controller, all on one layer-2 segment with this host.

Why: virtual nodes that share the host's network stack collide on ports (two jobs on two
"nodes" cannot both listen on 0.0.0.0:29500), their connections leave from 127.0.0.1, and
the daemons listen on every interface of the machine. In a namespace of its own a node has
its own ports, its own address as the source of what it sends, and nothing it listens on
is reachable from the machine's other networks.

How: a dummy device ("scb<tag>") is the parent of macvlan devices in bridge mode: one in
each namespace (named eth0 there, as on a host) and one on this host ("sch<tag>", with
the subnet's first address), so the host's Slurm commands reach the cluster. macvlan
rather than veth pairs on a bridge because bridged traffic passes the host's iptables
FORWARD chain where br_netfilter is loaded, and docker sets that chain's policy to DROP:
traffic between macvlans of one parent never enters it. A dummy rather than a bridge as
the parent: a bridge without ports has no carrier on some kernels (Debian 12's 6.1:
"NO-CARRIER"), and every macvlan on a parent without carrier is LOWERLAYERDOWN, so nothing
reaches the namespaces; a dummy device always has carrier. On a kernel without dummy
devices (seen: a 6.18 build) the parent is a bridge, whose carrier that kernel keeps.
Clusters made when the parent was a bridge keep theirs (found and deleted by name). The
namespaces are named (/run/netns/simcluster-<tag>-<key>, `ip netns` lists them), so they
outlive their processes: `stop`/`start` and repair keep each node's address; `down`
deletes them.

Addresses come from 198.18.0.0/15, the block set aside for network benchmarking (RFC 2544)
that no LAN should use, a subnet per cluster that no route of this host overlaps: the plan
of the network (subnet, names, addresses, MACs) is network_plan.py, this module makes it.
The host's side is made by one `ip -batch` process (not one `ip` per device); each
namespace's address, links and route by netlink requests from this process (netlink.py).

Rootless (an ordinary user), the same network is made one level down (userns.py): in a user
namespace of the cluster's own, whose network namespace plays this host's part (the parent
device, the "host" macvlan) and whose root may make devices and namespaces. Its nodes'
namespaces are kept as files in the cluster's directory (Network.netns_dir, bind mounts of
that user namespace's mount namespace; /run/netns belongs to root), and every function here
that changes them runs as that namespace's root, by the same code (userns.call).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import List, Optional

from provisioner.cluster.model.command_runner import find_binary
from provisioner.errors import StartupError
from provisioner.providers.local.network_plan import (CONTROLLER_KEY, NETNS_DIR, NODE_IF, Network, bridge_name,
                                                      host_if_name, mac_of, netns_name, netns_path, static_neighbours)


def _ip() -> str:
    return find_binary("ip") or "ip"


def _parent_lines(name: str) -> List[str]:
    """The `ip -batch` lines that make the parent device ``name`` and bring it up. A dummy
    where this kernel makes them (made here, at once, to find out); else a bridge without
    ports, which keeps its carrier on the kernels seen without the dummy module (Debian
    12's 6.1, which drops it, has the module)."""
    made = subprocess.run([_ip(), "link", "add", name, "type", "dummy"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0
    return [f"link set {name} up"] if made else [f"link add {name} type bridge", f"link set {name} up"]


def creation_name(tag: str, index: int) -> str:
    """The name a namespace's macvlan is made under on this host, before it is renamed
    NODE_IF in its namespace: unique per cluster (its tag) and per device of one `create`."""
    return f"scn{tag}{index:x}"[:15]


def _link_exists(name: str) -> bool:
    """Does this process's network namespace have a device ``name``? (Asked of the kernel,
    not of /sys/class/net, which shows the namespace sysfs was mounted in: rootless, this
    host's, not the cluster's user namespace's.)"""
    try:
        socket.if_nametoindex(name)
        return True
    except OSError:
        return False


def _is_namespace(path: str) -> bool:
    """Is ``path`` a namespace's file (a mount point: nsfs), not just the empty file under it?"""
    try:
        return os.stat(path).st_dev != os.stat(os.path.dirname(path)).st_dev
    except OSError:
        return False


def missing(net: Network) -> List[str]:
    """Keys of ``net`` whose namespace does not exist (all of them after a reboot)."""
    if not net.rootless:
        return [k for k in net.addrs if not os.path.exists(net.netns(k))]
    if os.geteuid() != 0:  # this host's view: the namespaces are the user namespace's mounts
        from provisioner.providers.local import userns
        seen = userns.view(net.netns_dir)
        return list(net.addrs) if seen is None else [k for k in net.addrs if not _is_namespace(seen + net.netns(k))]
    return [k for k in net.addrs if not _is_namespace(net.netns(k))]


def _ip_in(net: Network, key: str) -> List[str]:
    """`ip` in ``key``'s namespace."""
    if net.rootless:
        return [find_binary("nsenter") or "nsenter", f"--net={net.netns(key)}", _ip()]
    return [_ip(), "-n", netns_name(net.tag, key)]


def _run_batch(argv: List[str], lines: List[str], what: str) -> subprocess.Popen:
    proc = subprocess.Popen(argv + ["-batch", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    proc.stdin.write("\n".join(lines) + "\n")
    proc.stdin.close()
    proc.what = what  # type: ignore[attr-defined]
    return proc


def _check(proc: subprocess.Popen) -> None:
    out = proc.stdout.read()
    if proc.wait() != 0:
        raise StartupError(f"making the cluster's network failed ({proc.what}): {out.strip()[-300:]}",  # type: ignore
                           "the nodes need root, iproute2 and the kernel's dummy (or bridge) and macvlan devices",
                           doc="docs/troubleshooting.md#network-namespaces")


NEIGH_SYSCTL = "/proc/sys/net/ipv4/neigh/default/gc_thresh"
BACKLOG_SYSCTL = "/proc/sys/net/core/netdev_max_backlog"
# ARP entries a namespace of this machine holds, counted generously (measured: 3000 entries
# with 1046 namespaces up): the controller's namespace holds one per node, a node's the
# controller's, the host's and those of the nodes it forwards Slurm's messages to.
NEIGH_PER_NAMESPACE = 4


def _raise(path: str, name: str, target: int, changed: List[str]) -> None:
    now = int(open(path).read())
    if now < target:
        with open(path, "w") as f:
            f.write(str(target))
        changed.append(f"{name} {now} -> {target}")


def kernel_room(namespaces: int) -> str:
    """Make two of the kernel's machine-wide network limits big enough for ``namespaces``
    network namespaces on one segment; return what was changed, as a line for the user
    ('' where nothing was). Both defaults hold a cluster of a few hundred nodes; at 512
    nodes and more nodes went "not responding" without this.

    - The neighbour (ARP) table is one for all namespaces: 1024 entries (gc_thresh3), and
      above gc_thresh2 (512) the kernel evicts entries still in use, each eviction one more
      ARP broadcast. gc_thresh2 gets the room the namespaces need, gc_thresh3 twice that.
    - A broadcast on the cluster's segment is copied to every device on it, each copy
      queued on the CPU's input backlog (net.core.netdev_max_backlog, 1000 packets): with
      more devices than that, every broadcast overflows it and what else arrives meanwhile
      (another node's ARP reply, a TCP handshake) is dropped. It gets twice the devices.

    Only raised, never lowered (others may need the room): the limits bound kernel memory,
    a few hundred bytes per entry or queued packet."""
    changed: List[str] = []
    try:
        want = NEIGH_PER_NAMESPACE * namespaces
        for i, target in ((3, 2 * want), (2, want)):  # gc_thresh3 first: the kernel keeps thresh2 <= thresh3
            _raise(f"{NEIGH_SYSCTL}{i}", f"net.ipv4.neigh.default.gc_thresh{i}", target, changed)
        _raise(BACKLOG_SYSCTL, "net.core.netdev_max_backlog", 2 * namespaces, changed)
    except OSError as exc:
        return (f"could not raise the kernel's network limits for {namespaces} namespaces ({exc.strerror}): "
                "with 512 nodes or more some may go 'not responding'") if namespaces > 256 else ""
    return (f"raised the kernel's network limits for {namespaces} network namespaces: "
            f"{', '.join(changed)}") if changed else ""


# Where an srun listens for slurmctld (SrunPortRange; Slurm's documentation suggests this
# range). slurmctld sends an srun its step messages (a cancelled step, a node's failure) at
# the NodeAddr of the node whose NodeHostname is srun's host name; an srun on this host
# itself (a user's shell, an salloc shell) runs under a name no node has, and slurmctld
# then connects to 0.0.0.0, which in its own namespace is its loopback: deaf, that srun
# printed `Force Terminated` for a cancelled step and hung after a node's failure. So the
# controller's namespace passes connections to these ports on its loopback to this host.
SRUN_PORTS = (60001, 63000)


def srun_port_range() -> str:
    return f"{SRUN_PORTS[0]}-{SRUN_PORTS[1]}"


def forward_srun(net: Network) -> str:
    """In the controller's namespace, pass TCP to 127.0.0.1 on SRUN_PORTS on to this host's
    address on the cluster's network (DNAT, with the controller's address as the source and
    route_localnet so that a loopback-addressed packet may leave). "" when done, else why
    not, one line (srun on this host then stays deaf to slurmctld; jobs are unaffected)."""
    iptables = find_binary("iptables")
    if not iptables:
        return ("no iptables here (apt-get install iptables): an srun on this host itself does not hear "
                "slurmctld (a cancelled step ends 'Force Terminated'); srun in jobs does")
    ports = f"{SRUN_PORTS[0]}:{SRUN_PORTS[1]}"
    ctl, sh = net.addrs[CONTROLLER_KEY], find_binary("sh") or "/bin/sh"
    script = ("echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet && "
              f'"$0" -w -t nat -A OUTPUT -d 127.0.0.1/32 -p tcp --dport {ports} -j DNAT --to-destination {net.host_addr} && '
              f'"$0" -w -t nat -A POSTROUTING -d {net.host_addr}/32 -p tcp --dport {ports} -j SNAT --to-source {ctl}')
    argv = [find_binary("nsenter") or "nsenter", f"--net={net.netns(CONTROLLER_KEY)}", sh, "-c", script,
            iptables]
    try:
        res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not pass srun's ports on to this host ({exc}): an srun on this host itself does not hear slurmctld"
    if res.returncode != 0:
        return (f"could not pass srun's ports on to this host ({res.stdout.strip()[-200:]}): an srun on this host "
                "itself does not hear slurmctld")
    return ""


def create(net: Network, keys: Optional[List[str]] = None) -> str:
    """Make what of ``net`` is missing: the parent device and the host's macvlan, then the
    namespace of each of ``keys`` (default: every missing one) with its macvlan, address,
    loopback and a default route through the host, and for a new controller namespace
    forward_srun. Returns kernel_room's line and forward_srun's, if any. Rootless: the same,
    as the root of the cluster's user namespace (userns.call)."""
    if net.rootless and os.geteuid() != 0:
        from provisioner.providers.local import userns
        return userns.call("create", net, missing(net) if keys is None else keys)
    keys = missing(net) if keys is None else keys
    lines = []
    if not _link_exists(net.parent):
        lines += _parent_lines(net.parent)
    if not _link_exists(net.host_if):
        ctl = net.addrs[CONTROLLER_KEY]
        lines += [f"link add link {net.parent} name {net.host_if} address {mac_of(net.host_addr)} "
                  "type macvlan mode bridge",
                  f"addr add {net.host_addr}/{net.prefixlen} dev {net.host_if}", f"link set {net.host_if} up",
                  f"neigh replace {ctl} lladdr {mac_of(ctl)} dev {net.host_if} nud permanent"]
    # Each namespace's macvlan is made under a name of its own on this host and renamed eth0
    # in its namespace: Debian 12's kernel (6.1) refuses a new device named as one of the
    # host's ("File exists" where the host's NIC is eth0) even when it is made right into
    # another namespace.
    created_as = {k: creation_name(net.tag, i) for i, k in enumerate(keys)}
    if net.rootless:
        _make_namespace_files([net.netns(k) for k in keys])
    for k in keys:
        lines += ([] if net.rootless else [f"netns add {netns_name(net.tag, k)}"]) + [
                  f"link add link {net.parent} name {created_as[k]} netns "
                  f"{net.netns(k) if net.rootless else netns_name(net.tag, k)} "
                  f"address {mac_of(net.addrs[k])} type macvlan mode bridge"]
    # The controller learns the new nodes too (all of them when it is new itself).
    neighbours = {k: static_neighbours(net, k) for k in keys}
    if CONTROLLER_KEY not in neighbours and keys and CONTROLLER_KEY not in missing(net):
        neighbours[CONTROLLER_KEY] = [(net.addrs[k], mac_of(net.addrs[k])) for k in keys]
    if lines:
        _check(_run_batch([_ip()], lines, "host side"))
    try:
        from provisioner.providers.local import netlink  # lazy: ctypes, only when namespaces are made
        netlink.configure([(net.netns(k), NODE_IF, net.addrs[k], net.prefixlen, net.host_addr)
                           for k in keys],
                          {net.netns(k): pairs for k, pairs in neighbours.items()},
                          {net.netns(k): created_as[k] for k in keys})
    except OSError:
        # The same with `ip`, one process per namespace (idempotent: "replace" where the
        # netlink round got part of the way; a rename already done fails, and is ignored).
        for k in keys:
            subprocess.run(_ip_in(net, k) + ["link", "set", created_as[k], "name", NODE_IF],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs = [_run_batch(_ip_in(net, k),
                            ([f"addr replace {net.addrs[k]}/{net.prefixlen} dev {NODE_IF}", f"link set {NODE_IF} up",
                              "link set lo up", f"route replace default via {net.host_addr}"] if k in keys else [])
                            + [f"neigh replace {a} lladdr {m} dev {NODE_IF} nud permanent" for a, m in pairs], k)
                 for k, pairs in neighbours.items()]
        for p in procs:
            _check(p)
    # A new controller namespace (at `up`, or after a reboot) gets srun's ports passed on.
    srun_note = forward_srun(net) if CONTROLLER_KEY in keys else ""
    try:
        on_machine = len(os.listdir(NETNS_DIR)) + (len(net.addrs) if net.rootless else 0)
    except OSError:
        on_machine = len(net.addrs)
    return "\n   ".join(line for line in (kernel_room(on_machine), srun_note) if line)


def _make_namespace_files(paths: List[str]) -> None:
    """A network namespace kept at each of ``paths`` (rootless: `ip netns add` makes them in
    /run/netns, root's): the file, then `unshare --net=FILE`, which bind-mounts the new
    namespace on it; one shell for all of them."""
    for path in paths:
        open(path, "a").close()
    script = 'u=$1; shift; for p; do "$u" --net="$p" true || exit 1; done'
    res = subprocess.run([find_binary("sh") or "/bin/sh", "-c", script, "sh", find_binary("unshare") or "unshare",
                          *paths], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        raise StartupError(f"making the nodes' network namespaces failed: {res.stdout.strip()[-300:]}",
                           "the nodes need user namespaces and the kernel's bridge and macvlan devices",
                           doc="docs/troubleshooting.md#network-namespaces")


def _namespaces(tag: str) -> List[str]:
    """Names of the namespaces of the cluster tagged ``tag`` that exist."""
    prefix = netns_name(tag, "")
    try:
        return [n for n in os.listdir(NETNS_DIR) if n.startswith(prefix)]
    except OSError:
        return []


def _devices(tag: str) -> List[str]:
    """The cluster's devices on this host that exist: its parent device, then its macvlan."""
    return [dev for dev in (bridge_name(tag), host_if_name(tag)) if _link_exists(dev)]


def delete(tag: str, netns_dir: str = NETNS_DIR) -> None:
    """Remove every namespace and device of the cluster tagged ``tag`` (what is already gone
    is skipped): deleting a namespace takes its macvlan with it. Rootless (``netns_dir`` the
    cluster's own): its user namespace's holder ends, and the kernel frees all of it."""
    if netns_dir != NETNS_DIR:
        from provisioner.providers.local import userns
        userns.stop_holder(netns_dir)
        return
    # The parent device first: deleting it takes every macvlan on it (the host's and the
    # nodes') in one go; each device deletion waits for the kernel (~40 ms), not each macvlan.
    lines = [f"link del {dev}" for dev in _devices(tag)[:1]]
    lines += [f"netns del {n}" for n in _namespaces(tag)]
    if lines:
        # -force: go on past a line that fails (a namespace another `down` removed meanwhile).
        subprocess.run([_ip(), "-force", "-batch", "-"], input="\n".join(lines) + "\n", text=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def delete_nodes(net: Network, keys: List[str]) -> None:
    """Remove the namespaces of ``keys`` (nodes leaving a running cluster; each takes its
    macvlan with it); the rest of the network stays."""
    if net.rootless:
        if os.geteuid() != 0:
            from provisioner.providers.local import userns
            userns.call("delete_nodes", net, keys)
            return
        paths = [net.netns(k) for k in keys if _is_namespace(net.netns(k))]
        if paths:
            subprocess.run([find_binary("umount") or "umount", *paths], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        return
    lines = [f"netns del {netns_name(net.tag, k)}" for k in keys if os.path.exists(netns_path(net.tag, k))]
    if lines:
        subprocess.run([_ip(), "-force", "-batch", "-"], input="\n".join(lines) + "\n", text=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def unplug(net: Network, key: str) -> bool:
    """Delete ``key``'s interface in its namespace, as a crashed host falls silent: nothing it
    sends leaves any more (no FIN or RST for the connections others hold to it), and the
    namespace can be deleted and made again (create) without its macvlan's address in the
    way (the old namespace may live on a while: orphaned TCP sockets hold it). False where
    the namespace does not exist."""
    if net.rootless and os.geteuid() != 0:
        from provisioner.providers.local import userns
        return userns.call("unplug", net, [key]) == "True"
    if key in missing(net):
        return False
    res = subprocess.run(_ip_in(net, key) + ["link", "del", NODE_IF], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0 and _has_link(net, key):
        raise StartupError(f"cutting {key} off the cluster's network failed: {res.stdout.strip()[-200:]}")
    return True


def _has_link(net: Network, key: str) -> bool:
    res = subprocess.run(_ip_in(net, key) + ["link", "show", NODE_IF],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return res.returncode == 0


def leftovers(tag: str, netns_dir: str = NETNS_DIR) -> List[str]:
    """Namespaces and devices of ``tag`` that still exist (for tests and `down`'s check)."""
    if netns_dir != NETNS_DIR:
        from provisioner.providers.local import userns
        pid = userns.holder_pid(netns_dir)
        return [f"user namespace holder {pid}"] if pid else []
    return [f"netns {n}" for n in _namespaces(tag)] + [f"link {d}" for d in _devices(tag)]


def unavailable_reason() -> str:
    """Why per-node network namespaces cannot be made here ("" when they may be): they need
    `ip`, and root (CAP_NET_ADMIN and CAP_SYS_ADMIN in the host's namespaces) or, rootless,
    a user namespace of the cluster's own (userns.py: util-linux's unshare and nsenter).
    Whether the kernel has the devices and lets the user make them shows when `up` makes
    them (provision falls back to the host's network, and says why, where it refuses)."""
    if os.geteuid() != 0 and not (find_binary("unshare") and find_binary("nsenter")):
        return ("rootless without util-linux's unshare and nsenter: nodes share this host's network "
                "(a loopback address each; ports can clash)")
    if not find_binary("ip"):
        return "no 'ip' program (apt-get install iproute2): nodes share this host's network"
    return ""


def run_in_namespace(argv: List[str]) -> int:
    """OP NETWORK_JSON KEYS_JSON, run by userns.call in the holder's namespaces (a rootless
    cluster): this module's function, its printed result, or one error line."""
    op, net, keys = argv[0], Network.from_dict(json.loads(argv[1])), json.loads(argv[2])
    try:
        if op == "create":
            print(create(net, keys))
        elif op == "delete_nodes":
            delete_nodes(net, keys)
        elif op == "unplug":
            print(unplug(net, keys[0]))
        else:
            print(f"unknown operation {op}", file=sys.stderr)
            return 2
    except StartupError as exc:
        print(exc.message, file=sys.stderr)
        return 1
    return 0
