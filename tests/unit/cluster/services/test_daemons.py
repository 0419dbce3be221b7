"""The local backend's daemons are named by absolute path, whatever the caller's PATH: an
ordinary user's PATH on Debian has no /usr/sbin, where slurmd, slurmctld and munged are,
and a program handed to `unshare` or `tini` by bare name is looked up on that PATH."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from provisioner.cluster.model import command_runner as runner
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.state import ClusterState
from provisioner.cluster.services import daemons
from provisioner.providers.local import names
from provisioner.providers.local.provider import LocalProvider
from tests.unit.conftest import spec_from

DEBIAN_USER_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
DAEMONS = ("slurmd", "slurmctld", "munged", "slurmdbd", "mariadbd")


@pytest.fixture
def sbin(tmp_path, monkeypatch):
    """A system directory, searched after PATH, holding the daemons (as /usr/sbin does);
    PATH is Debian's default for users."""
    d = tmp_path / "sbin"
    d.mkdir()
    for name in DAEMONS:
        exe = d / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setattr(runner, "SYSTEM_DIRS", (str(d), *runner.SYSTEM_DIRS))
    monkeypatch.setenv("PATH", DEBIAN_USER_PATH)
    return d


def test_find_binary_looks_past_the_users_path(sbin):
    assert runner.find_binary("slurmd") == f"{sbin}/slurmd"
    assert runner.find_binary("sh") in ("/usr/bin/sh", "/bin/sh")  # PATH first
    assert runner.find_binary("no-such-program-here") is None
    assert runner.find_binary("/opt/x/slurmd") == "/opt/x/slurmd"


def _cluster(root: Path, pid_namespace: bool) -> Cluster:
    spec = spec_from({"name": root.name, "nodes": 2})
    for sub in ("etc", "log", "run", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    st = ClusterState(name=spec.name, backend="local", spec=spec.to_dict(), root=str(root), hostname="simhost",
                      user="u", controller_port=21000, node_ports={"node1": 21001, "node2": 21002})
    st.provider_data = {"resolver": names.NAMESPACE, "pid_namespace": pid_namespace, "task_prolog": False,
                        "node_addrs": {"node1": "127.9.0.1", "node2": "127.9.0.2"}}
    provider = LocalProvider()
    st.placement = provider.placement(st).to_dict()
    return Cluster(st, provider)


@pytest.mark.parametrize("pid_namespace", [True, False])
def test_every_daemon_argv_names_its_programs_by_absolute_path(sbin, tmp_path, pid_namespace, monkeypatch):
    # The chain of standard programs (where simcluster-node-start is not built).
    monkeypatch.setattr(names, "node_starter", lambda: None)
    c = _cluster(tmp_path / "c", pid_namespace)
    for argv in (daemons.munged_argv(c), daemons.slurmctld_argv(c), daemons.slurmdbd_argv(c),
                 daemons.slurmd_argv(c, "node1")):
        assert os.path.isabs(argv[0]), argv
    argv = daemons.slurmd_argv(c, "node1")
    u = argv.index(runner.find_binary("unshare"))  # the namespace prefix comes first ...
    # ... behind the shell that gives each start a boot clock of its own (PID namespaces, as root)
    assert argv[:u] in ([], [runner.find_binary("sh"), "-c", names._FRESH_BOOTTIME_SCRIPT]), argv[:u]
    assert bool(argv[:u]) == (bool(pid_namespace and names.pid_init()) and os.geteuid() == 0
                              and os.path.exists(names.TIME_NAMESPACE))
    assert f"{sbin}/slurmd" in argv and "slurmd" not in argv  # ... and slurmd behind it is absolute too
    i = argv.index("-c", u)
    assert os.path.isabs(argv[i - 1])  # the shell
    if pid_namespace and names.pid_init():
        assert os.path.isabs(argv[argv.index("--") - 1])  # tini
    # mount by path inside the script too: no command word is a bare name.
    script = argv[i + 1]
    assert not re.search(r"(^|[;{|&] *)(mount|hostname) ", script), script
    assert f"{runner.find_binary('mount')} -a " in script
    assert '> /proc/sys/kernel/hostname' in script  # the host name by the shell itself, no program


def test_the_node_starter_replaces_the_chain_where_it_is_built(sbin, tmp_path, monkeypatch):
    starter = tmp_path / "simcluster-node-start"
    monkeypatch.setattr(names, "node_starter", lambda: str(starter))
    monkeypatch.setattr(names, "pid_init", lambda: "/usr/bin/tini")
    c = _cluster(tmp_path / "c", True)
    argv = daemons.slurmd_argv(c, "node1")
    assert argv[0] == str(starter)
    # The same fstab and spool tmpfs as the chain's shell script, the node's host name, then
    # the starter itself as pid 1 (--init, no tini) and the absolute slurmd behind it.
    assert argv[argv.index("--fstab") + 1] == f"{c.state.root}/etc/node-mounts.fstab"
    assert argv[argv.index("--hostname") + 1] == "node1"
    assert argv[argv.index("--tmpfs") + 1] == f"{c.state.root}/spool/node1"
    rest = argv[argv.index("--init"):]
    assert rest[:2] == ["--init", "--"] and rest[2] == f"{sbin}/slurmd" and "/usr/bin/tini" not in argv
    assert "unshare" not in " ".join(argv) and "-c" not in argv
    # A boot clock of its own for each start (a time namespace), where the kernel has them.
    fresh = os.geteuid() == 0 and os.path.exists(names.TIME_NAMESPACE)
    assert ("--fresh-boottime" in argv[:argv.index("--init")]) == fresh
    assert ("their own" in c.placement.node_boot_time) == fresh, c.placement.node_boot_time
    # Without a PID namespace (no tini) the chain stays: the starter always makes one.
    monkeypatch.setattr(names, "pid_init", lambda: None)
    assert daemons.slurmd_argv(_cluster(tmp_path / "d", True), "node1")[0] == runner.find_binary("unshare")


def test_host_runner_names_programs_by_path_other_runners_leave_it_to_their_machine(sbin):
    assert runner.HostRunner().program("munged") == f"{sbin}/munged"
    assert runner.Runner().program("munged") == "munged"  # a container's root has sbin on its PATH


def test_nodes_get_the_clusters_config_at_etc_slurm_only_where_the_host_has_the_directory(tmp_path):
    assert names.etc_slurm_note(True, tmp_path) == ""  # a directory to mount over: the cluster's config
    missing = names.etc_slurm_note(True, tmp_path / "absent")
    assert "does not create it" in missing and "SLURM_CONF" in missing
    assert "libnss_wrapper" in names.etc_slurm_note(False, tmp_path)


def test_the_placement_mounts_the_config_directory_over_etc_slurm_in_the_nodes_fstab(tmp_path):
    c = _cluster(tmp_path / "c", True)
    fstab = c.placement.extra_files.get(names.FSTAB_FILE, "")
    lines = [line.split() for line in fstab.splitlines() if not line.startswith("#")]
    assert [f"{c.state.root}/etc/hosts", "/etc/hosts"] == lines[0][:2]
    if Path(names.ETC_SLURM).is_dir():
        assert [f"{c.state.root}/etc", "/etc/slurm", "none", "bind"] in [line[:4] for line in lines]
        assert c.placement.node_etc_slurm.startswith("the cluster's config")
    else:
        assert "/etc/slurm" not in fstab and "SLURM_CONF" in c.placement.node_etc_slurm
    assert f"{c.state.root}/etc/{names.FSTAB_FILE}" in c.placement.slurmd_prefix


def test_the_boot_time_note_says_why_nodes_keep_the_hosts_boot_time(monkeypatch):
    monkeypatch.setattr(names, "TIME_NAMESPACE", "/nonexistent/ns/time")
    assert "no time namespaces (Linux < 5.6)" in names.fresh_boottime_note(0, "/usr/bin/tini")
    monkeypatch.setattr(names, "TIME_NAMESPACE", "/proc/self/ns/time")
    if os.path.exists("/proc/self/ns/time"):
        assert names.fresh_boottime_note(0, "/usr/bin/tini") == ""
        assert "rootless" in names.fresh_boottime_note(1000, "/usr/bin/tini")
        assert "tini" in names.fresh_boottime_note(0, None)
