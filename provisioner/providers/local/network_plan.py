"""A local cluster's network as data (network.py makes it): the subnet it takes from
198.18.0.0/15 where no route of this host overlaps, the names of its devices and network
namespaces (by the cluster's tag), each machine's address, the MACs made of the addresses,
and the ARP entries every machine gets (static_neighbours). No I/O but reading the host's
routes (host_networks); `Network` is what the cluster's state keeps.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import random
from dataclasses import dataclass
from typing import Dict, Iterable, List, Tuple

from provisioner.errors import StartupError


POOL = ipaddress.ip_network("198.18.0.0/15")
NETNS_DIR = "/run/netns"
NODE_IF = "eth0"  # a node's interface, named as on a host
CONTROLLER_KEY = "controller"


def tag_of(root: str) -> str:
    """Six hex digits naming a cluster's devices: its state directory's (two homes may both
    hold a cluster "demo"; interface names may have 15 characters)."""
    return hashlib.sha1(root.encode()).hexdigest()[:6]


def bridge_name(tag: str) -> str:
    """The cluster's parent device, a dummy (a bridge in clusters made before; interface
    names have 15 characters at most)."""
    return f"scb{tag}"


def host_if_name(tag: str) -> str:
    """This host's macvlan on the cluster's network."""
    return f"sch{tag}"


def netns_name(tag: str, key: str) -> str:
    return f"simcluster-{tag}-{key}"


def netns_path(tag: str, key: str, netns_dir: str = NETNS_DIR) -> str:
    return f"{netns_dir}/{netns_name(tag, key)}"


@dataclass(frozen=True)
class Network:
    """One cluster's network, as the state file keeps it (provider_data["network"])."""

    tag: str
    subnet: str  # "198.18.4.0/24"
    host_addr: str  # this host's address on it (the Slurm commands run here use it)
    addrs: Dict[str, str]  # key (CONTROLLER_KEY or a node's name) -> address
    # Where the namespaces are kept: root's /run/netns (`ip netns`), or rootless the
    # cluster's own directory, seen as namespaces only in its user namespace (userns.py).
    netns_dir: str = NETNS_DIR

    @property
    def rootless(self) -> bool:
        return self.netns_dir != NETNS_DIR

    def netns(self, key: str) -> str:
        """The file that keeps ``key``'s network namespace."""
        return netns_path(self.tag, key, self.netns_dir)

    @property
    def prefixlen(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    @property
    def parent(self) -> str:
        return bridge_name(self.tag)

    @property
    def host_if(self) -> str:
        return host_if_name(self.tag)

    def to_dict(self) -> Dict:
        d = {"tag": self.tag, "subnet": self.subnet, "host_addr": self.host_addr, "addrs": dict(self.addrs)}
        if self.rootless:
            d["netns_dir"] = self.netns_dir
        return d

    @classmethod
    def from_dict(cls, d: Dict) -> "Network":
        return cls(tag=d["tag"], subnet=d["subnet"], host_addr=d["host_addr"], addrs=dict(d["addrs"]),
                   netns_dir=d.get("netns_dir", NETNS_DIR))


def prefix_for(count: int) -> int:
    """The longest prefix (at most /24) whose subnet holds ``count`` machines, the host,
    and the network and broadcast addresses."""
    return min(24, 32 - math.ceil(math.log2(count + 3)))


def host_networks(route_file: str = "/proc/net/route") -> List[ipaddress.IPv4Network]:
    """The IPv4 destinations this host routes (its connected subnets among them), read
    from /proc/net/route (little-endian hex): a cluster's subnet must overlap none."""
    nets = []
    try:
        lines = open(route_file).read().splitlines()[1:]
    except OSError:
        return nets
    for line in lines:
        f = line.split()
        if len(f) < 8:
            continue
        dest, mask = int(f[1], 16), int(f[7], 16)
        if mask == 0:
            continue  # the default route covers everything; it is not a subnet of ours
        to_ip = lambda v: ipaddress.IPv4Address(int.from_bytes(v.to_bytes(4, "little"), "big"))  # noqa: E731
        try:
            nets.append(ipaddress.ip_network(f"{to_ip(dest)}/{to_ip(mask)}", strict=False))
        except ValueError:
            continue
    return nets


def pick_subnet(count: int, taken: Iterable[str], routed: Iterable[ipaddress.IPv4Network],
                seed=None) -> ipaddress.IPv4Network:
    """A free subnet of POOL for ``count`` machines: not another cluster's (``taken``) and
    not one this host routes (``routed``: other homes' clusters, anything else)."""
    busy = [ipaddress.ip_network(t) for t in taken] + list(routed)
    candidates = [n for n in POOL.subnets(new_prefix=prefix_for(count)) if not any(n.overlaps(b) for b in busy)]
    if not candidates:
        raise StartupError(f"no free subnet of {POOL} for {count} nodes",
                           "take down clusters you no longer need ('simcluster list')")
    return random.Random(seed).choice(candidates)


def plan(tag: str, subnet: ipaddress.IPv4Network, nodes: List[str], netns_dir: str = NETNS_DIR) -> Network:
    """Addresses in ``subnet``: the host first, then the controller, then the nodes in order."""
    hosts = subnet.hosts()
    host_addr, ctl = str(next(hosts)), str(next(hosts))
    addrs = {CONTROLLER_KEY: ctl}
    addrs.update({n: str(next(hosts)) for n in nodes})
    return Network(tag=tag, subnet=str(subnet), host_addr=host_addr, addrs=addrs, netns_dir=netns_dir)


def mac_of(addr: str) -> str:
    """The MAC address of the device that has ``addr``: locally administered (02:), then the
    address's four bytes, so each machine of a cluster's network has its own and every
    namespace can know the others' without asking (unique per cluster: the subnets are)."""
    return "02:53:" + ":".join(f"{b:02x}" for b in ipaddress.IPv4Address(addr).packed)


def static_neighbours(net: Network, key: str) -> List[Tuple[str, str]]:
    """(address, MAC) pairs namespace ``key`` knows from the start (NUD_PERMANENT): a node
    the controller's and this host's, the controller every node's and this host's.

    Why: at start every slurmd registers with slurmctld and slurmctld answers every node,
    so with ARP each of them broadcasts a request that macvlan copies to every device
    on the segment: at 1024 nodes a storm of a million copies, more than the devices'
    broadcast queues hold. Dropped requests left nodes unable to reach the controller
    ("Unable to register ... connect failure") or to answer it ("not responding"). With
    these entries none of that traffic asks; the kernel also keeps permanent entries out
    of its table's garbage-collection limits. Traffic between nodes (Slurm's message
    forwarding, jobs) resolves as on any network."""
    host = (net.host_addr, mac_of(net.host_addr))
    if key == CONTROLLER_KEY:
        return [host] + [(a, mac_of(a)) for k, a in net.addrs.items() if k != CONTROLLER_KEY]
    ctl = net.addrs[CONTROLLER_KEY]
    return [host, (ctl, mac_of(ctl))]
