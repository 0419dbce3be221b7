"""`status --ssh` from what a deployed cluster's controller answers (providers/ssh/status.py)."""

from __future__ import annotations

from types import SimpleNamespace

from provisioner.cluster import accounting
from provisioner.cluster.slurm import SlurmClient
from provisioner.providers.ssh.status import ssh_cluster_status
from tests.contract.keys import key_paths, reference_status_keys
from tests.unit.providers.ssh.controller import Controller


def test_status_over_ssh_has_the_same_keys_as_every_backend():
    """The ssh part of tests/contract: the same key paths as local and docker, recursively."""
    st = ssh_cluster_status(SlurmClient(Controller()), "root@ctl").to_dict()
    assert key_paths(st) == reference_status_keys()
    dead = ssh_cluster_status(SlurmClient(Controller(slurmctld_up=False)), "root@ctl").to_dict()
    assert key_paths(dead) == reference_status_keys() - {p for p in reference_status_keys() if p.startswith("nodes[]")}
    disabled = accounting.health(SimpleNamespace(spec=SimpleNamespace(accounting=False)), {})
    assert st["accounting"] == disabled


def test_status_over_ssh_reads_nodes_gpus_and_fake_devices():
    st = ssh_cluster_status(SlurmClient(Controller()), "root@ctl")
    assert st.healthy and st.backend == "ssh" and st.name == "dt1" and st.fake_gpus
    assert st.controller.responding and st.controller.port == 6817 and st.munged.alive
    assert [(n.name, n.state, n.gpus, n.cpus, n.memory_mb, n.port, n.slurmd_alive) for n in st.nodes] == [
        ("node1", "idle", [0], 4, 4096, 6818, True), ("node2", "idle", [1], 4, 4096, 6818, True)]


def test_status_over_ssh_of_a_dead_controller_is_unhealthy_not_an_error():
    st = ssh_cluster_status(SlurmClient(Controller(slurmctld_up=False)), "root@ctl")
    assert not st.healthy and st.phase == "stopped" and not st.controller.alive and st.nodes == []
