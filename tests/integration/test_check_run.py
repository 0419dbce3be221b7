"""`simcluster check --run` on real daemons: a throwaway chk- cluster shaped by the script's
header runs it with the recorder, and is gone afterwards."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, daemons_under, run_cli

pytestmark = pytest.mark.integration
SEEDS = REPO / "tests" / "data" / "check" / "seeds"


def _cgroups() -> bool:
    """Do local clusters here get device cgroups (root on a cgroup v1 host)?"""
    from provisioner.providers.local import cgroups
    return not cgroups.unavailable_reason()


def _run(script, home):
    proc = run_cli(["check", "--run", "--json", "--no-shellcheck", str(script)], home, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_run_shows_duplicate_ranks_of_rank_exported_in_batch_shell(sim_home):
    rc, data = _run(SEEDS / "ch8a-3.2-train_ddp.sh", sim_home)
    run = data["run"]
    assert rc == 1 and run["state"] == "COMPLETED" and run["cluster"].startswith("chk-")
    assert sorted(p["node"] for p in run["processes"]) == ["node1", "node2"]
    assert [p["env"]["RANK"] for p in run["processes"]] == ["0", "0"]
    dup = [c for c in run["collisions"] if c["rule"] == "run.duplicate-rank"]
    assert dup and "duplicate rank 0" in dup[0]["message"] and dup[0]["line"] == 23
    assert "node1 task 0" in dup[0]["message"] and "node2 task 1" in dup[0]["message"]
    assert any(c["rule"] == "run.missing-rank" for c in run["collisions"])
    # the throwaway cluster is gone: no state, no daemon
    assert not [p for p in sim_home.iterdir() if "chk-" in p.name]  # state and lock file
    assert daemons_under(sim_home) == []


def test_run_of_corrected_script_has_no_collision(sim_home):
    rc, data = _run(SEEDS / "fixed" / "ch8a-9.2-train_distributed.sh", sim_home)
    run = data["run"]
    assert rc == 0 and run["state"] == "COMPLETED", run
    ranks = sorted(p["env"]["RANK"] for p in run["processes"])
    assert ranks == ["0", "1"] and run["collisions"] == []
    # one fake GPU each, not shared (with device cgroups each node numbers its own from 0)
    assert len({(p["node"], p["gpu"]) for p in run["processes"]}) == 2
    assert {p["gpu"] for p in run["processes"]} == ({"0"} if _cgroups() else {"0", "1"})


# ---------------------------------------------------------------- --like / --config: a copy of the job's cluster

LIKE = REPO / "tests" / "data" / "check" / "like"
SEED_HEADER = """#!/bin/bash
#SBATCH --nodes=4
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=28
#SBATCH --account=itscspod
#SBATCH --partition=admin
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
srun --kill-on-bad-exit=1 bash -c "RANK=\\$SLURM_PROCID LOCAL_RANK=\\$SLURM_LOCALID WORLD_SIZE=\\$SLURM_NTASKS exec python train.py"
"""


def _run_like(args, script, home):
    proc = run_cli(["check", "--run", "--json", "--no-shellcheck"] + args + [str(script)], home, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_seed_header_runs_on_a_copy_of_the_cluster_it_is_written_for(sim_home, tmp_path):
    """The Enroot seed's resource options (4 nodes x 8 GPUs, 8 tasks of 28 CPUs, account
    itscspod, partition admin) are accepted and run on a copy of a conf that has them: its
    node names, typed GPUs, accounting with the account the partition allows."""
    job = tmp_path / "enroot.sbatch"
    job.write_text(SEED_HEADER)
    rc, data = _run_like(["--like", str(LIKE / "prod" / "slurm.conf")], job, sim_home)
    run = data["run"]
    assert rc == 0 and run["state"] == "COMPLETED", run
    assert data["findings"] == [] and data["cluster"]["partitions"] == ["admin", "gpu", "cpu"]
    assert sorted({p["node"] for p in run["processes"]}) == ["dgx01", "dgx02", "dgx03", "dgx04"]
    assert sorted(int(p["env"]["RANK"]) for p in run["processes"]) == list(range(32))
    assert not [p for p in sim_home.iterdir() if "chk-" in p.name] and daemons_under(sim_home) == []


def test_header_the_cluster_refuses_is_refused_by_its_copy(sim_home):
    """On a 128-node conf without the admin partition the static rules say why, and the copy
    (a subset of it) refuses the job with the same answer from sbatch."""
    rc, data = _run_like(["--like", str(LIKE / "other" / "slurm.conf")], SEEDS / "enroot-prelaunch.sh", sim_home)
    rules = [f["rule"] for f in data["findings"]]
    assert rc == 1 and {"cluster.partition", "cluster.account", "cluster.cpus-per-node", "run.not-started"} <= set(rules)
    started = next(f for f in data["findings"] if f["rule"] == "run.not-started")
    assert "Invalid partition name specified" in started["message"]
    assert data["run"]["state"].startswith("refused by sbatch") and data["run"]["processes"] == []
    assert daemons_under(sim_home) == []


def test_header_over_maxtime_stays_pending_on_the_copy_and_is_cancelled(sim_home, tmp_path):
    """EnforcePartLimits=NO (Slurm's default): sbatch accepts a --time above MaxTime and the job
    waits forever (Reason=PartitionTimeLimit); the dry run says so at once instead of waiting."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text("apiVersion: simcluster/v1\nkind: Cluster\nname: prodlike\nfakeGpus: true\n"
                    "nodes:\n  - {name: gpu001, gpus: [0, 1], gpuType: h100, cpus: 16, memory: 64G}\n"
                    "  - {name: gpu002, gpus: [2, 3], gpuType: h100, cpus: 16, memory: 64G}\n"
                    "partitions:\n  - {name: short, nodes: ALL, default: true, maxTime: '1:00:00'}\n")
    job = tmp_path / "long.sbatch"
    job.write_text("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:h100:2\n#SBATCH --time=24:00:00\n"
                   "srun python train.py\n")
    rc, data = _run_like(["--config", str(spec), "--timeout", "60"], job, sim_home)
    rules = {f["rule"]: f for f in data["findings"]}
    assert rc == 1 and "then PartitionTimeLimit" in rules["cluster.time-limit"]["message"]
    assert "PENDING forever (Reason=Partition" in rules["run.not-started"]["message"]
    assert data["run"]["seconds"] < 60  # cancelled when seen pending, not at the timeout
    assert daemons_under(sim_home) == []
