"""The local backend's node addresses on the loopback network (pure logic)."""

from __future__ import annotations

from provisioner.providers.local import loopback_addresses
from tests.unit.conftest import spec_from


def test_each_node_gets_its_own_loopback_address_outside_127_0():
    spec = spec_from({"name": "c", "nodes": 300})
    addrs = loopback_addresses.node_addresses(spec, block=7)
    assert addrs["node1"] == "127.7.0.1" and addrs["node254"] == "127.7.0.254"
    assert addrs["node255"] == "127.7.1.1"  # .0 and .255 are never used
    assert len(set(addrs.values())) == 300
    assert loopback_addresses.block_of(addrs) == 7 and loopback_addresses.block_of({"node1": "127.0.0.1"}) is None


def test_block_avoids_other_clusters_blocks():
    taken = set(range(2, 254))
    assert loopback_addresses.pick_block(taken) == 254
    assert 2 <= loopback_addresses.pick_block(range(2, 255)) <= 254  # all taken: still a valid block
