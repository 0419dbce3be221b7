"""The local backend's node addresses on the loopback network: 127.B.x.y, one block
127.B.0.0/16 per cluster (never 127.0.0.0/16, whose 127.0.1.1 Debian gives the host name),
a block no other cluster of this home uses where one is free. names.py writes them into
the cluster's hosts file; as root each node's network namespace has its own address
instead (network_plan.py).
"""

from __future__ import annotations

import random
from typing import Dict, Iterable, Optional

from provisioner.config.types import ClusterSpec


# 127.0.x.x holds localhost and Debian's 127.0.1.1 <hostname>; 127.255 is left alone.
BLOCK_RANGE = (2, 254)
PER_THIRD_OCTET = 254  # .1 to .254 in each /24


def node_address(block: int, index: int) -> str:
    """The address of the ``index``-th node (0-based) in block 127.<block>.0.0/16."""
    return f"127.{block}.{index // PER_THIRD_OCTET}.{index % PER_THIRD_OCTET + 1}"


def node_addresses(spec: ClusterSpec, block: int) -> Dict[str, str]:
    return {n.name: node_address(block, i) for i, n in enumerate(spec.nodes)}


def pick_block(taken: Iterable[int], seed=None) -> int:
    """A /16 block no other cluster of this home uses (any block when all are taken: the
    ports still differ, so clusters sharing a block still work)."""
    lo, hi = BLOCK_RANGE
    used = set(taken)
    free = [b for b in range(lo, hi + 1) if b not in used]
    return random.Random(seed).choice(free or list(range(lo, hi + 1)))


def block_of(addrs: Dict[str, str]) -> Optional[int]:
    """The block a cluster's node addresses lie in (None for the old shared 127.0.0.1)."""
    for addr in addrs.values():
        parts = addr.split(".")
        if len(parts) == 4 and parts[0] == "127" and parts[1] != "0":
            return int(parts[1])
    return None
