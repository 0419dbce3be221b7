"""The job-file transport for hosts without a shared filesystem (providers/ssh/files.py)."""

from __future__ import annotations

from pathlib import Path

from provisioner.cluster.model.slurm import SlurmClient
from provisioner.providers.ssh.cluster import read_cluster
from provisioner.providers.ssh.files import SSHJobFiles
from tests.unit.providers.ssh.controller import Controller


def test_job_files_go_to_every_node_and_are_read_from_whichever_has_them():
    ctl = Controller(node_files={"/tmp/r/out-7.txt": "hello from node2\n"})
    client = SlurmClient(ctl)
    spec = read_cluster(client, "ctl").spec(fake_gpus=True)
    files = SSHJobFiles(client, spec, root=Path("/tmp/r"))
    files.make_dir(Path("/tmp/r/check"))
    srun = [c for c in ctl.calls if c[0] == "srun"]
    assert srun and "--nodelist=node1,node2" in srun[-1] and srun[-1][-1] == "/tmp/r/check"
    files.write_text(Path("/tmp/r/check/job.sh"), "#!/bin/sh\n", 0o755)
    assert files.read_text(Path("/tmp/r/check/job.sh")) == "#!/bin/sh\n"  # on the controller
    assert files.read_text(Path("/tmp/r/out-7.txt")) == "hello from node2\n"  # on a node
    assert files.read_text(Path("/tmp/r/missing.txt")) is None
    assert files.cluster_path(Path("/tmp/r/check")) == "/tmp/r/check"
