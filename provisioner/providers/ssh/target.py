"""`simcluster verify --ssh`: the VerifyTarget of a deployed cluster, built from its controller.

Verify's checks are the same as on local and docker clusters; only the target differs:
Slurm commands run on the controller over SSH, job files go through SSHJobFiles (no
shared filesystem), and the jobs' python is the training venv the Ansible roles make on
the compute hosts with `simcluster deploy --training`.
"""

from __future__ import annotations

from typing import Optional

from provisioner.cluster.runner import DEFAULT_TIMEOUT, Result, Runner
from provisioner.cluster.slurm import SlurmClient
from provisioner.providers.ssh.cluster import node_groups, probe_gpus_fake, read_cluster, srun_on_nodes
from provisioner.providers.ssh.files import SSHJobFiles
from provisioner.providers.ssh.runner import SSHRunner
from provisioner.providers.ssh.session import SSHSession
from provisioner.verify.targets import VerifyTarget

# ansible/roles/training/defaults/main.yml: training_venv.
TRAINING_BIN = "/opt/simcluster/venv/bin"
# squeue over SSH costs a round trip: ask less often than on this host.
POLL_S = 0.5


class ComputeNodeRunner(Runner):
    """A compute node, reached as a one-task srun from the controller: verify asks it whether
    the jobs' python has torch (the controller itself may have no training venv)."""

    def __init__(self, client: SlurmClient, part: Optional[str], node: str):
        self.client, self.part, self.node = client, part, node
        self.where = node

    def run(self, argv, env=None, stdin=None, timeout=DEFAULT_TIMEOUT, cwd=None) -> Result:
        return srun_on_nodes(self.client, self.part, [self.node], list(argv), stdin=stdin, timeout=timeout)


def ssh_verify_target(session: SSHSession) -> VerifyTarget:
    """The verify target of the cluster whose controller ``session`` is connected to."""
    return verify_target(SSHRunner(session), str(session.target))


def verify_target(runner: Runner, where: str) -> VerifyTarget:
    """The verify target of a deployed cluster whose controller ``runner`` reaches."""
    client = SlurmClient(runner, poll_s=POLL_S)
    cluster = read_cluster(client, where)
    spec = cluster.spec(fake_gpus=False)
    spec = cluster.spec(fake_gpus=bool(probe_gpus_fake(cluster, spec)))
    groups = node_groups(spec)
    probe = ComputeNodeRunner(client, groups[0][0], groups[0][1][0]) if groups else runner
    return VerifyTarget(
        name=spec.name, description=f"deployed cluster '{spec.name}' via {where}", spec=spec, client=client,
        files=SSHJobFiles(client, spec), python_bin=TRAINING_BIN,
        # Each host owns its GPUs, but the roles' TaskProlog (installed where there are no
        # device cgroups) still hands jobs the physical ids gres.conf names; without it,
        # Slurm numbers a node's GPUs from 0.
        gpus_renumbered=not cluster.task_prolog,
        install_hint=f"the jobs' python ({TRAINING_BIN}) lacks it: deploy with 'simcluster deploy --training'",
        logs_hint="daemon logs are on the hosts: /var/log/slurm/slurmctld.log, /var/log/slurm/slurmd-<node>.log",
        probe_runner=probe)
