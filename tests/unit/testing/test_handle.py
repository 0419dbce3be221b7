"""What the `slurm_cluster` fixture hands out (provisioner/testing/handle.py): paths as the
jobs and as this host see them, the environment, and how sbatch writes and submits a
script, against a fake Cluster and client (no daemon)."""

from __future__ import annotations

import os

import pytest

from provisioner.testing.handle import SlurmCluster
from tests.unit.testing.conftest import FakeClient, fake_cluster


@pytest.fixture
def docker_like(tmp_path):
    """A cluster that sees this host's job root under another path (docker's shared mount)."""
    client = FakeClient(jobs={"42": [{"JobState": "PENDING"}]})
    return SlurmCluster(fake_cluster(tmp_path / "shared", "/shared", client))


@pytest.fixture
def local_like(tmp_path):
    """A cluster whose jobs see this host's paths as they are (local)."""
    client = FakeClient(jobs={"42": [{"JobState": "PENDING"}]})
    return SlurmCluster(fake_cluster(tmp_path / "state", str(tmp_path / "state"), client))


def test_host_path_maps_the_job_root(docker_like, tmp_path):
    assert docker_like.host_path("/shared/pytest/job-1/out") == tmp_path / "shared" / "pytest" / "job-1" / "out"
    assert docker_like.host_path("/shared") == tmp_path / "shared"
    assert docker_like.host_path("/sharedother/x") is None  # not under the root: only the nodes see it
    assert docker_like.host_path("/home/u/out") is None


def test_host_path_on_a_cluster_that_sees_this_hosts_paths(local_like):
    assert str(local_like.host_path("/home/u/out")) == "/home/u/out"


def test_cluster_path_of_host_files(docker_like, local_like, tmp_path):
    (tmp_path / "shared").mkdir()
    assert docker_like._cluster_path(tmp_path / "shared" / "a.sh") == "/shared/a.sh"
    assert docker_like._cluster_path(tmp_path / "elsewhere.sh") is None  # docker cannot see it
    assert local_like._cluster_path(tmp_path / "elsewhere.sh") == str(tmp_path / "elsewhere.sh")


def test_env_points_at_the_cluster_without_the_outer_jobs_variables(docker_like, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SBATCH_PARTITION", "outer")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    monkeypatch.setenv("KEEP_ME", "1")
    env = docker_like.env
    assert "SLURM_JOB_ID" not in env and "SBATCH_PARTITION" not in env
    assert env["SLURM_CONF"] == "/shared/etc/slurm.conf" and env["KEEP_ME"] == "1"


def test_sbatch_text_is_written_with_a_shebang_and_default_output(docker_like, tmp_path):
    job = docker_like.sbatch("echo hi\n", "--nodes=2", wait=False, env={"A": "1"})
    assert job.id == 42 and job.state == "PENDING"
    call = next(c for c in docker_like.client.calls if c[0] == "sbatch")
    _, script, args, env = call
    job_dir = job.dir
    assert job_dir.parent == tmp_path / "shared" / "pytest"
    assert script == f"/shared/pytest/{job_dir.name}/job.sh"
    assert (job_dir / "job.sh").read_text() == "#!/bin/bash\necho hi\n"
    assert os.access(job_dir / "job.sh", os.X_OK)
    assert args == [f"--output=/shared/pytest/{job_dir.name}/slurm-%j.out", "--nodes=2"] and env == {"A": "1"}


def test_sbatch_keeps_the_scripts_own_output(docker_like):
    docker_like.sbatch("#!/bin/sh\n#SBATCH --output=mine.out\ntrue\n", wait=False)
    _, _, args, _ = next(c for c in docker_like.client.calls if c[0] == "sbatch")
    assert args == []


def test_sbatch_a_file_the_cluster_sees_is_submitted_in_place(local_like, tmp_path):
    script = tmp_path / "state" / "train.sh"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/bash\ntrue\n")
    job = local_like.sbatch(script, wait=False)
    _, submitted, _, _ = next(c for c in local_like.client.calls if c[0] == "sbatch")
    assert submitted == str(script) and job.script_name == "train.sh"


def test_sbatch_a_file_the_cluster_cannot_see_is_copied(docker_like, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    job = docker_like.sbatch(str(script), wait=False)
    _, submitted, _, _ = next(c for c in docker_like.client.calls if c[0] == "sbatch")
    assert submitted == f"/shared/pytest/{job.dir.name}/train.sh"
    assert (job.dir / "train.sh").read_text() == "#!/bin/bash\ntrue\n"
