"""configs/examples/gpu-cluster.yaml on real daemons: the headers its production original
accepts run (typed GPUs, features, accounts, QoS), the ones it refuses are refused with
Slurm's own reasons, and its QoS preemption really happens (a high job requeues a low one)."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import REPO, module_cluster, wait_for

pytestmark = pytest.mark.integration

EXAMPLE = str(REPO / "configs/examples/gpu-cluster.yaml")

ACCEPTED = [  # sbatch options -> what the job must see
    (["-p", "gpu", "--gres=gpu:h100:2", "-C", "ib", "-A", "ml", "-q", "high"], "gres/gpu=2"),
    (["-p", "gpu", "--gpus=h100:1", "-A", "research"], "gres/gpu=1"),
    (["-p", "cpu", "-C", "icelake", "--mem=200G", "-c", "8"], "mem=200G"),
    (["-p", "debug", "-t", "10"], "node=1"),
]
REFUSED = [  # sbatch options -> the reason Slurm gives on the production cluster too
    (["-p", "gpu", "--gres=gpu:a100:1"], "Requested node configuration is not available"),
    (["-p", "debug", "-t", "1:00:00"], "Requested time limit is invalid"),
    (["-p", "gpu", "-A", "research", "-q", "high"], "Invalid qos specification"),
    (["-p", "gpu", "-A", "nope"], "Invalid account"),
    (["-p", "gpu", "-C", "nvme"], "Invalid feature specification"),
    (["-p", "debug", "-N", "3"], "Node count specification invalid"),
]


@pytest.fixture(scope="module")
def prod():
    """One cluster from the example for the whole module (accounting takes ~7 s to come up)."""
    with module_cluster(f"p{uuid.uuid4().hex[:5]}", "-c", EXAMPLE) as c:
        yield c


def test_partitions_nodes_and_qos_are_the_specs(prod):
    sinfo = prod.run(["sinfo", "--noheader", "--format=%R %l %G %f"]).stdout
    assert "gpu 2-00:00:00 gpu:h100:8 ib,h100,sm90" in sinfo, sinfo
    assert "debug 30:00" in sinfo and "cpu 7-00:00:00" in sinfo, sinfo
    qos = prod.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name,preempt,preemptmode,maxtrespu"]).stdout
    assert "high|low|cluster|gres/gpu=16" in qos, qos
    assert "low||requeue|" in qos, qos


@pytest.mark.parametrize("opts,expect", ACCEPTED, ids=[" ".join(o) for o, _ in ACCEPTED])
def test_production_headers_are_accepted_and_run(prod, opts, expect, tmp_path):
    out = tmp_path / "out.txt"
    proc = prod.run(["sbatch", "--wait", "-o", str(out), *opts, "--wrap",
                     "scontrol show job $SLURM_JOB_ID | grep -E 'TRES=|Account'"], check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert expect in out.read_text(), out.read_text()


@pytest.mark.parametrize("opts,reason", REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_headers_production_refuses_are_refused(prod, opts, reason):
    proc = prod.run(["sbatch", *opts, "--wrap", "true"], check=False)
    assert proc.returncode != 0 and reason in proc.stderr, (proc.returncode, proc.stdout, proc.stderr)


def test_a_high_qos_job_preempts_a_low_one_which_is_requeued(prod, tmp_path):
    # The low job holds every GPU of the gpu partition; on SIGTERM (the preemption signal,
    # with the QoS's 30 s grace) it records it and ends, as a checkpointing job would.
    marker = tmp_path / "preempted"
    low = prod.run(["sbatch", "--parsable", "-p", "gpu", "-N", "2", "--gres=gpu:h100:8", "-q", "low", "--requeue",
                    "-o", str(tmp_path / "low.out"), "--wrap",
                    f"trap 'echo $SLURM_RESTART_COUNT > {marker}; exit 0' TERM; sleep 600 & wait"]).stdout.strip()
    wait_for("the low job to run", lambda: _state(prod, low) == "RUNNING", timeout=60)
    high = prod.run(["sbatch", "--parsable", "-p", "gpu", "-N", "2", "--gres=gpu:h100:8", "-A", "ml", "-q", "high",
                     "--wrap", "sleep 2"]).stdout.strip()
    wait_for("the low job to be requeued", lambda: "Restarts=1" in _show(prod, low), timeout=90)
    assert marker.exists() and marker.read_text().strip() in ("", "0"), "the low job got no SIGTERM"
    # Requeued, not cancelled: it waits to run again, after the high job.
    assert _state(prod, low) in ("PENDING", "REQUEUED", "COMPLETING"), _show(prod, low)
    assert _state(prod, high) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED"), _show(prod, high)
    prod.run(["scancel", low, high], check=False)


def _show(c, job: str) -> str:
    return c.run(["scontrol", "show", "job", job], check=False).stdout


def _state(c, job: str) -> str:
    return c.run(["squeue", "--noheader", "--states=all", "-j", job, "-o", "%T"], check=False).stdout.strip()
