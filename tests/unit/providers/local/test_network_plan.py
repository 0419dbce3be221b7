"""A local cluster's network as data (providers/local/network_plan.py): its subnet, names,
addresses, MACs and static ARP entries (pure logic; the namespaces themselves:
tests/integration/test_node_isolation.py)."""

from __future__ import annotations

import ipaddress

import pytest

from provisioner.providers.local import network_plan


@pytest.mark.parametrize("count,prefix", [(1, 24), (3, 24), (253, 24), (254, 23), (509, 23), (510, 22)])
def test_a_subnet_holds_the_nodes_the_controller_and_the_host(count, prefix):
    assert network_plan.prefix_for(count) == prefix
    subnet = ipaddress.ip_network(f"198.18.0.0/{prefix}")
    assert subnet.num_addresses - 2 >= count + 1  # + the host; network and broadcast left out


def test_subnets_avoid_other_clusters_and_the_hosts_routes():
    taken = ["198.18.0.0/24", "198.18.1.0/24"]
    routed = [ipaddress.ip_network("198.18.0.0/16")]  # e.g. another home's cluster, or a LAN
    for seed in range(20):
        net = network_plan.pick_subnet(2, taken, routed, seed=seed)
        assert net.subnet_of(network_plan.POOL) and net.prefixlen == 24
        assert not any(net.overlaps(ipaddress.ip_network(t)) for t in taken)
        assert not net.overlaps(routed[0])


def test_no_free_subnet_is_one_clear_error():
    with pytest.raises(Exception) as err:
        network_plan.pick_subnet(2, [], [network_plan.POOL])
    assert "no free subnet" in str(err.value)


def test_host_routes_are_read_from_proc_net_route(tmp_path):
    route = tmp_path / "route"
    route.write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"  # default: not a subnet of ours
        "eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"  # 192.168.0.0/24
        "schx\t001A13C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")  # 198.19.26.0/24
    assert network_plan.host_networks(str(route)) == [ipaddress.ip_network("192.168.0.0/24"),
                                                 ipaddress.ip_network("198.19.26.0/24")]


def test_plan_gives_the_host_then_the_controller_then_the_nodes():
    net = network_plan.plan("abc123", ipaddress.ip_network("198.18.4.0/24"), ["node1", "node2"])
    assert net.host_addr == "198.18.4.1"
    assert net.addrs == {"controller": "198.18.4.2", "node1": "198.18.4.3", "node2": "198.18.4.4"}
    assert network_plan.Network.from_dict(net.to_dict()) == net
    assert len(net.parent) <= 15 and len(net.host_if) <= 15  # interface names: 15 characters at most
    assert network_plan.netns_path("abc123", "node1") == "/run/netns/simcluster-abc123-node1"


def test_the_tag_differs_between_homes():
    assert network_plan.tag_of("/a/demo") != network_plan.tag_of("/b/demo")
    assert len(network_plan.tag_of("/a/demo")) == 6


def test_each_machine_has_a_mac_of_its_address_and_knows_the_controller_and_host_from_the_start():
    net = network_plan.plan("abc123", ipaddress.ip_network("198.18.4.0/24"), ["node1", "node2"])
    assert network_plan.mac_of("198.18.4.3") == "02:53:c6:12:04:03"
    macs = {network_plan.mac_of(a) for a in [net.host_addr, *net.addrs.values()]}
    assert len(macs) == 4  # one each
    # A node knows the host and the controller; the controller knows the host and every node.
    assert network_plan.static_neighbours(net, "node2") == [("198.18.4.1", "02:53:c6:12:04:01"),
                                                       ("198.18.4.2", "02:53:c6:12:04:02")]
    assert [a for a, _ in network_plan.static_neighbours(net, network_plan.CONTROLLER_KEY)] == [
        "198.18.4.1", "198.18.4.3", "198.18.4.4"]
