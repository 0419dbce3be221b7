"""Rootless nodes: the host name by sethostname in a user namespace, the chain that enters
the cluster's user namespace, the network kept in the cluster's directory, and the client
prefix that keeps the user's uid and never finds its own wrapper again."""

from __future__ import annotations

import ipaddress
import os
import subprocess

from provisioner.cluster.model import command_runner as runner
from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.providers.local import names, network, network_plan, userns


def test_in_a_user_namespace_the_host_name_is_set_by_sethostname_not_proc_sys():
    rootless = names.namespace_prefix("/s/etc/node-mounts.fstab", 1001, 1002, "/usr/bin/tini", "/s/spool")
    script = rootless[rootless.index("-c") + 1]
    assert "/proc/sys/kernel/hostname" not in script and f'{runner.find_binary("hostname")} "$a"' in script
    root = names.namespace_prefix("/s/etc/node-mounts.fstab", 0, 0, "/usr/bin/tini", "/s/spool")
    assert "/proc/sys/kernel/hostname" in root[root.index("-c") + 1]


def test_with_the_clusters_user_namespace_the_chain_is_roots_then_the_user_again():
    enter = userns.enter_argv("/c/netns")
    argv = names.namespace_prefix("/c/etc/node-mounts.fstab", 1001, 1002, "/usr/bin/tini", "/c/spool",
                                  netns=f"/c/netns/simcluster-abc123-{NODE_TOKEN}", starter="/x/simcluster-node-start",
                                  enter=enter)
    assert argv[:len(enter)] == enter and "/c/netns/holder.pid" in enter
    rest = argv[len(enter):]
    assert rest[:3] == ["/x/simcluster-node-start", "--net", f"/c/netns/simcluster-abc123-{NODE_TOKEN}"]
    assert rest[-4:] == [runner.find_binary("unshare"), "--user", "--map-user=1001", "--map-group=1002"]
    # Without the starter: root's unshare chain (no --user before the last), hostname by sethostname.
    chain = names.namespace_prefix("/c/etc/node-mounts.fstab", 1001, 1002, "/usr/bin/tini", "/c/spool",
                                   netns="/c/netns/n", enter=enter)[len(enter):]
    assert chain[0].endswith("nsenter") and chain[1] == "--net=/c/netns/n"
    assert chain.count("--user") == 1 and "/proc/sys/kernel/hostname" not in " ".join(chain)


def test_a_rootless_network_keeps_its_namespaces_in_the_clusters_directory():
    net = network_plan.plan("abc123", ipaddress.ip_network("198.18.4.0/24"), ["node1"], "/c/netns")
    assert net.rootless and net.netns("node1") == "/c/netns/simcluster-abc123-node1"
    again = network_plan.Network.from_dict(net.to_dict())
    assert again == net
    root = network_plan.plan("abc123", ipaddress.ip_network("198.18.4.0/24"), ["node1"])
    assert not root.rootless and "netns_dir" not in root.to_dict()
    assert root.netns("node1") == "/run/netns/simcluster-abc123-node1"


def test_without_a_holder_every_namespace_of_a_rootless_network_is_missing(tmp_path):
    net = network_plan.plan("abc123", ipaddress.ip_network("198.18.4.0/24"), ["node1"], str(tmp_path))
    (tmp_path / "holder.pid").write_text(f"{os.getpid()} not-my-start-time\n")  # a pid reused: not the holder
    assert userns.holder_pid(str(tmp_path)) is None
    assert sorted(network.missing(net)) == ["controller", "node1"]


def test_the_client_prefix_drops_the_wrappers_directory_from_path(tmp_path):
    """The wrapper `simcluster env` writes runs the command through this prefix; found on a
    PATH that still had the wrappers first, it would run itself again (inside the namespace,
    where it may not enter it). Run here with a script that prints PATH in nsenter's place."""
    netns_dir = tmp_path / "netns"
    netns_dir.mkdir()
    (netns_dir / "holder.pid").write_text("1 0\n")
    argv = userns.client_argv(str(netns_dir), 1001, 1002)
    i = argv.index(runner.find_binary("nsenter"))
    fake = tmp_path / "nsenter"
    fake.write_text('#!/bin/sh\necho "$PATH"\n')
    fake.chmod(0o755)
    argv[i] = str(fake)
    wrappers = str(tmp_path / "bin")
    assert argv[i + 1] == wrappers
    out = subprocess.run(argv[:i + 2], env={"PATH": f"{wrappers}:/usr/bin:/bin"}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert out.stdout.split() == ["/usr/bin:/bin"], out.stdout + out.stderr


def test_the_client_prefix_says_when_the_clusters_network_is_gone(tmp_path):
    argv = userns.client_argv(str(tmp_path), 1001, 1002) + ["true"]
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert res.returncode == 1 and "the cluster's network is gone" in res.stderr


def test_where_user_namespaces_are_refused_the_note_names_the_setting_and_the_way_out(tmp_path):
    restrict = tmp_path / "apparmor_restrict_unprivileged_userns"
    restrict.write_text("1\n")
    settings = [(str(restrict), "1", names.USERNS_SETTINGS[0][2]), (str(tmp_path / "absent"), "0", "never")]
    note = names.userns_refusal(1000, settings)
    assert "kernel.apparmor_restrict_unprivileged_userns=1" in note and "--sudo" in note
    restrict.write_text("0\n")
    assert "refuses ordinary users a user namespace" in names.userns_refusal(1000, settings)
    assert names.userns_refusal(0, settings) == ""


def test_the_clusters_own_commands_are_found_past_its_wrappers(tmp_path, monkeypatch):
    """`simcluster status` (and every check) run from a shell where `simcluster env` was
    evaluated: the wrappers come first on PATH, and a wrapper run inside the cluster's
    namespaces would try to enter them again (status then said slurmctld did not answer)."""
    netns_dir = tmp_path / "netns"
    wrappers, real = tmp_path / "bin", tmp_path / "real"
    for d in (wrappers, real):
        d.mkdir()
        (d / "sinfo").write_text("#!/bin/sh\n")
        (d / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}:{real}:/usr/bin:/bin")
    assert runner.find_binary("sinfo") == str(wrappers / "sinfo")  # what the runner used to run
    assert userns.find_client("sinfo", str(netns_dir)) == str(real / "sinfo")
    assert userns.find_client("/x/y", str(netns_dir)) == "/x/y"
