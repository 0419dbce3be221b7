"""The signals suite's checkpoint paths: a job's end and its preemption, in seconds.

  signals.checkpoint  a ``--time=24:00:00 --signal=B:USR1@90`` job whose end `fault
                      time-limit` moves to 90 s from now: the trap runs, writes its
                      checkpoint, and Slurm ends the job TIMEOUT
  signals.preempt     a requeueable job preempted by `fault preempt` (the cluster's
                      PreemptMode where it is REQUEUE, else --mode requeue): it checkpoints
                      its counter on the signal, is requeued, and its second run resumes
                      from the checkpoint

Both use cluster/faults/jobfaults.py, the code of `simcluster fault time-limit` and `fault
preempt`, over the target's Slurm client: they need nothing but Slurm's own commands,
so they run on local, docker and deployed clusters alike. (signals.time-limit, the
short-job form of the signal check, is in basic.py.)

Time: the checkpoint job ends at its start + 2 minutes (Slurm keeps limits in whole
minutes, and a 90 s offset needs a limit past 90 s), and slurmctld ends it at its next
30-s pass: 2-2.5 minutes, spent waiting (it runs in the background, beside the other
suites). The preempted job is released as soon as it is requeued, as basic.requeue does.
"""

from __future__ import annotations

import re
import time
from typing import Optional, Tuple

from provisioner.cluster.faults import jobfaults
from provisioner.cluster.model.partitions import covering_partitions
from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.config.types import ClusterSpec
from provisioner.errors import SimclusterError
from provisioner.verify.basic import MEM, follow_requeued, one_node, parse_kv, partition_line
from provisioner.verify.context import Submitted, VerifyContext, render_template
from provisioner.verify.jobs import JobError
from provisioner.verify.outcome import CheckFailed, Outcome

DAY_S = 24 * 3600
SIGNAL_OFFSET = 90  # the workload's --signal=B:USR1@90, a common value in training scripts
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


def max_time_seconds(text: str) -> Optional[float]:
    """A partition's MaxTime in seconds ('INFINITE' and the like: None, no limit; '60' is minutes)."""
    t = (text or "").strip()
    if t.upper() in ("", "INFINITE", "UNLIMITED"):
        return None
    if t.isdigit():
        return int(t) * 60.0
    s = jobfaults.clock_seconds(t)
    return float(s) if s is not None else None


def day_partition(spec: ClusterSpec) -> Tuple[Optional[str], str, str]:
    """(partition, node, --time) for a 24-hour job: the first partition, the default one
    first, that allows 24 hours; else the one with the longest MaxTime, at its MaxTime."""
    parts = covering_partitions(spec)
    by_name = {p.name: p for p in spec.partitions}
    best = None
    for name, members in parts:
        limit = max_time_seconds(by_name[name].max_time) if name in by_name else None
        if limit is None or limit >= DAY_S:
            return name, members[0], "24:00:00"
        if best is None or limit > best[0]:
            best = (limit, name, members[0])
    assert best is not None  # covering_partitions always gives one
    return best[1], best[2], jobfaults.clock_text(int(best[0]))


def _wait_started(ctx: VerifyContext, job: Submitted, limit: float) -> None:
    """Until the job printed STARTED (its trap is set: a signal before that would kill bash)."""
    def started() -> Tuple[bool, str]:
        if "STARTED" in ctx.read(job.output):
            return True, "started"
        state = ctx.client.show_job(job.job_id).get("JobState", "gone")
        if state in FINAL or state == "gone":
            raise CheckFailed(f"job {job.job_id} ended {state} before it started its work", output=job.output)
        return False, state
    try:
        poll_until(started, limit, first_delay=0.2, max_delay=0.5)
    except WaitTimeout as exc:
        ctx.client.scancel(job.job_id)
        raise JobError(f"job {job.job_id} did not start within {limit:.0f}s ({exc.last_seen}); cancelled it",
                       job.output) from None


def _fault(ctx: VerifyContext, job: Submitted, call) -> str:
    """Run a job fault; its refusal or failure is the check's failure, and the job goes."""
    try:
        return call()
    except SimclusterError as exc:
        ctx.client.scancel(job.job_id)
        raise CheckFailed(exc.one_line(), output=job.output) from None


# -- signals.checkpoint ---------------------------------------------------------------------
def check_checkpoint(ctx: VerifyContext) -> Outcome:
    check = "signals.checkpoint"
    part, node, time_text = day_partition(ctx.spec)
    script = render_template("signals_checkpoint.sbatch",
                             {"TIME": time_text, "MEM": MEM, "PARTITION_LINE": partition_line(part)})
    job = ctx.submit(check, script, [f"--nodelist={node}"])
    _wait_started(ctx, job, ctx.limit(60))
    moved = _fault(ctx, job, lambda: jobfaults.time_limit(ctx.client, job.job_id, SIGNAL_OFFSET, ctx.target.name))
    # The new end is at most 2 minutes after the start; slurmctld ends the job at its next
    # 30-s pass after that. Wait past both before calling it a hang.
    view = ctx.wait(job, ctx.limit(200))
    text = ctx.read(job.output)
    got = re.search(r"^GOT SIGUSR1 at (\d+)", text, re.M)
    ckpt = ctx.read(job.workdir / "checkpoint.txt").strip()
    if not got:
        raise CheckFailed(f"the batch script's trap never got SIGUSR1 (job {view.summary}); fault time-limit "
                          f"said: {moved.message.splitlines()[0]}", output=job.output)
    if not ckpt.startswith("step="):
        raise CheckFailed(f"the trap ran but left no checkpoint ({ckpt!r})", output=job.output)
    if view.states != ["TIMEOUT"]:
        raise CheckFailed(f"the trap ran and checkpointed, but the job ended {view.summary}, not TIMEOUT",
                          output=job.output)
    started = re.search(r"^STARTED at (\d+)", text, re.M)
    # The job's own clock: its start plus the new limit is its end (within the second it took to start).
    before = f", {int(started.group(1)) + moved.minutes * 60 - int(got.group(1))} s before its end" if started else ""
    return Outcome(f"job {job.job_id} (--time={time_text} --signal=B:USR1@{SIGNAL_OFFSET}) moved by fault "
                   f"time-limit to TimeLimit={moved.minutes} (its end {moved.ends_in} s later): SIGUSR1 reached "
                   f"its trap{before}, {ckpt} checkpointed, ended TIMEOUT", output=job.output,
                   data={"time_limit": moved.message})


# -- signals.preempt ------------------------------------------------------------------------
def check_preempt(ctx: VerifyContext) -> Outcome:
    check = "signals.preempt"
    limit = ctx.limit(60)
    script = render_template("signals_preempt.sbatch", {"TIME": ctx.time_minutes(limit), "MEM": MEM})
    # The second run reads the checkpoint the first wrote: both runs on one node.
    job = ctx.submit(check, script, one_node(ctx.spec))
    _wait_started(ctx, job, limit)
    try:
        running = jobfaults.running_job(ctx.client, job.job_id, ctx.target.name)
        configured = jobfaults.preemption(ctx.client, running)
    except SimclusterError as exc:
        ctx.client.scancel(job.job_id)
        raise CheckFailed(exc.one_line(), output=job.output) from None
    # A cancelled job cannot resume: where the cluster does not requeue, requeue anyway.
    mode = None if configured.mode == "REQUEUE" else "requeue"
    why = (f"as configured ({configured.mode_from})" if mode is None
           else f"with --mode requeue (PreemptMode {configured.mode} from {configured.mode_from})")
    preempted = _fault(ctx, job, lambda: jobfaults.preempt(ctx.client, job.job_id, ctx.target.name, mode))
    state, restarts = follow_requeued(ctx, job, limit + configured.grace_s)
    text = ctx.read(job.output)
    saved = [parse_kv(line) for line in text.splitlines() if line.startswith("CHECKPOINT ")]
    resumed = [parse_kv(line) for line in text.splitlines() if line.startswith("RESUMED ")]
    if state != "COMPLETED" or not saved or not resumed:
        raise CheckFailed(f"job {job.job_id} ended {state} after {restarts} restart(s); checkpointed: "
                          f"{bool(saved)}, resumed: {bool(resumed)}", output=job.output)
    if resumed[-1].get("count") != saved[-1].get("count") or resumed[-1].get("restart_count") != "1":
        raise CheckFailed(f"the second run did not resume from the checkpoint: checkpointed count="
                          f"{saved[-1].get('count')}, resumed with {resumed[-1]}", output=job.output)
    return Outcome(f"job {job.job_id} preempted {why}: checkpointed count={saved[-1]['count']} on "
                   f"SIG{saved[-1].get('signal')}, requeued, resumed from it (SLURM_RESTART_COUNT=1)",
                   output=job.output, data={"preempt": preempted})
