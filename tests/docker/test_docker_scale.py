"""`simcluster scale` on the docker backend: a node container joins a running 2-node cluster
while a job runs (the job completes), a 3-node job runs across it with its name resolved in
every node, its fake GPU is seen, `status` lists it, it survives stop/start like any node;
removal refuses its running job, then removes the idle node and its container; `down`
leaves no container. One cluster for the module."""

from __future__ import annotations

import json

import pytest

from tests.conftest import wait_for
from tests.docker.conftest import docker_ids, docker_module_cluster

pytestmark = pytest.mark.integration

UP_ARGS = ["--backend", "docker", "--nodes", "2", "--fake-gpus", "2"]


@pytest.fixture(scope="module")
def dc(docker_engine):
    with docker_module_cluster(*UP_ARGS) as c:
        yield c


def test_a_node_joins_while_a_job_runs(dc):
    out = dc.home / dc.name / "shared" / "job.out"
    job = dc.slurm("sbatch", "--parsable", "-N2", "-o", "/shared/job.out", "--wrap",
                   "srun -N2 bash -c 'sleep 4; echo done $SLURMD_NODENAME'").stdout.strip()
    wait_for("the job to run",
             lambda: dc.slurm("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip() == "RUNNING")
    before = dc.containers()
    proc = dc.cli("scale", "--add", "1", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "node3 joined" in proc.stdout and "3 nodes now" in proc.stdout, proc.stdout
    assert dc.sinfo()["node3"] == "idle", dc.sinfo()
    assert len(dc.containers()) == len(before) + 1
    # The job that ran while slurmctld restarted completes on its nodes.
    wait_for("the job to end", lambda: not dc.slurm("squeue", "-h", "-j", job, check=False).stdout.strip())
    assert sorted(out.read_text().split()) == ["done", "done", "node1", "node2"]
    # A job across all three: node3 resolves in the old nodes (Docker's DNS) and has its fake GPU.
    res = dc.slurm("srun", "-N3", "-l", "bash", "-c",
                   "echo $(hostname) $(getent hosts node1 node3 | wc -l) $(nvidia-smi -L | wc -l)")
    lines = sorted(line.split(": ", 1)[1] for line in res.stdout.strip().splitlines())
    assert lines == ["node1 2 1", "node2 2 1", "node3 2 1"], res.stdout


def test_the_joined_node_is_a_node_like_the_others(dc):
    status = json.loads(dc.cli("status", "--json", check=True).stdout)
    assert "node3" in json.dumps(status)
    dc.cli("stop", check=True)
    dc.cli("start", check=True)
    wait_for("3 idle nodes", lambda: dc.sinfo() == {"node1": "idle", "node2": "idle", "node3": "idle"})
    assert dc.slurm("srun", "-N3", "-w", "node3", "true").returncode == 0


def test_remove_refuses_a_running_job_then_removes_the_idle_node(dc):
    job = dc.slurm("sbatch", "--parsable", "-w", "node3", "-o", "/dev/null", "--wrap", "sleep 300").stdout.strip()
    wait_for("the job to run",
             lambda: dc.slurm("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip() == "RUNNING")
    proc = dc.cli("scale", "--remove", "node3", check=False)
    assert proc.returncode == 2 and job in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "node3" in dc.sinfo()
    dc.slurm("scancel", job)
    wait_for("the job to end", lambda: not dc.slurm("squeue", "-h", "-j", job, check=False).stdout.strip())
    before = dc.containers()
    proc = dc.cli("scale", "--remove", "node3", check=False)
    assert proc.returncode == 0 and "node3 left" in proc.stdout, proc.stderr
    assert set(dc.sinfo()) == {"node1", "node2"}
    assert len(dc.containers()) == len(before) - 1
    assert docker_ids(f"name=^simcluster-{dc.name}-node3$") == []
    state = json.loads((dc.home / dc.name / "state.json").read_text())
    assert set(state["provider_data"]["containers"]) == {"controller", "node1", "node2"}
    assert dc.slurm("srun", "-N2", "true").returncode == 0
