"""Issue 11 on the docker backend: stop/start keeps state, every fault and heal, container restarts.

One cluster for the module (2 nodes, --fast-failure, --accounting).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.conftest import run_cli, wait_for
from tests.docker.conftest import daemon_counts, docker_module_cluster

UP_ARGS = ["--backend", "docker", "--nodes", "2", "--fast-failure", "--accounting"]


@pytest.fixture(scope="module")
def dc(docker_engine):
    with docker_module_cluster(*UP_ARGS) as c:
        yield c


def container_status(name: str) -> str:
    return subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", name], stdout=subprocess.PIPE,
                          text=True).stdout.strip()


def test_faults_are_recorded_and_healed(dc):
    job = dc.slurm("sbatch", "--parsable", "-N2", "--wrap", "srun sleep 120").stdout.strip()
    wait_for("the job to run", lambda: dc.job(job, "JobState") == "RUNNING")
    time.sleep(1)
    assert "killed node node2" in dc.cli("fault", "kill", "node2").stdout
    ps = subprocess.run(["docker", "exec", f"simcluster-{dc.name}-node2", "ps", "-eo", "comm"],
                        stdout=subprocess.PIPE, text=True).stdout.split()
    assert "slurmd" not in ps and "slurmstepd" not in ps and "sleep" in ps  # the entrypoint's sleep only
    assert ps.count("sleep") == 1
    dc.slurm("scancel", job)
    dc.cli("fault", "pause", "node1")
    assert container_status(f"simcluster-{dc.name}-node1") == "paused"
    dc.cli("fault", "drain", "node2", "--reason", "maint")
    dc.cli("fault", "stop-accounting")
    dc.cli("fault", "kill-controller")
    assert sorted(f["what"] for f in dc.status()["faults"]) == ["drain", "kill", "kill-controller", "pause",
                                                                 "stop-accounting"]
    bad = dc.cli("fault", "kill", "node7", check=False)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1
    healed = dc.cli("fault", "heal").stdout
    for word in ("resumed node1", "slurmd:node2", "slurmctld", "slurmdbd", "undrained node2"):
        assert word in healed, healed
    assert container_status(f"simcluster-{dc.name}-node1") == "running"
    wait_for("a healthy cluster", lambda: dc.status()["healthy"])
    assert dc.status()["faults"] == []
    dc.cli("fault", "pause", "node2")
    dc.cli("fault", "resume", "node2")
    assert container_status(f"simcluster-{dc.name}-node2") == "running"


def test_stop_start_keeps_jobs_and_a_restarted_container_is_repaired(dc):
    held = dc.slurm("sbatch", "--parsable", "--hold", "-N1", "--wrap", "true").stdout.strip()
    time.sleep(2)  # slurmctld saves its state asynchronously
    dc.cli("stop")
    assert container_status(f"simcluster-{dc.name}-ctl") == "exited"
    assert dc.status()["phase"] == "stopped"
    assert "stopped" in run_cli(["list"], dc.home, check=True).stdout
    assert dc.cli("fault", "kill", "node1", check=False).returncode == 2
    started = dc.cli("start").stdout
    assert "started" in started and "3 machines" in started
    # A container started again does not boot again: `start` started each daemon once.
    assert daemon_counts(f"simcluster-{dc.name}-ctl") == {"munged": 1, "slurmctld": 1}
    assert daemon_counts(f"simcluster-{dc.name}-node2") == {"munged": 1, "slurmd": 1}
    assert dc.job(held, "JobState") == "PENDING"
    again = dc.cli("start", check=False)
    assert again.returncode == 2 and "already running" in again.stderr
    # A container restarted behind simcluster's back (a reboot): every recorded pid is stale.
    subprocess.run(["docker", "restart", "-t", "1", f"simcluster-{dc.name}-ctl"], check=True,
                   stdout=subprocess.DEVNULL)
    assert dc.status()["controller"]["alive"] is False
    repaired = run_cli(["up", "--name", dc.name, *UP_ARGS], dc.home, check=True, timeout=300).stdout
    assert "repaired" in repaired and "slurmctld" in repaired and "slurmd:" not in repaired
    assert daemon_counts(f"simcluster-{dc.name}-ctl") == {"munged": 1, "slurmctld": 1}
    assert dc.job(held, "JobState") == "PENDING"
    dc.slurm("scontrol", "release", held)
    wait_for("the held job", lambda: dc.job(held, "JobState") == "COMPLETED")
    acct = dc.slurm("sacct", "-X", "-n", "-o", "jobid", "-j", held).stdout
    assert held in acct


def test_verify_suite_faults_on_a_docker_cluster(dc):
    """controller-restart and accounting-outage PASS; requeue-resume needs torch in the image
    (the default image has none: then SKIP with the install hint, never a FAIL)."""
    proc = dc.cli("verify", "--suite", "faults", "--json", check=False, timeout=900)
    faults = {c["name"]: c for c in json.loads(proc.stdout)["checks"] if c["suite"] == "faults"}
    assert set(faults) == {"faults.requeue-resume", "faults.controller-restart", "faults.accounting-outage",
                           "faults.gpu-faults"}
    # This cluster has no fake GPUs: the GPU fault check says so (tests/integration/test_gpu_faults.py runs it).
    gpu = faults.pop("faults.gpu-faults")
    assert gpu["status"] == "SKIP" and "no fake GPUs" in gpu["message"], gpu
    ddp = faults.pop("faults.requeue-resume")
    assert ddp["status"] == "PASS" or (ddp["status"] == "SKIP" and "torch is not installed" in ddp["message"]), ddp
    bad = {n: (c["status"], c["message"], c["tail"][-800:]) for n, c in faults.items() if c["status"] != "PASS"}
    assert not bad and proc.returncode == 0, bad
    assert dc.status()["faults"] == []
