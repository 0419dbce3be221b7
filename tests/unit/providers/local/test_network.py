"""Pure logic of the local backend's node networks (providers/local/network.py) and how a
node's start chain joins them (no device is made here)."""

from __future__ import annotations

from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.providers.local import names, network, network_plan


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
