"""The local backend's node addresses and hosts file (pure logic; the lookups themselves
are checked in jobs by tests/integration/test_names.py)."""

from __future__ import annotations

from provisioner.providers.local import names
from tests.unit.conftest import spec_from


def test_each_node_gets_its_own_loopback_address_outside_127_0():
    spec = spec_from({"name": "c", "nodes": 300})
    addrs = names.node_addresses(spec, block=7)
    assert addrs["node1"] == "127.7.0.1" and addrs["node254"] == "127.7.0.254"
    assert addrs["node255"] == "127.7.1.1"  # .0 and .255 are never used
    assert len(set(addrs.values())) == 300
    assert names.block_of(addrs) == 7 and names.block_of({"node1": "127.0.0.1"}) is None


def test_block_avoids_other_clusters_blocks():
    taken = set(range(2, 254))
    assert names.pick_block(taken) == 254
    assert 2 <= names.pick_block(range(2, 255)) <= 254  # all taken: still a valid block


def test_hosts_file_has_one_line_per_address_and_no_node_name_twice(tmp_path):
    system = tmp_path / "hosts"
    system.write_text("127.0.0.1 localhost\n127.0.0.1 vm # the host\n127.0.0.1 node1\n"
                      "::1 localhost ip6-localhost\n10.0.0.5 other\n")
    text = names.hosts_file({"node1": "127.9.0.1", "node2": "127.9.0.2"}, system_hosts=system)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["127.9.0.1 node1", "127.9.0.2 node2", "127.0.0.1 localhost vm",
                     "::1 localhost ip6-localhost", "10.0.0.5 other"]
    mapped = names.hosts_file({"node1": "127.9.0.1"}, system_hosts=tmp_path / "nope", ipv6_mapped=True)
    assert mapped.splitlines()[1:] == ["127.9.0.1 node1", "127.0.0.1 localhost", "::ffff:127.9.0.1 node1"]


def test_namespace_prefix_keeps_the_user_when_rootless():
    root = names.namespace_prefix("/s/etc/hosts", 0, 0)
    assert root[:3] == ["unshare", "--mount", "--uts"] and "--user" not in root and root[-1] == "/s/etc/hosts"
    user = names.namespace_prefix("/s/etc/hosts", 1001, 1002)
    assert user[-4:] == ["unshare", "--user", "--map-user=1001", "--map-group=1002"]
