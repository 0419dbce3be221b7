"""Pure logic of the local backend's node networks and cgroups (no device is made here)."""

from __future__ import annotations

import ipaddress

import pytest

from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.providers.local import cgroupfs, cgroups, names, network, network_plan


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


def test_node_cgroup_mounts_are_a_fresh_tmpfs_then_every_v1_hierarchy(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
                      "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
                      "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0\n"
                      "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
                      "proc /proc proc rw 0 0\n")
    lines = cgroups.fstab_lines(str(mounts))
    assert lines[0].split()[1:3] == ["/sys/fs/cgroup", "tmpfs"]
    # Not the host's own source name: `mount -a` would take the hierarchy as mounted already.
    assert all(line.split()[0] == cgroupfs.MOUNT_SOURCE for line in lines)
    # Only the hierarchies a node has a cgroup in (CONTROLLERS): not cpu,cpuacct here.
    assert lines[1:] == [f"{cgroupfs.MOUNT_SOURCE} /sys/fs/cgroup/memory cgroup rw,memory,X-mount.mkdir 0 0"]


def test_the_join_script_moves_the_shell_into_every_controller_of_its_node():
    text = cgroups.join_script("abc123")
    for c in cgroups.CONTROLLERS:
        assert f"/sys/fs/cgroup/{c}/simcluster/abc123" in text
    assert 'echo $$ > "$d/$0/cgroup.procs"' in text and text.endswith('exec "$@"')


def test_as_root_the_node_joins_its_network_and_cgroups_before_its_namespaces():
    argv = names.namespace_prefix("/s/etc/node-mounts.fstab", 0, 0, init="/usr/bin/tini", spool="/s/spool",
                                  netns=network_plan.netns_path("abc123", NODE_TOKEN), cgroup_join="JOIN")
    assert argv[0].endswith("nsenter") and argv[1] == f"--net=/run/netns/simcluster-abc123-{NODE_TOKEN}"
    i = argv.index("JOIN")
    assert argv[i - 1] == "-c" and argv[i + 1] == NODE_TOKEN
    assert argv[i + 2].endswith("unshare") and argv[i + 3] == "--cgroup"


def test_rootless_prefix_has_no_network_or_cgroup_part():
    argv = names.namespace_prefix("/s/etc/node-mounts.fstab", 1000, 1000)
    assert not any("nsenter" in a or a == "--cgroup" for a in argv)


def test_openmpi_goes_over_the_nodes_subnet(tmp_path):
    system = tmp_path / "openmpi-mca-params.conf"
    system.write_text("btl_tcp_if_include = eth9\nmpi_leave_pinned = 1\n")
    lines = names.openmpi_params("198.18.4.0/24", system=system).splitlines()
    assert "btl_tcp_if_include = 198.18.4.0/24" in lines and "mpi_leave_pinned = 1" in lines
    assert "btl_tcp_if_include = eth9" not in lines


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


def test_kernel_limits_are_raised_for_many_namespaces_and_never_lowered(tmp_path, monkeypatch):
    for name, value in (("gc_thresh2", 512), ("gc_thresh3", 1024), ("backlog", 5000)):
        (tmp_path / name).write_text(f"{value}\n")
    monkeypatch.setattr(network, "NEIGH_SYSCTL", str(tmp_path / "gc_thresh"))
    monkeypatch.setattr(network, "BACKLOG_SYSCTL", str(tmp_path / "backlog"))
    assert network.kernel_room(100) == ""  # 400 entries: the defaults hold
    line = network.kernel_room(1025)
    assert "gc_thresh3 1024 -> 8200" in line and "gc_thresh2 512 -> 4100" in line and "backlog" not in line
    assert (tmp_path / "gc_thresh3").read_text() == "8200" and (tmp_path / "backlog").read_text() == "5000\n"
    assert network.kernel_room(1025) == ""  # nothing to do the second time
    monkeypatch.setattr(network, "BACKLOG_SYSCTL", str(tmp_path / "absent" / "backlog"))
    assert "could not raise" in network.kernel_room(2000)


def test_each_node_with_gpus_gets_its_own_gres_conf_over_the_clusters():
    files = names.node_gres_files("# shared\nA B none bind 0 0\n", {"node2": "NodeName=node2 Name=gpu File=/d/nvidia1\n"},
                                  "/st/c x/etc")
    assert files["gres.d/node2.conf"] == "NodeName=node2 Name=gpu File=/d/nvidia1\n"
    # The shared mounts first, then the node's own gres.conf over the one slurmd reads.
    assert files["node-mounts.d/node2.fstab"] == (
        "# shared\nA B none bind 0 0\n/st/c\\040x/etc/gres.d/node2.conf /st/c\\040x/etc/gres.conf none bind 0 0\n")
    assert sorted(files) == ["gres.d/node2.conf", "node-mounts.d/node2.fstab"]


def test_namespace_devices_are_made_under_names_of_their_own():
    """Made under a unique name and renamed eth0 in the namespace: Debian 12's kernel refuses
    a new device named as one of the host's (its NIC is often eth0)."""
    names_ = [network.creation_name("abc123", i) for i in range(300)]
    assert len(set(names_)) == 300 and all(len(n) <= 15 for n in names_)
    assert network_plan.NODE_IF not in names_
    assert network.creation_name("abc123", 0) != network.creation_name("def456", 0)
