"""The few rtnetlink requests that set up a node's network namespace, from this process.

`up` gives every node's namespace its address, brings eth0 and lo up and adds a default
route. One `ip -n NS ...` process per namespace costs ~3 ms of CPU each (256 nodes: most of
a second on two cores); here one thread enters each namespace in turn (setns(2) changes
only the calling thread's network namespace) and sends three netlink messages over a
socket opened there (and the namespace's permanent ARP entries: network_plan.static_neighbours).
Linux only; network.configure falls back to `ip` if this fails.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
from typing import Dict, List, Optional, Tuple

CLONE_NEWNET = 0x40000000
RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE, RTM_NEWNEIGH = 16, 20, 24, 28
IFLA_IFNAME = 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x100, 0x200, 0x400
NDA_DST, NDA_LLADDR, NUD_PERMANENT = 1, 2, 0x80
NLMSG_ERROR = 2
IFA_LOCAL, IFA_ADDRESS = 2, 1
RTA_OIF, RTA_GATEWAY = 4, 5
IFF_UP = 0x1
RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST = 254, 3, 0, 1
LOOPBACK_INDEX = 1  # lo is always interface 1 of a network namespace


def _attr(kind: int, data: bytes) -> bytes:
    length = 4 + len(data)
    return struct.pack("HH", length, kind) + data + b"\0" * ((4 - length % 4) % 4)


class _Route:
    """A NETLINK_ROUTE socket of the calling thread's network namespace."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def request(self, kind: int, flags: int, payload: bytes) -> None:
        """Send one request and raise OSError if the kernel refuses it."""
        self.seq += 1
        self.sock.send(struct.pack("IHHII", 16 + len(payload), kind, flags | NLM_F_REQUEST | NLM_F_ACK, self.seq, 0)
                       + payload)
        data = self.sock.recv(65536)
        _, mtype, _, _, _ = struct.unpack_from("IHHII", data)
        if mtype == NLMSG_ERROR:
            err = struct.unpack_from("i", data, 16)[0]
            if err:
                raise OSError(-err, os.strerror(-err))

    def link_up(self, index: int) -> None:
        self.request(RTM_NEWLINK, 0, struct.pack("BxHiII", socket.AF_UNSPEC, 0, index, IFF_UP, IFF_UP))

    def rename(self, index: int, name: str) -> None:
        self.request(RTM_NEWLINK, 0, struct.pack("BxHiII", socket.AF_UNSPEC, 0, index, 0, 0)
                     + _attr(IFLA_IFNAME, name.encode() + b"\0"))

    def add_address(self, index: int, addr: str, prefixlen: int) -> None:
        packed = socket.inet_aton(addr)
        self.request(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL,
                     struct.pack("BBBBI", socket.AF_INET, prefixlen, 0, 0, index)
                     + _attr(IFA_LOCAL, packed) + _attr(IFA_ADDRESS, packed))

    def add_default_route(self, gateway: str, index: int) -> None:
        self.request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL,
                     struct.pack("BBBBBBBBI", socket.AF_INET, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT,
                                 RT_SCOPE_UNIVERSE, RTN_UNICAST, 0)
                     + _attr(RTA_GATEWAY, socket.inet_aton(gateway)) + _attr(RTA_OIF, struct.pack("i", index)))

    def add_neighbour(self, index: int, addr: str, mac: str) -> None:
        """A permanent ARP entry (`ip neigh replace ADDR lladdr MAC dev IF nud permanent`)."""
        self.request(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE,
                     struct.pack("BxxxiHBB", socket.AF_INET, index, NUD_PERMANENT, 0, 0)
                     + _attr(NDA_DST, socket.inet_aton(addr)) + _attr(NDA_LLADDR, bytes.fromhex(mac.replace(":", ""))))


def _setns(libc, path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def configure(jobs: List[Tuple[str, str, str, int, str]],
              neighbours: Optional[Dict[str, List[Tuple[str, str]]]] = None,
              created_as: Optional[Dict[str, str]] = None) -> None:
    """For each (namespace path, interface, address, prefix length, gateway): the interface
    renamed from its ``created_as`` name (where the path has one), the address on
    the interface, the interface and lo up, a default route through the gateway; then for
    each namespace path of ``neighbours`` its (address, MAC) pairs as permanent ARP entries
    on that interface (the namespace may be one configured before). Runs in a thread of its
    own, which goes back to this process's namespace when done."""
    neighbours, created_as = neighbours or {}, created_as or {}
    ifname_of = {path: ifname for path, ifname, *_ in jobs}
    default_if = jobs[0][1] if jobs else "eth0"
    failure: List[BaseException] = []

    def work() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        home = f"/proc/self/task/{threading.get_native_id()}/ns/net"
        back = os.open(home, os.O_RDONLY)
        try:
            for path, ifname, addr, prefixlen, gateway in jobs:
                _setns(libc, path)
                route = _Route()
                try:
                    if path in created_as:
                        index = socket.if_nametoindex(created_as[path])
                        route.rename(index, ifname)
                    else:
                        index = socket.if_nametoindex(ifname)
                    route.add_address(index, addr, prefixlen)
                    route.link_up(index)
                    route.link_up(LOOPBACK_INDEX)
                    route.add_default_route(gateway, index)
                    for neigh_addr, mac in neighbours.get(path, ()):
                        route.add_neighbour(index, neigh_addr, mac)
                finally:
                    route.close()
            for path, pairs in neighbours.items():
                if path in ifname_of:
                    continue
                _setns(libc, path)
                route = _Route()
                try:
                    index = socket.if_nametoindex(default_if)
                    for neigh_addr, mac in pairs:
                        route.add_neighbour(index, neigh_addr, mac)
                finally:
                    route.close()
        except BaseException as exc:  # reported to the caller, which falls back to `ip`
            failure.append(exc)
        finally:
            if libc.setns(back, CLONE_NEWNET) != 0:
                failure.append(OSError(ctypes.get_errno(), "setns back to this process's namespace"))
            os.close(back)

    thread = threading.Thread(target=work, name="simcluster-netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


__all__: List[str] = ["configure"]
