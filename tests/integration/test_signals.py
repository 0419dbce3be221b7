"""Time limits and preemption in seconds, on the local backend with real daemons: `fault
time-limit`, `fault preempt`, preemption configured in the spec, and `verify --suite signals`.

One cluster for the module (tests/data/signals/preempt.yaml: partitions low, high and grace
over node2 and node3, preempt/partition_prio with PreemptMode=REQUEUE, fast failure
detection so a requeued job may start again 11 s after the requeue; node1 alone in the
default partition). Slurm's own waits set the pace: a 24-hour job moved to end in 90 s
ends 2-2.5 minutes after it started, and so does verify's signals.checkpoint. So module
fixtures start both first, `verify --suite signals` on node1 and the moved job on node2,
and the tests that check them come last, while the fault tests run on node3 meanwhile.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, SIMCLUSTER, Cluster, module_cluster, run_cli, wait_for

pytestmark = pytest.mark.integration
SPEC = REPO / "tests" / "data" / "signals" / "preempt.yaml"
MEM = "--mem=32M"  # a job without --mem takes its CPUs' share of the node's memory

CHECKPOINT_JOB = """#!/bin/bash
#SBATCH --time=24:00:00
#SBATCH --signal=B:USR1@90
trap 'echo "GOT USR1 at $(date +%s)"; echo step=$step > {ckpt}' USR1
trap 'echo "GOT TERM at $(date +%s)"; exit 143' TERM
echo "STARTED at $(date +%s)"
step=0
while true; do step=$((step + 1)); sleep 1 & wait $!; done
"""

# Requeueable; checkpoints its counter on SIGTERM; the second run reads it. A job step
# (srun sleep) shows where a grace-time SIGTERM goes: to the steps, not the batch shell.
RESUMABLE_JOB = """#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
ckpt="$SLURM_SUBMIT_DIR/ckpt-$SLURM_JOB_ID"
if [ -f "$ckpt" ]; then echo "RESUMED restart=${{SLURM_RESTART_COUNT:-0}} $(cat "$ckpt")"; exit 0; fi
n=0
trap 'echo "TERM n=$n"; echo "n=$n" > "$ckpt"; exit 0' TERM
{step}
echo STARTED
while true; do n=$((n + 1)); sleep 0.1 & wait $!; done
"""


@pytest.fixture(scope="module")
def sc():
    with module_cluster("sig", "--config", str(SPEC)) as c:
        yield c


@pytest.fixture(scope="module")
def jobdir(sc):
    d = sc.home / "jobs"
    d.mkdir(exist_ok=True)
    return d


def field(c: Cluster, job: str, key: str) -> str:
    out = c.run(["scontrol", "show", "job", "-o", job], check=False).stdout
    return next((f.split("=", 1)[1] for f in out.split() if f.startswith(key + "=")), "")


def submit(c: Cluster, d: Path, text: str, *args: str) -> str:
    script = d / f"job-{uuid.uuid4().hex[:6]}.sh"
    script.write_text(text)
    return c.run(["sbatch", "--parsable", MEM, "-o", str(d / "out-%j.txt"), *args, str(script)],
                 cwd=str(d)).stdout.strip()


def output(d: Path, job: str) -> str:
    path = d / f"out-{job}.txt"
    return path.read_text() if path.exists() else ""


def started(d: Path, job: str, timeout: float = 60) -> None:
    wait_for(f"job {job} to set its traps", lambda: "STARTED" in output(d, job), timeout=timeout)


@pytest.fixture(scope="module")
def moved(sc, jobdir):
    """A 24-hour job with --signal=B:USR1@90 whose end `fault time-limit --in 90` moved;
    started before the other tests, checked after them."""
    job = submit(sc, jobdir, CHECKPOINT_JOB.format(ckpt=jobdir / "ckpt-moved"), "-p", "low", "-w", "node2")
    started(jobdir, job)
    t0 = time.monotonic()
    proc = run_cli(["fault", "time-limit", job, "--in", "90", "--name", sc.name], sc.home)
    return job, proc, t0


def _cli_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["SIMCLUSTER_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def verify_run(sc):
    """`verify --suite signals --json`, running on node1 (the default partition) while the
    other tests run on node2 and node3."""
    proc = subprocess.Popen(SIMCLUSTER + ["verify", "--name", sc.name, "--suite", "signals", "--json"],
                            cwd=REPO, env=_cli_env(sc.home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    yield proc, time.monotonic()
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def test_fault_time_limit_says_what_it_set(sc, moved, verify_run):
    job, proc, _ = moved
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    run_s = int(re.search(r"it has run (\d+) s", out).group(1))
    minutes = math.ceil((run_s + 90) / 60)  # 2 unless the job took 30 s to start
    assert f"job {job}: TimeLimit 1-00:00:00 -> 00:0{minutes}:00 (scontrol update JobId={job} TimeLimit={minutes})" \
        in out, out
    assert "--signal=B:USR1@90: SIGUSR1 to the batch shell is due 90 s before the end" in out
    assert "slurmctld ends it TIMEOUT at its first time-limit pass (every 30 s)" in out and "KillWait=5 s" in out
    assert field(sc, job, "TimeLimit") == f"00:0{minutes}:00"


def test_fault_time_limit_errors(sc, jobdir):
    bad = run_cli(["fault", "time-limit", "999999", "--in", "60", "--name", sc.name], sc.home)
    assert bad.returncode == 2 and "no job 999999 on cluster 'sig'" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
    # A pending job (held) has no end yet.
    held = submit(sc, jobdir, "#!/bin/bash\ntrue\n", "--hold")
    pending = run_cli(["fault", "time-limit", held, "--in", "60", "--name", sc.name], sc.home)
    assert pending.returncode == 2 and f"job {held} is PENDING, not running" in pending.stderr, pending.stderr
    sc.run(["scancel", held])
    gone = run_cli(["fault", "time-limit", "1", "--in", "60", "--name", "no-such"], sc.home)
    assert gone.returncode == 2 and "no cluster named 'no-such'" in gone.stderr


def test_fault_preempt_grace_signals_the_steps_then_requeues_and_the_job_resumes(sc, jobdir):
    job = submit(sc, jobdir, RESUMABLE_JOB.format(step="srun --overlap sleep 300 &"), "-p", "grace", "-w", "node3")
    started(jobdir, job)
    # The step starts in the background: under load it may not run yet when STARTED shows.
    wait_for(f"step {job}.0 to run",
             lambda: f"{job}.0" in sc.run(["squeue", "-h", "-s", "-j", job, "-o", "%i"], check=False).stdout)
    t0 = time.monotonic()
    proc = run_cli(["fault", "preempt", job, "--name", sc.name], sc.home)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert f"job {job}: PreemptMode=REQUEUE (from partition 'grace'), GraceTime=5 s (from partition 'grace')" \
        in proc.stdout, proc.stdout
    assert "waiting GraceTime 5 s" in proc.stderr and "sacct shows the run REQUEUED (sacct -D)" in proc.stdout
    assert took >= 5  # the grace time was waited out before the requeue
    text = output(jobdir, job)
    # The step got the grace-time SIGTERM; the batch shell's trap only at the requeue.
    assert text.index(f"STEP {job}.0 ON node3 CANCELLED") < text.index("DUE TO JOB REQUEUE") < text.index("TERM n=")
    wait_for("the requeued job to run again and end", lambda: field(sc, job, "JobState") == "COMPLETED", timeout=90)
    assert field(sc, job, "Restarts") == "1"
    saved = re.search(r"^TERM (n=\d+)", output(jobdir, job), re.M).group(1)
    assert f"RESUMED restart=1 {saved}" in output(jobdir, job)


def test_fault_preempt_refuses_what_slurm_would_not_do_and_cancel_overrides(sc, jobdir):
    # high: PreemptMode=OFF
    high = submit(sc, jobdir, RESUMABLE_JOB.format(step=""), "-p", "high", "-w", "node3")
    # low, but not requeueable
    fixed = submit(sc, jobdir, RESUMABLE_JOB.format(step=""), "-p", "low", "-w", "node3", "--no-requeue")
    started(jobdir, high)
    started(jobdir, fixed)
    off = run_cli(["fault", "preempt", high, "--name", sc.name], sc.home)
    assert off.returncode == 2 and "PreemptMode is OFF (partition 'high')" in off.stderr, off.stderr
    assert "pass --mode requeue or --mode cancel" in off.stderr and "Traceback" not in off.stderr
    nope = run_cli(["fault", "preempt", fixed, "--name", sc.name], sc.home)
    assert nope.returncode == 2 and "cannot be requeued (Requeue=0)" in nope.stderr, nope.stderr
    assert field(sc, high, "JobState") == field(sc, fixed, "JobState") == "RUNNING"  # nothing done
    for job in (high, fixed):
        proc = run_cli(["fault", "preempt", job, "--mode", "cancel", "--name", sc.name], sc.home)
        assert proc.returncode == 0 and "PreemptMode=CANCEL (from --mode)" in proc.stdout, proc.stderr
    wait_for("both cancelled", lambda: {field(sc, high, "JobState"), field(sc, fixed, "JobState")} == {"CANCELLED"})
    assert "TERM n=" in output(jobdir, high)  # SIGTERM first, as on a real cancel


def test_configured_preemption_requeues_the_low_job_which_resumes(sc, jobdir):
    low = submit(sc, jobdir, RESUMABLE_JOB.format(step=""), "-p", "low", "-w", "node3", "--exclusive")
    started(jobdir, low)
    high = submit(sc, jobdir, "#!/bin/bash\necho high ran\nsleep 2\n", "-p", "high", "-w", "node3")
    wait_for("the high job to preempt the low one", lambda: field(sc, low, "Restarts") == "1", timeout=60)
    assert "DUE TO PREEMPTION" in output(jobdir, low) and "TERM n=" in output(jobdir, low)
    wait_for("the low job to run again and end", lambda: field(sc, low, "JobState") == "COMPLETED", timeout=120)
    assert field(sc, high, "JobState") == "COMPLETED" and "high ran" in output(jobdir, high)
    saved = re.search(r"^TERM (n=\d+)", output(jobdir, low), re.M).group(1)
    assert f"RESUMED restart=1 {saved}" in output(jobdir, low)


def test_verify_signals_suite(verify_run):
    proc, t0 = verify_run
    stdout, stderr = proc.communicate(timeout=600)
    print(f"\nverify --suite signals: {time.monotonic() - t0:.0f} s")
    assert proc.returncode == 0, stderr[-3000:]
    checks = {c["name"]: c for c in json.loads(stdout)["checks"]}
    assert {n: c["status"] for n, c in checks.items()} == {
        "basic.controller": "PASS", "basic.nodes": "PASS", "signals.time-limit": "PASS",
        "signals.checkpoint": "PASS", "signals.preempt": "PASS"}
    # The cluster requeues on preemption: verify used its configuration, not --mode.
    assert "preempted as configured (partition 'main')" in checks["signals.preempt"]["message"]
    assert "ended TIMEOUT" in checks["signals.checkpoint"]["message"]


def test_the_moved_job_got_its_signal_before_it_ended_timeout(sc, jobdir, moved):
    job, _, t0 = moved
    # slurmctld forgets a job MinJobAge (30 s) after its end, and this cluster keeps no
    # accounting: while it is known, its state; after that, slurmstepd's line says why it ended.
    wait_for("the moved job to end", lambda: "GOT TERM" in output(jobdir, job)
             and field(sc, job, "JobState") not in ("RUNNING", "COMPLETING"), timeout=200)
    took = time.monotonic() - t0
    state = field(sc, job, "JobState")
    assert state in ("TIMEOUT", ""), state
    text = output(jobdir, job)
    assert re.search(rf"JOB {job} ON node2 CANCELLED AT \S+ DUE TO TIME LIMIT", text), text
    assert (jobdir / "ckpt-moved").read_text().startswith("step=")
    # The signal came before the end, then the end's SIGTERM.
    assert text.index("GOT USR1") < text.index("DUE TO TIME LIMIT") < text.index("GOT TERM")
    got, term = (int(re.search(rf"^GOT {s} at (\d+)", text, re.M).group(1)) for s in ("USR1", "TERM"))
    print(f"\nmoved job: SIGUSR1 {term - got} s before the TIMEOUT's SIGTERM; "
          f"the end seen {took:.0f} s after fault time-limit --in 90")
