"""A client project's Slurm tests, written against simcluster's pytest plugin.

`slurm_cluster` is a real 2-node cluster (pyproject.toml sets the session's default),
made once and shared by the tests that do not ask for another one.
"""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def test_sbatch_script_runs_on_both_nodes(slurm_cluster):
    job = slurm_cluster.sbatch(HERE / "hello.sbatch")
    assert job.state == "COMPLETED", job.output
    assert job.exit_code == 0
    lines = sorted(job.output.splitlines())
    # Each node got one GPU of its own (fake:2 = GPUs 0 and 1), and its task sees just that one.
    assert lines == ["hello from node1 with 1 gpu", "hello from node2 with 1 gpu"]


def square(x):
    return x * x


def test_submitit_client(slurm_cluster, tmp_path, monkeypatch):
    submitit = pytest.importorskip("submitit")
    if slurm_cluster.backend != "local":
        pytest.skip("submitit runs sbatch/sacct on this host: local backend only")
    for key, value in slurm_cluster.env.items():  # SLURM_CONF: submitit's sbatch finds the cluster
        monkeypatch.setenv(key, value)
    executor = submitit.SlurmExecutor(folder=tmp_path / "submitit", python=sys.executable)
    executor.update_parameters(time=5, nodes=1, ntasks_per_node=1)
    jobs = executor.map_array(square, [1, 2, 3])
    assert [j.result() for j in jobs] == [1, 4, 9]


@pytest.mark.slurm(fast_failure=True)  # a dead node is DOWN in ~12 s instead of ~80 s
def test_killed_node_job_is_requeued(slurm_cluster, slurm_faults):
    # The first run waits to be killed; the requeued run (SLURM_RESTART_COUNT=1) finishes.
    script = ("#SBATCH --requeue\n"
              'echo "run ${SLURM_RESTART_COUNT:-0} on $SLURMD_NODENAME"\n'
              '[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] || sleep 300\n')
    job = slurm_cluster.sbatch(script, wait=False)
    job.wait(until=["RUNNING"], timeout=60)
    victim = job.batch_host
    slurm_faults.kill(victim)  # slurmd and the job's processes die, like a crashed host
    job.wait(timeout=240)
    assert (job.state, job.restarts) == ("COMPLETED", 1), job.output
    survivor = [n for n in slurm_cluster.nodes if n != victim][0]
    assert job.output.strip() == f"run 1 on {survivor}"
