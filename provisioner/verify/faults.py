"""`verify --suite faults`: the cluster survives the faults `simcluster fault` injects.

  faults.requeue-resume      a 2-node DDP job loses its second node (fault kill) after its
                             first checkpoint; Slurm requeues it, it resumes from the
                             checkpoint and ends with exactly the parameters of the same job
                             run without the fault
  faults.controller-restart  slurmctld killed with running, held, dependent and array jobs;
                             after the restart (fault heal) every job keeps its id and ends
                             COMPLETED
  faults.accounting-outage   slurmdbd down while jobs run; after heal sacct lists them
                             COMPLETED (accounting clusters only)

Not part of `--suite all`: the checks break the cluster on purpose (every one heals it
before it returns) and need a cluster made with `up --fast-failure` (a dead node is DOWN
in ~12 s instead of ~80 s); 1-2 minutes in all. On other clusters they SKIP.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.verify.accounting import _sacct_row
from provisioner.verify.basic import MEM, partition_line, training_partition
from provisioner.verify.context import Submitted, VerifyContext, free_port, render_template
from provisioner.verify.jobs import JobError
from provisioner.verify.outcome import CheckFailed, CheckSkipped, Outcome
from provisioner.verify.training import parse_result

FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def _injector(ctx: VerifyContext):
    inj = ctx.target.faults
    if inj is None:
        raise CheckSkipped("fault injection needs a local, docker or deployed (--ssh) cluster")
    if not getattr(inj, "fast", False):
        raise CheckSkipped("needs up --fast-failure (a deployed cluster: failureDetection: fast in its spec)")
    return inj


def _heal(ctx: VerifyContext, inj) -> str:
    try:
        return inj.heal(timeout=ctx.limit(120))
    except Exception as exc:  # a failed heal is the check's failure, with its reason
        raise CheckFailed(f"fault heal failed: {getattr(exc, 'message', exc)}") from None


def _job(ctx: VerifyContext, job_id: str) -> Dict[str, str]:
    return ctx.client.show_job(job_id) or {}


# -- faults.requeue-resume ----------------------------------------------------------------------
def check_requeue_resume(ctx: VerifyContext) -> Outcome:
    inj = _injector(ctx)
    missing = ctx.target.missing_module(["torch"])
    if missing:
        raise CheckSkipped(f"{missing} is not installed: {ctx.target.install_hint}")
    place = training_partition(ctx.spec, 2)
    if place is None:
        raise CheckSkipped("needs a partition with at least 2 nodes")
    part, members = place
    pair = members[:2]
    victim = pair[1]
    limit = ctx.limit(300)
    deadline = time.monotonic() + limit

    # The reference (the same job, same seed, no fault) runs where the fault cannot reach
    # it: beside the faulted job from the start, on the first node and one the fault leaves
    # alone, where the partition has a third node; else (2 nodes) once the faulted job is
    # requeued and the victim healed, beside its second run. Never before the faulted job:
    # its ~15 s would add to the heal's wait (up to 60 s, see below), which it now overlaps
    # on 3+ nodes.
    spare = [n for n in members if n not in pair]
    ref_pair = [pair[0], spare[0]] if spare else pair

    def submit(tag: str, nodes: List[str] = pair):
        workdir = ctx.check_dir(f"faults.requeue-resume.{tag}")
        text = render_template("torchrun.sbatch", {
            "WORKLOAD": "ddp_ckpt", "NODES": 2, "MEM": "512M", "TIME": ctx.time_minutes(limit),
            "GRES_LINE": "", "PARTITION_LINE": partition_line(part),
            "BIN": ctx.target.python_bin, "SCRIPT": ctx.workload("ddp_ckpt.py")})
        env = {"MASTER_PORT": str(free_port()), "SIMCLUSTER_CKPT_DIR": ctx.cluster_path(workdir / "checkpoint"),
               "SIMCLUSTER_SEED": "1234", "SIMCLUSTER_STEPS": "40", "SIMCLUSTER_CKPT_EVERY": "5",
               "SIMCLUSTER_STEP_SLEEP": "0.3"}
        return ctx.submit(f"faults.requeue-resume.{tag}", text, ["--requeue", f"--nodelist={','.join(nodes)}"],
                          env=env, name="ddp_ckpt.sbatch"), workdir

    job, workdir = submit("faulted")
    ref: Optional[Submitted] = submit("reference", ref_pair)[0] if spare else None
    first_ckpt = workdir / "checkpoint" / "step-5.pt"

    def checkpointed() -> Tuple[bool, None]:
        if ctx.files.exists(first_ckpt):
            return True, None
        info = _job(ctx, job.job_id)
        if info.get("JobState") in FINAL:
            raise CheckFailed(f"job {job.job_id} ended {info.get('JobState')} before its first checkpoint",
                              output=job.output)
        return False, None
    try:
        poll_until(checkpointed, deadline - time.monotonic(), first_delay=0.2, max_delay=0.2)
    except WaitTimeout:
        ctx.client.scancel(*[j.job_id for j in (job, ref) if j is not None])
        raise CheckFailed(f"no checkpoint within {limit:.0f}s; cancelled job {job.job_id}", output=job.output) from None
    except CheckFailed:
        if ref is not None:
            ctx.client.scancel(ref.job_id)
        raise
    inj.kill(victim)
    t_kill = time.monotonic()
    healed = False
    state, restarts = "?", 0
    detect_s: Optional[float] = None

    def requeued_and_ended() -> Tuple[bool, str]:
        nonlocal state, restarts, detect_s, healed, ref
        info = _job(ctx, job.job_id)
        state, restarts = info.get("JobState", "?"), int(info.get("Restarts", "0") or 0)
        if state in FINAL and (restarts >= 1 or state != "COMPLETED"):
            return True, state
        if restarts >= 1 and not healed:
            detect_s = time.monotonic() - t_kill
            if spare:
                # The second run may go to the first node and a spare one, as Slurm places a
                # requeued job wherever it fits: it runs while the heal below waits (the
                # victim stays drained for up to 60 s) instead of after it, and the retried
                # kill for the first run reaches only the victim. Refused: it runs on the
                # pair once healed, as on 2 nodes.
                ctx.client.run(["scontrol", "update", f"JobId={job.job_id}",
                                f"ReqNodeList={pair[0]},{spare[0]}"], timeout=10)
            _heal(ctx, inj)
            healed = True
            if ref is None:
                ref = submit("reference")[0]
        # The requeued job waits cred_expire+1 s (11 s with --fast-failure) before it
        # may start again: not released early, as basic.requeue does. Its first run's
        # processes on the surviving node are still being killed (KillWait) then, and
        # the same job id starting there again finds its old step "completing". The
        # heal keeps the victim drained until slurmctld has retried the first run's
        # step kill to it (up to 60 s; cluster/lifecycle/repair.py says why).
        return False, state
    try:
        try:
            poll_until(requeued_and_ended, deadline - time.monotonic(), first_delay=0.25, max_delay=0.25)
        except WaitTimeout:
            ctx.client.scancel(*[j.job_id for j in (job, ref) if j is not None])
            raise JobError(f"timed out after {limit:.0f}s (state {state}, restarts {restarts}); cancelled it",
                           job.output) from None
    finally:
        if not healed:
            _heal(ctx, inj)
    if state != "COMPLETED":
        if ref is not None:
            ctx.client.scancel(ref.job_id)
        raise CheckFailed(f"job {job.job_id} ended {state} after {restarts} restart(s)", output=job.output)
    if ref is None:  # it ended COMPLETED without a requeue: the reference was never needed before
        ref = submit("reference")[0]
    ctx.wait_ok(ref, max(10.0, deadline - time.monotonic()))
    ref_result = parse_result(ctx.read(ref.output))
    if not ref_result:
        raise CheckFailed("the reference job printed no SIMCLUSTER_RESULT line", output=ref.output)
    result = parse_result(ctx.read(job.output))
    if not result:
        raise CheckFailed("the resumed job printed no SIMCLUSTER_RESULT line", output=job.output)
    problems: List[str] = []
    if result.get("restart_count", 0) < 1 or not result.get("resumed_from"):
        problems.append(f"the last run did not resume from a checkpoint (restart {result.get('restart_count')}, "
                        f"resumed from {result.get('resumed_from')})")
    if result.get("param_checksum") != ref_result.get("param_checksum") or \
            result.get("param_sums") != ref_result.get("param_sums"):
        problems.append(f"final parameters differ from the uninterrupted run: checksum "
                        f"{result.get('param_checksum')!r} vs {ref_result.get('param_checksum')!r}")
    if not result.get("params_identical"):
        problems.append(f"parameters differ between ranks: {result.get('param_checksums')}")
    if problems:
        raise CheckFailed("; ".join(problems), output=job.output, data=result)
    seen = f"requeued {detect_s:.0f}s after the kill" if detect_s is not None else "requeued"
    return Outcome(f"job {job.job_id} lost {victim} after its step-5 checkpoint, {seen}, "
                   f"resumed from step {result['resumed_from']}; final checksum {result['param_checksum']:.12g} "
                   f"== uninterrupted job {ref.job_id}'s", data={"result": result, "reference": ref_result},
                   output=job.output)


# -- faults.controller-restart ------------------------------------------------------------------
def check_controller_restart(ctx: VerifyContext) -> Outcome:
    inj = _injector(ctx)
    check = "faults.controller-restart"
    limit = ctx.limit(120)
    t = ctx.time_minutes(limit)
    common = ["-N1", f"--mem={MEM}", f"--time={t}"]
    running = ctx.submit(check, "#!/bin/bash\nsleep 12\necho done\n", common, name="running.sh")
    held = ctx.submit(check, "#!/bin/bash\necho held done\n", [*common, "--hold"], name="held.sh")
    dep = ctx.submit(check, "#!/bin/bash\necho dependent done\n",
                     [*common, f"--dependency=afterok:{running.job_id}"], name="dependent.sh")
    array = ctx.submit(check, "#!/bin/bash\nsleep 2\necho task $SLURM_ARRAY_TASK_ID\n",
                       [*common, "--array=0-3"], name="array.sh", output="array-%A_%a.out")
    jobs = {"running": running, "held": held, "dependent": dep, "array": array}
    ctx.wait(running, 60, until=lambda v: "RUNNING" in v.states or v.finished)
    names = {k: _job(ctx, j.job_id).get("JobName") for k, j in jobs.items()}
    # slurmctld writes its job state at most every 5 s: a job younger than that dies
    # with a SIGKILLed controller, as it would on a real cluster (docs/faults.md).
    # A deliberate delay, not a poll: nothing tells from outside that the state was written.
    time.sleep(6)
    inj.kill_controller()
    time.sleep(2)  # deliberate: the jobs run on for a moment without a controller, as after a real crash
    healed = _heal(ctx, inj)
    after = {k: _job(ctx, j.job_id) for k, j in jobs.items()}
    problems = [f"{k} job {jobs[k].job_id}: {'unknown after the restart' if not a else 'now ' + str(a.get('JobName'))}"
                for k, a in after.items() if not a or a.get("JobName") != names[k]]
    if problems:
        raise CheckFailed("jobs lost or changed by the restart: " + "; ".join(problems))
    _release(ctx, held.job_id, deadline=time.monotonic() + 60)
    for k, j in jobs.items():
        try:
            ctx.wait_ok(j, limit)
        except JobError as exc:
            raise CheckFailed(f"{k} job: {exc}", output=j.output) from None
    return Outcome(f"slurmctld killed with jobs {', '.join(f'{k} {j.job_id}' for k, j in jobs.items())} in flight; "
                   f"{healed.split(': ', 1)[-1]}; every job kept its id and ended COMPLETED")


def _release(ctx: VerifyContext, job_id: str, deadline: float) -> None:
    """`scontrol release`, again while slurmctld answers "try again in a bit": a restarted
    slurmctld with accounting refuses to update a job until slurmdbd has given the job
    its database index ("Job update not available right now, the DB index is being set"),
    which on a loaded host took longer than the update's own 5-second wait."""
    def released() -> Tuple[bool, str]:
        res = ctx.client.run(["scontrol", "release", job_id], timeout=10)
        if not res.ok and "try again" not in res.error_line():
            raise CheckFailed(f"held job {job_id}: scontrol release failed: {res.error_line()}")
        return res.ok, res.error_line()
    try:
        poll_until(released, deadline - time.monotonic(), first_delay=0.5, max_delay=5.0, factor=2.0)
    except WaitTimeout as exc:
        raise CheckFailed(f"held job {job_id}: scontrol release failed: {exc.last_seen}") from None


# -- faults.accounting-outage -------------------------------------------------------------------
def check_accounting_outage(ctx: VerifyContext) -> Outcome:
    inj = _injector(ctx)
    check = "faults.accounting-outage"
    limit = ctx.limit(90)
    inj.stop_accounting()
    try:
        jobs = [ctx.submit(check, f"#!/bin/bash\necho outage job {i}\n",
                           ["-N1", f"--mem={MEM}", f"--time={ctx.time_minutes(limit)}"], name=f"job{i}.sh")
                for i in range(3)]
        for j in jobs:
            ctx.wait_ok(j, limit)
    finally:
        _heal(ctx, inj)
    def recorded() -> Tuple[bool, Dict[str, object]]:
        rows = {j.job_id: _sacct_row(ctx.client, j.job_id) for j in jobs}
        return all(r and r[1] == "COMPLETED" and r[3] not in ("", "None assigned") for r in rows.values()), rows
    try:
        rows = poll_until(recorded, limit, first_delay=0.5, max_delay=0.5)
    except WaitTimeout as exc:
        raise CheckFailed(f"after heal sacct shows {exc.last_seen} within {limit:.0f}s, expected every job "
                          f"COMPLETED", hint=ctx.target.log_hint("slurmdbd")) from None
    return Outcome(f"slurmdbd down while jobs {', '.join(rows)} ran; after heal sacct lists them COMPLETED")
