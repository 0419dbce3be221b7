"""The local backend's hosts file and node namespaces (pure logic; the lookups themselves
are checked in jobs by tests/integration/test_names.py)."""

from __future__ import annotations

import os
import signal
import subprocess

from provisioner.cluster.model import command_runner as runner
from provisioner.providers.local import names


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
    unshare = runner.find_binary("unshare")
    root = names.namespace_prefix("/s/etc/node-mounts.fstab", 0, 0)
    assert root[:3] == [unshare, "--mount", "--uts"] and "--user" not in root
    assert root[-1] == "/s/etc/node-mounts.fstab" and "-a --no-canonicalize -T" in root[-2]
    user = names.namespace_prefix("/s/etc/node-mounts.fstab", 1001, 1002)
    assert user[-4:] == [unshare, "--user", "--map-user=1001", "--map-group=1002"]


def test_namespace_prefix_with_an_init_adds_a_pid_namespace_and_the_spool_tmpfs():
    plain = names.namespace_prefix("/s/etc/node-mounts.fstab", 0, 0, spool="/s/spool")
    assert "--pid" not in plain and "/s/spool" not in plain  # no init: no PID namespace, spool on disk
    root = names.namespace_prefix("/s/etc/node-mounts.fstab", 0, 0, "/usr/bin/tini", "/s/spool")
    for flag in ("--pid", "--fork", "--kill-child", "--mount-proc"):
        assert flag in root
    i = root.index("/usr/bin/tini")
    assert root[i:i + 3] == ["/usr/bin/tini", "--", runner.find_binary("sh")]
    assert root[-2:] == ["/s/etc/node-mounts.fstab", "/s/spool"]
    assert "tmpfs" in root[i + 4] and "-T \"$0\"" in root[i + 4]
    user = names.namespace_prefix("/s/etc/node-mounts.fstab", 1001, 1002, "/usr/bin/tini", "/s/spool")
    assert "--pid" in user and user[-4:] == [runner.find_binary("unshare"), "--user", "--map-user=1001",
                                             "--map-group=1002"]


def test_node_fstab_binds_each_mount_in_order_with_paths_escaped():
    text = names.node_fstab([("/h/my cluster/etc/hosts", "/etc/hosts"), ("/h/my cluster/etc", "/etc/slurm")])
    assert text.splitlines()[1:] == ["/h/my\\040cluster/etc/hosts /etc/hosts none bind 0 0",
                                     "/h/my\\040cluster/etc /etc/slurm none bind 0 0"]


def test_daemon_pid_finds_the_program_among_the_descendants(tmp_path):
    # A chain like unshare -> tini -> slurmd: sh -> sh -> sleep.
    proc = subprocess.Popen(["sh", "-c", "sh -c 'sleep 30; :'; :"], start_new_session=True)
    try:
        pid = names.daemon_pid(proc.pid, "sleep", timeout=10)
        assert pid != proc.pid
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[0] == b"sleep"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_daemon_pid_gives_the_started_pid_back_when_the_chain_died():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert names.daemon_pid(proc.pid, "slurmd", timeout=1) == proc.pid


def test_openmpi_params_keep_the_system_file_and_set_loopback(tmp_path):
    system = tmp_path / "openmpi-mca-params.conf"
    assert names.openmpi_params(system=system) is None  # no Open MPI: nothing to mount
    system.write_text("# comment\nbtl = ^uct,openib,ofi\npml = ^ucx\nbtl_tcp_if_include=eth0 # site\n")
    lines = names.openmpi_params(system=system).splitlines()
    assert "pml = ^ucx" in lines and "# comment" in lines
    settings = [l for l in lines if l.split("=")[0].strip() in ("btl", "btl_tcp_if_include")]
    assert settings == ["btl_tcp_if_include = lo", "btl = self,tcp"]  # the host's own ones are replaced
