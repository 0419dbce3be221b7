"""verify --ssh's target, built from a scripted controller (providers/ssh/target.py)."""

from __future__ import annotations

from provisioner.providers.ssh.target import TRAINING_BIN, verify_target
from provisioner.verify.suites import checks_for
from tests.unit.providers.ssh.controller import Controller


def test_the_target_of_a_deployed_cluster_gets_the_same_checks_as_a_local_one():
    target = verify_target(Controller(), "root@ctl")
    assert target.spec.name == "dt1" and target.description == "deployed cluster 'dt1' via root@ctl"
    assert target.python_bin == TRAINING_BIN and "simcluster deploy --training" in target.install_hint
    # The roles' TaskProlog hands jobs the physical ids gres.conf names.
    assert not target.gpus_renumbered and target.visible_gpus("node2") == "1"
    assert "/var/log/slurm" in target.log_hint("slurmctld")
    names = [c.name for c in checks_for(["basic", "ddp"], target.spec)]
    assert names[:2] == ["basic.controller", "basic.nodes"] and "ddp.train" in names
