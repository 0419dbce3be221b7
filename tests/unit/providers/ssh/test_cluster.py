"""The controller's view of a deployed cluster: its spec, rebuilt for verify --ssh (providers/ssh/cluster.py)."""

from __future__ import annotations

import pytest

from provisioner.cluster.model.slurm import SlurmClient
from provisioner.providers.ssh.cluster import ControllerUnavailable, read_cluster
from tests.unit.providers.ssh.controller import Controller


def test_verify_spec_is_rebuilt_from_the_controller():
    cluster = read_cluster(SlurmClient(Controller()), "root@ctl")
    spec = cluster.spec(fake_gpus=True)
    assert spec.backend == "ssh" and spec.name == "dt1" and not spec.accounting and spec.fake_gpus
    assert [(n.name, n.gpus, n.cpus, n.memory) for n in spec.nodes] == [("node1", (0,), 4, 4096),
                                                                         ("node2", (1,), 4, 4096)]
    assert [(p.name, p.nodes, p.default) for p in spec.partitions] == [("gpu", ("node1", "node2"), True)]
    assert cluster.task_prolog and not cluster.device_files_fake()


def test_a_controller_that_does_not_answer_is_one_line():
    with pytest.raises(ControllerUnavailable) as exc:
        read_cluster(SlurmClient(Controller(slurmctld_up=False)), "root@ctl")
    assert "slurmctld on root@ctl does not answer" in exc.value.one_line() and "\n" not in exc.value.one_line()
