"""Issue 11 on the local backend with real daemons: repair in place, stop/start, every fault.

One cluster for the module (3 nodes, --fast-failure, --accounting); each test leaves it
healthy for the next.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.conftest import wait_for, Cluster, daemons_under, module_cluster, run_cli

pytestmark = pytest.mark.integration
UP_ARGS = ["--nodes", "3", "--fast-failure", "--accounting"]


@pytest.fixture(scope="module")
def fc():
    with module_cluster("flt", *UP_ARGS) as c:
        yield c


def state(c: Cluster) -> dict:
    return json.loads((c.root / "state.json").read_text())


def status(c: Cluster) -> dict:
    return json.loads(run_cli(["status", "--name", c.name, "--json"], c.home).stdout)


def job_field(c: Cluster, job: str, key: str) -> str:
    out = c.run(["scontrol", "show", "job", "-o", job], check=False).stdout
    return next((f.split("=", 1)[1] for f in out.split() if f.startswith(key + "=")), "")


def sacct_ids(c: Cluster) -> set:
    out = c.run(["sacct", "-X", "-n", "-P", "-o", "jobid", "-S", "2000-01-01"], check=False).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def test_up_repairs_a_killed_slurmd_keeping_the_requeued_job_and_accounting(fc, tmp_path):
    before = state(fc)
    script = tmp_path / "rq.sh"
    script.write_text("#!/bin/bash\n[ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ] && exit 0\nsrun sleep 300\n")
    job = fc.run(["sbatch", "--parsable", "--requeue", "-N3", "-o", str(tmp_path / "o-%j"), str(script)]
                 ).stdout.strip()
    wait_for("the job to run", lambda: job_field(fc, job, "JobState") == "RUNNING")
    time.sleep(1)
    os.kill(before["pids"]["slurmd:node2"], signal.SIGKILL)  # the kill -9
    wait_for("the requeue", lambda: job_field(fc, job, "Restarts") == "1", timeout=60)
    assert job in sacct_ids(fc)
    st = status(fc)
    assert not st["healthy"] and not next(n for n in st["nodes"] if n["name"] == "node2")["slurmd_alive"]

    again = run_cli(["up", "--name", fc.name, *UP_ARGS], fc.home, check=True)
    assert "repaired" in again.stdout and "slurmd:node2" in again.stdout, again.stdout
    after = state(fc)
    assert (after["controller_port"], after["node_ports"], after["slurmdbd_port"]) == \
        (before["controller_port"], before["node_ports"], before["slurmdbd_port"])
    assert after["pids"]["slurmctld"] == before["pids"]["slurmctld"]  # only the dead one restarted
    assert job_field(fc, job, "JobId") == job  # the same job id is still known
    wait_for("the requeued job to finish", lambda: job_field(fc, job, "JobState") == "COMPLETED", timeout=90)
    assert job in sacct_ids(fc)
    assert status(fc)["healthy"]
    nothing = run_cli(["up", "--name", fc.name, *UP_ARGS], fc.home, check=True)
    assert "nothing to do" in nothing.stdout


def test_a_slurmd_alive_but_not_answering_is_flagged_and_up_restarts_it(fc):
    """A hung slurmd (stopped outside `simcluster fault`, so nothing records it): its pid is
    alive, slurmctld marks the node not responding; status says so with the cure, and the
    repairing `up` kills and restarts it with its port and the cluster's state kept."""
    before = state(fc)
    hung_pid = before["pids"]["slurmd:node2"]
    os.kill(hung_pid, signal.SIGSTOP)
    try:
        # sinfo's "*" suffix (idle*, down*): slurmctld's pings go unanswered.
        wait_for("slurmctld to see node2 not responding",
                 lambda: "*" in fc.run(["sinfo", "-h", "-n", "node2", "-o", "%t"], check=False).stdout,
                 timeout=60)
        st = status(fc)
        node2 = next(n for n in st["nodes"] if n["name"] == "node2")
        assert not st["healthy"] and node2["slurmd_alive"]
        assert node2["problem"] == "slurmd alive but not answering slurmctld", node2
        assert any("does not answer" in h and "simcluster up --name" in h for h in st["hints"]), st["hints"]
        again = run_cli(["up", "--name", fc.name, *UP_ARGS], fc.home, check=True)
        assert "repaired" in again.stdout and "slurmd:node2 (not answering)" in again.stdout, again.stdout
        assert "do not answer" in again.stderr, again.stderr  # the progress line
    finally:
        try:
            os.kill(hung_pid, signal.SIGCONT)  # only matters if the test failed before the restart
        except ProcessLookupError:
            pass
    after = state(fc)
    assert after["pids"]["slurmd:node2"] != hung_pid
    assert after["node_ports"] == before["node_ports"] and after["pids"]["slurmctld"] == before["pids"]["slurmctld"]
    wait_for("the cluster to be healthy again", lambda: status(fc)["healthy"], timeout=60)


def test_changed_spec_is_a_conflict_and_nothing_changes(fc):
    pids = state(fc)["pids"]
    other = run_cli(["up", "--name", fc.name, "--nodes", "2"], fc.home)
    assert other.returncode == 2 and "different spec" in other.stderr and len(other.stderr.splitlines()) == 1
    assert state(fc)["pids"] == pids


def test_each_fault_is_recorded_and_healed(fc):
    node1 = state(fc)["pids"]["slurmd:node1"]
    for args, what in ((["pause", "node1"], "pause"), (["drain", "node3", "--reason", "maint"], "drain"),
                       (["stop-accounting"], "stop-accounting"), (["kill-controller"], "kill-controller")):
        run_cli(["fault", *args, "--name", fc.name], fc.home, check=True)
        assert what in [f["what"] for f in status(fc)["faults"]]
    assert open(f"/proc/{node1}/stat").read().split(") ")[1][0] == "T"  # SIGSTOPped
    table = run_cli(["status", "--name", fc.name], fc.home)
    assert table.returncode == 1 and "fault: pause node1" in table.stdout and "paused" in table.stdout
    for bad in (["kill", "node9"], ["resume", "node2"]):
        res = run_cli(["fault", *bad, "--name", fc.name], fc.home)
        assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, res.stderr
    healed = run_cli(["fault", "heal", "--name", fc.name], fc.home, check=True)
    for word in ("resumed node1", "slurmctld", "slurmdbd", "undrained node3"):
        assert word in healed.stdout, healed.stdout
    assert status(fc)["faults"] == [] and status(fc)["healthy"]
    assert "nothing to heal" in run_cli(["fault", "heal", "--name", fc.name], fc.home, check=True).stdout


def test_kill_node_kills_its_job_steps_and_heal_restarts_it(fc, tmp_path):
    job = fc.run(["sbatch", "--parsable", "-N3", "-o", str(tmp_path / "k-%j"), "--wrap", "srun sleep 120"]
                 ).stdout.strip()
    wait_for("the job to run", lambda: job_field(fc, job, "JobState") == "RUNNING")
    time.sleep(1)
    out = run_cli(["fault", "kill", "node2", "--name", fc.name], fc.home, check=True).stdout
    assert "killed node node2" in out
    steps = [line for line in daemons_under(fc.root) if "node2" in line]
    assert steps == []
    assert next(n for n in status(fc)["nodes"] if n["name"] == "node2")["slurmd_alive"] is False
    fc.run(["scancel", job])
    healed = run_cli(["fault", "heal", "--name", fc.name], fc.home, check=True).stdout
    assert "slurmd:node2" in healed
    wait_for("a healthy cluster", lambda: status(fc)["healthy"], timeout=60)


def test_stop_keeps_jobs_and_start_brings_them_back(fc, tmp_path):
    held = fc.run(["sbatch", "--parsable", "--hold", "-N1", "-o", "/dev/null", "--wrap", "true"]).stdout.strip()
    time.sleep(2)  # slurmctld saves its state asynchronously
    assert "stopped" in run_cli(["stop", "--name", fc.name], fc.home, check=True).stdout
    assert daemons_under(fc.root) == []
    listing = run_cli(["list"], fc.home, check=True).stdout
    assert f"{fc.name}" in listing and "stopped" in listing
    assert status(fc)["phase"] == "stopped"
    for args in (["fault", "kill", "node1"], ["stop"]):
        res = run_cli([*args, "--name", fc.name], fc.home)
        assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, res.stderr
    assert run_cli(["stop", "--name", "nosuch"], fc.home).returncode == 2
    started = run_cli(["start", "--name", fc.name], fc.home, check=True)
    assert "started" in started.stdout and "slurmctld" in started.stdout
    assert job_field(fc, held, "JobState") == "PENDING"
    fc.run(["scontrol", "release", held])
    wait_for("the held job to finish", lambda: job_field(fc, held, "JobState") == "COMPLETED")
    again = run_cli(["start", "--name", fc.name], fc.home)
    assert again.returncode == 2 and "already running" in again.stderr


def test_a_stale_pid_of_another_process_is_neither_alive_nor_killed(fc):
    run_cli(["stop", "--name", fc.name], fc.home, check=True)
    stranger = subprocess.Popen(["sleep", "300"])  # a pid that is not the cluster's
    try:
        path = fc.root / "state.json"
        st = json.loads(path.read_text())
        st["pids"]["slurmctld"] = stranger.pid  # as after a reboot
        path.write_text(json.dumps(st))
        assert status(fc)["controller"]["alive"] is False
        run_cli(["start", "--name", fc.name], fc.home, check=True)
        assert stranger.poll() is None
        assert state(fc)["pids"]["slurmctld"] != stranger.pid and status(fc)["healthy"]
    finally:
        stranger.kill()
        stranger.wait()


def test_verify_suite_faults_passes_on_a_fast_failure_cluster(fc):
    """The DDP job resumes after its node dies with the uninterrupted run's parameters; jobs
    survive a slurmctld restart and an accounting outage (this cluster has --accounting)."""
    proc = run_cli(["verify", "--name", fc.name, "--suite", "faults", "--json"], fc.home, timeout=900)
    faults = {c["name"]: c for c in json.loads(proc.stdout)["checks"] if c["suite"] == "faults"}
    assert set(faults) == {"faults.requeue-resume", "faults.controller-restart", "faults.accounting-outage",
                           "faults.gpu-faults"}
    # This cluster has no fake GPUs: the GPU fault check says so (tests/integration/test_gpu_faults.py runs it).
    gpu = faults.pop("faults.gpu-faults")
    assert gpu["status"] == "SKIP" and "no fake GPUs" in gpu["message"], gpu
    bad = {n: (c["status"], c["message"], c["tail"][-800:]) for n, c in faults.items() if c["status"] != "PASS"}
    assert not bad and proc.returncode == 0, bad
    result = faults["faults.requeue-resume"]["data"]
    assert result["result"]["restart_count"] >= 1 and result["result"]["resumed_from"]
    assert result["result"]["param_checksum"] == result["reference"]["param_checksum"]
    assert status(fc)["healthy"] and status(fc)["faults"] == []
