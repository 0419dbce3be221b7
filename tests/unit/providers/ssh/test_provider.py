"""SSHProvider on a scripted controller: the shared status, bundle and verify target of a
deployed cluster (providers/ssh/provider.py), with no host."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from provisioner.cluster.inspect.logs import export_logs
from provisioner.cluster.inspect.status import cluster_status
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.services import accounting
from provisioner.providers.ssh.cluster import ControllerUnavailable
from provisioner.providers.ssh.provider import TRAINING_BIN, SSHProvider
from provisioner.verify.suites import checks_for
from provisioner.verify.targets import target_of
from tests.contract.keys import key_paths, reference_status_keys
from tests.unit.providers.ssh.controller import Controller


def deployed(**kw) -> Cluster:
    provider = SSHProvider(Controller(**kw), "root@ctl")
    return Cluster(provider.discover(""), provider)


def test_status_over_ssh_has_the_same_keys_as_every_backend():
    """The ssh part of tests/contract: the same key paths as local and docker, recursively."""
    st = cluster_status(deployed()).to_dict()
    assert key_paths(st) == reference_status_keys()
    dead = cluster_status(deployed(slurmctld_up=False)).to_dict()
    assert key_paths(dead) == reference_status_keys() - {p for p in reference_status_keys() if p.startswith("nodes[]")}
    # The accounting-disabled record is accounting.health's own (one copy).
    disabled = accounting.health(SimpleNamespace(spec=SimpleNamespace(accounting=False)), {})
    assert st["accounting"] == disabled


def test_status_over_ssh_reads_nodes_gpus_and_fake_devices():
    st = cluster_status(deployed())
    assert st.healthy and st.backend == "ssh" and st.name == "dt1" and st.fake_gpus and st.phase == "running"
    assert st.controller.responding and st.controller.port == 6817 and st.munged.alive and st.controller.host == "ctl"
    assert st.slurm_version == "22.05.8" and st.hints == [] and st.shared_dir is None
    assert st.state_dir == "root@ctl: /var/lib/slurm/slurmctld" and st.slurm_conf == "/etc/slurm/slurm.conf"
    assert [(n.name, n.host, n.state, n.gpus, n.cpus, n.memory_mb, n.port, n.slurmd_alive) for n in st.nodes] == [
        ("node1", "node1", "idle", [0], 4, 4096, 6818, True), ("node2", "node2", "idle", [1], 4, 4096, 6818, True)]


def test_status_over_ssh_shows_each_hosts_services_as_systemd_reports_them():
    st = cluster_status(deployed(systemd=True))
    assert st.services == {"ctl": {"munge": "active", "slurmctld": "active"},
                           "node1": {"munge": "active", "slurmd": "active"},
                           "node2": {"munge": "inactive", "slurmd": "active"}}
    # The controller's host is a compute node too: its units under its one name.
    assert cluster_status(deployed(systemd=True, controller_host="node1")).services == {
        "node1": {"munge": "active", "slurmctld": "active", "slurmd": "active"},
        "node2": {"munge": "inactive", "slurmd": "active"}}
    # Hosts without systemd (containers: simcluster-daemon runs the daemons): nothing to show.
    assert cluster_status(deployed()).services == {}
    # A controller that does not answer: nodes are not asked.
    assert cluster_status(deployed(systemd=True, slurmctld_up=False)).services == {}


def test_status_over_ssh_of_a_dead_controller_is_unhealthy_not_an_error():
    st = cluster_status(deployed(slurmctld_up=False))
    assert not st.healthy and st.phase == "stopped" and not st.controller.alive and st.nodes == []
    assert st.hints == []  # no 'simcluster start' advice for a cluster simcluster did not start


def test_the_bundle_of_a_deployed_cluster_reads_configs_and_logs_on_the_controller(tmp_path):
    c = deployed(files={"/var/log/slurm/slurmctld.log": b"ctld says hi\n"})
    names = {p.relative_to(tmp_path).as_posix() for p in export_logs(c, tmp_path)}
    assert {"config/gres.conf", "logs/slurmctld.log", "state.json", "scontrol-show-node.txt",
            "versions.txt"} <= names
    assert (tmp_path / "logs" / "slurmctld.log").read_text() == "ctld says hi\n"
    assert '"slurmd:node2": true' in (tmp_path / "state.json").read_text()


def test_the_verify_target_of_a_deployed_cluster_gets_the_same_checks_as_a_local_one():
    target = target_of(deployed())
    assert target.spec.name == "dt1" and target.description == "deployed cluster 'dt1' via root@ctl"
    assert target.python_bin == TRAINING_BIN and "simcluster deploy --training" in target.install_hint
    assert target.faults is None and not target.files.on_this_host
    # The roles' TaskProlog hands jobs the physical ids gres.conf names.
    assert not target.gpus_renumbered and target.visible_gpus("node2") == "1"
    assert "/var/log/slurm/slurmctld.log" in target.log_hint("slurmctld")
    names = [c.name for c in checks_for(["basic", "ddp"], target.spec)]
    assert names[:2] == ["basic.controller", "basic.nodes"] and "ddp.train" in names


def test_verify_refuses_a_controller_that_does_not_answer_in_one_line():
    with pytest.raises(ControllerUnavailable) as exc:
        target_of(deployed(slurmctld_up=False))
    line = exc.value.one_line()
    assert "slurmctld on root@ctl does not answer" in line and "\n" not in line
