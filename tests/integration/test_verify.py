"""`simcluster verify` and `simcluster test` on real clusters (real daemons, real jobs).

The main test is the CI gate the issue asks for: `verify --suite all` on a 2-node
fake-GPU cluster, every check PASS (not SKIP), JSON and JUnit well-formed. The others
prove failures are reported (FAIL, exit 1, the job's output tail), that a hang is cut
off by the timeout and its job cancelled, and `simcluster test` end to end.
"""

from __future__ import annotations

import importlib.util
import json
import time
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.integration

ALL_CHECKS = {"basic.controller", "basic.nodes", "basic.srun-env", "basic.gpus", "basic.sbatch-output",
              "basic.array", "basic.dependency", "signals.time-limit", "basic.requeue",
              "basic.mpi", "basic.container", "basic.cpus-per-task", "basic.gpus-per-task", "basic.isolation", "basic.limits",
              "ddp.train", "fsdp.train", "deepspeed.zero3", "megatron.tp2"}
STACKS = ("torch", "deepspeed", "megatron.core")


def _missing_stack():
    for mod in STACKS:
        try:
            if importlib.util.find_spec(mod) is None:
                return mod
        except ImportError:
            return mod
    return None


needs_train = pytest.mark.skipif(_missing_stack() is not None,
                                 reason=f"training stack missing ({_missing_stack()}): make setup-train")


@needs_train
def test_verify_all_passes_with_json_and_junit(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2", "--fake-gpus", "2")
    junit = tmp_path / "verify.xml"
    t0 = time.monotonic()
    proc = c.cli(["verify", "--suite", "all", "--json", "--junit", str(junit)], timeout=900)
    took = time.monotonic() - t0
    assert proc.returncode == 0, f"verify failed:\nstderr:\n{proc.stderr}\nstdout:\n{proc.stdout[-4000:]}"

    report = json.loads(proc.stdout)  # --json: stdout is JSON only, the live lines go to stderr
    statuses = {ch["name"]: ch["status"] for ch in report["checks"]}
    assert set(statuses) == ALL_CHECKS
    assert all(s == "PASS" for s in statuses.values()), statuses
    assert report["passed"] is True and report["counts"] == {"PASS": len(ALL_CHECKS), "FAIL": 0, "SKIP": 0}
    assert report["cluster"] == c.name and report["suites"] == ["basic", "signals", "ddp", "fsdp", "deepspeed", "megatron"]
    by_name = {ch["name"]: ch for ch in report["checks"]}
    assert by_name["ddp.train"]["data"]["params_identical"] is True
    assert by_name["fsdp.train"]["data"]["checkpoint_reloaded"] is True
    assert by_name["deepspeed.zero3"]["data"]["zero_stage"] == 3
    assert by_name["megatron.tp2"]["data"]["tensor_parallel"] == 2
    # CPU-only host: the jobs ran on gloo and said so; megatron names its CPU shims.
    assert by_name["ddp.train"]["data"]["backend"] == "gloo"
    assert by_name["megatron.tp2"]["data"]["cpu_shims"]
    # Physical ids from the TaskProlog; with device cgroups (root) each node numbers its own.
    assert ("node1=0 node2=0" if c.gpus_constrained else "node1=0 node2=1") in by_name["basic.gpus"]["message"]
    # Live lines: one per check with name, result and seconds; then the summary table.
    for name in ALL_CHECKS:
        assert any(line.startswith(name) and " PASS " in line and line.rstrip().split()[2].endswith("s")
                   for line in proc.stderr.splitlines()), name
    assert f"{len(ALL_CHECKS)} passed, 0 failed, 0 skipped" in proc.stderr

    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("failures") == "0" and root.get("skipped") == "0"
    cases = root.findall("./testsuite/testcase")
    assert {tc.get("name") for tc in cases} == ALL_CHECKS
    assert all(tc.find("failure") is None and tc.find("skipped") is None for tc in cases)
    assert all(float(tc.get("time")) >= 0 for tc in cases)
    # Job files live under the cluster's state dir, one directory per run.
    assert report["run_dir"].startswith(str(c.root / "verify"))
    assert took < 600, f"verify --suite all took {took:.0f}s"


@needs_train
def test_a_crashing_job_is_reported_fail_with_its_output(make_cluster):
    c = make_cluster("--nodes", "2", "--fake-gpus", "2")
    proc = c.cli(["verify", "--suite", "ddp", "--json"], timeout=300,
                 env={"SIMCLUSTER_VERIFY_BREAK": "ddp:crash"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    ddp = next(ch for ch in report["checks"] if ch["name"] == "ddp.train")
    assert ddp["status"] == "FAIL"
    # The failing rank's own error, shown to the user (the tail ends with the other rank's SIGTERM).
    assert "injected failure" in ddp["first_error"]
    assert ddp["tail"].strip()
    assert any(line.strip().startswith("first error in the output:") and "injected failure" in line
               for line in proc.stderr.splitlines()), proc.stderr
    assert ddp["output"] and ddp["output"].startswith(report["run_dir"])
    assert "ddp.train" in proc.stderr and " FAIL " in proc.stderr
    assert "last lines of" in proc.stderr and "full output:" in proc.stderr


@needs_train
def test_a_hanging_job_is_cut_off_and_cancelled(make_cluster):
    c = make_cluster("--nodes", "2", "--fake-gpus", "2")
    t0 = time.monotonic()
    proc = c.cli(["verify", "--suite", "ddp", "--timeout", "40"], timeout=300,
                 env={"SIMCLUSTER_VERIFY_BREAK": "ddp:hang"})
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("ddp.train"))
    assert " FAIL " in line and "timed out" in line
    assert "the last rank stops answering" in proc.stdout  # the job's output tail
    assert took < 120, f"a hang held verify for {took:.0f}s"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not c.run(["squeue", "--noheader"]).stdout.strip():
            break
        time.sleep(0.5)
    assert not c.run(["squeue", "--noheader"]).stdout.strip(), "verify left its hung job running"


def test_unknown_suite_is_a_usage_error(make_cluster):
    c = make_cluster("--nodes", "2")
    proc = c.cli(["verify", "--suite", "basic,nope"])
    assert proc.returncode == 2 and "unknown suite nope" in proc.stderr


def test_simcluster_test_up_verify_down(sim_home):
    proc = run_cli(["test", "--name", "ci", "--nodes", "2", "--fake-gpus", "2", "--suite", "basic"], sim_home,
                   timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "simcluster test: passed" in proc.stdout
    basic = len([n for n in ALL_CHECKS if n.startswith("basic.")])
    assert f"{basic} passed, 0 failed, 0 skipped" in proc.stdout  # the basic suite alone: no training stack needed
    # The gate's interactive step ran before the batch jobs (it starts a fresh slurmctld's scheduling).
    assert "an interactive srun ran a step on node1" in proc.stdout
    assert "ddp.train" not in proc.stdout
    assert "cluster 'ci' removed" in proc.stdout
    assert "ci" not in run_cli(["list"], sim_home).stdout.split()


@needs_train
def test_simcluster_test_keeps_a_failed_cluster_when_asked(sim_home):
    proc = run_cli(["test", "--name", "kept", "--nodes", "2", "--fake-gpus", "2", "--suite", "ddp",
                    "--keep-on-failure"], sim_home, timeout=300, env={"SIMCLUSTER_VERIFY_BREAK": "ddp:crash"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "keeping cluster 'kept'" in proc.stdout and str(sim_home / "kept") in proc.stdout
    assert "simcluster test: FAILED" in proc.stdout
    listing = run_cli(["list"], sim_home).stdout
    assert "kept" in listing and "running" in listing


@needs_train
def test_simcluster_test_copies_logs_before_removing_a_failed_cluster(sim_home, tmp_path):
    logs = tmp_path / "logs"
    proc = run_cli(["test", "--name", "gone", "--nodes", "2", "--fake-gpus", "2", "--suite", "ddp",
                    "--logs-dir", str(logs)], sim_home, timeout=300, env={"SIMCLUSTER_VERIFY_BREAK": "ddp:crash"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"copied to {logs}" in proc.stdout
    assert list((logs / "verify").rglob("ddp.sbatch")) and (logs / "cluster" / "logs" / "slurmctld.log").exists()
    assert "gone" not in run_cli(["list"], sim_home).stdout.split()


def test_waiting_on_an_array_ends_when_its_last_task_does(make_cluster):
    """verify's job tracker follows every task of an array: the array's own job id names only
    the element still in its record (here task 3, done at once), so waiting on that element
    alone returned while tasks 0-2 still ran and basic.array read their outputs too early."""
    from provisioner.verify.jobs import JobTracker

    c = make_cluster("--nodes", "2")

    class Client:  # what JobTracker asks of a client: a command run against the cluster
        poll_s = 0.2

        def run(self, argv, timeout=15):
            return c.run(argv, timeout=timeout, check=False)

    job = c.run(["sbatch", "--parsable", "--array=0-3", "--output=/dev/null", "--wrap",
                 '[ "$SLURM_ARRAY_TASK_ID" = 3 ] || sleep 6']).stdout.strip()
    tracker = JobTracker(Client())
    tracker.start()
    try:
        view = tracker.wait(job, 120)
    finally:
        tracker.stop()
    assert sorted(view.tasks) == [f"{job}_{i}" for i in range(4)], view.summary
    assert view.states == ["COMPLETED"] * 4, view.summary
