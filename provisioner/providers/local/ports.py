"""Pick TCP ports that are really free, and never hand the same port to two clusters.

A fixed range collided with a port already in use at 64+ nodes, so every candidate is
test-bound; ports recorded by other clusters' state files are skipped too (a stopped
daemon of another cluster is not listening, but its cluster will want the port back).
"""

from __future__ import annotations

import errno
import random
import socket
from typing import Iterable, List, Set

from provisioner.errors import UsageError

PORT_RANGE = (20000, 32000)  # below the usual Linux ephemeral range (32768+)


def is_port_free(port: int) -> bool:
    """True if nothing listens on ``port`` (TCP, all addresses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def allocate_ports(count: int, reserved: Iterable[int] = (), seed=None) -> List[int]:
    """Return ``count`` distinct free ports, preferring one contiguous block (easy to read)."""
    taken: Set[int] = set(reserved)
    rng = random.Random(seed)
    lo, hi = PORT_RANGE
    for _ in range(64):
        start = rng.randrange(lo, hi - count)
        block = list(range(start, start + count))
        if all(p not in taken for p in block) and all(is_port_free(p) for p in block):
            return block
    # Fragmented space: gather free ports one by one.
    result: List[int] = []
    for port in range(lo, hi):
        if port not in taken and is_port_free(port):
            result.append(port)
            if len(result) == count:
                return result
    raise UsageError(f"could not find {count} free TCP ports in {lo}-{hi}",
                     "stop other clusters or services using these ports")


def check_ports_free(ports: Iterable[int]) -> None:
    """Explicit ports from the spec must be free; say which one is not."""
    for port in ports:
        if not is_port_free(port):
            raise UsageError(f"port {port} is already in use",
                             "choose another port in the cluster spec, or stop what is listening on it",
                             doc="docs/troubleshooting.md#port-already-in-use")
