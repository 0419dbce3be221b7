"""Run checks: time each one, catch whatever it raises, never wait without a deadline.

Order: the controller and node checks first (if the controller does not answer, nothing
else can run and the rest is SKIP). Then the other basic checks all at once (each is a
small job; Slurm runs them side by side). The background one (the signals suite, whose
job holds a CPU while it waits on Slurm's 30-second time-limit timer) starts when those
are through and keeps running while the training suites run one after the other (on 2
cores, two trainings at once are not faster); signals.checkpoint is background too, for
the 2-2.5 minutes Slurm takes to end its job.
"""

from __future__ import annotations

import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from provisioner.config.types import ClusterSpec
from provisioner.verify.context import VerifyContext
from provisioner.verify.jobs import JobError, first_error, tail
from provisioner.verify.outcome import FAIL, PASS, SKIP, CheckFailed, CheckSkipped, Outcome

TAIL_LINES = 25
# Suites of small jobs that run side by side (the rest run one check at a time).
CONCURRENT_SUITES = ("basic", "signals")


@dataclass(frozen=True)
class Check:
    name: str  # "basic.srun-env", "ddp.train"
    suite: str
    func: Callable[[VerifyContext], Outcome]
    description: str
    background: bool = False  # may still run while later suites run
    gate: bool = False  # must pass before anything else is tried
    # Only for clusters where this holds (e.g. accounting enabled); otherwise not listed at all.
    applies: Optional[Callable[["ClusterSpec"], bool]] = None
    # False: run only where its suite is named (--suite signals), not as part of "all".
    in_all: bool = True
    # Its jobs wait on Slurm between their parts (a requeue and its release, a dependency,
    # a second step): started first among the concurrent checks, so those waits overlap
    # the other checks' jobs instead of ending the suite (jobs start in submission order).
    early: bool = False
    # Its job waits for every CPU of a node (basic.srun-env, basic.mpi, basic.cpus-per-task):
    # submitted last, so it does not stop the smaller jobs behind it while another job
    # holds a CPU of its node.
    wide: bool = False


@dataclass
class CheckResult:
    name: str
    suite: str
    status: str
    seconds: float
    message: str
    description: str = ""
    output: Optional[str] = None  # the job's output file
    tail: str = ""  # its last lines, on failure
    first_error: str = ""  # the first line of the output that looks like the cause
    hint: str = ""
    data: Dict = field(default_factory=dict)

    def to_dict(self) -> Dict:
        return {"name": self.name, "suite": self.suite, "status": self.status, "seconds": round(self.seconds, 2),
                "message": self.message, "description": self.description, "output": self.output,
                "tail": self.tail, "first_error": self.first_error, "hint": self.hint, "data": self.data}


def run_one(ctx: VerifyContext, check: Check) -> CheckResult:
    """Run one check; every exception becomes a FAIL (with the job's output) or a SKIP."""
    t0 = time.monotonic()
    res = CheckResult(check.name, check.suite, FAIL, 0.0, "", check.description)
    try:
        out = check.func(ctx)
        res.status, res.message, res.data = PASS, out.message, out.data
        res.output = str(out.output) if out.output else None
    except CheckSkipped as exc:
        res.status, res.message = SKIP, exc.reason
    except CheckFailed as exc:
        res.message, res.hint, res.data = exc.message, exc.hint, exc.data
        _attach_output(ctx, res, exc.output)
    except JobError as exc:
        res.message = str(exc)
        _attach_output(ctx, res, exc.output)
    except Exception as exc:  # a bug in the check itself: still a clear FAIL, never a crash
        res.message = f"internal error: {exc!r}"
        res.tail = traceback.format_exc(limit=6)
    res.seconds = time.monotonic() - t0
    return res


def _attach_output(ctx: VerifyContext, res: CheckResult, output: Optional[Path]) -> None:
    if output is not None:
        text = ctx.files.read_text(output)
        res.output = str(output)
        res.tail = tail(text, output, TAIL_LINES)
        res.first_error = first_error(text)


def skipped(check: Check, reason: str) -> CheckResult:
    return CheckResult(check.name, check.suite, SKIP, 0.0, reason, check.description)


def run_checks(ctx: VerifyContext, checks: List[Check], report: Callable[[CheckResult], None]) -> List[CheckResult]:
    """Run ``checks`` (in suite order); call ``report`` as each one ends; return all results in order."""
    results: Dict[str, CheckResult] = {}
    lock = threading.Lock()

    def done(res: CheckResult) -> None:
        with lock:
            results[res.name] = res
            report(res)

    gates = [c for c in checks if c.gate]
    rest = [c for c in checks if not c.gate]
    for check in gates:
        res = run_one(ctx, check)
        done(res)
        if res.status == FAIL:
            for other in rest:
                done(skipped(other, f"not run: {check.name} failed"))
            return [results[c.name] for c in checks]

    concurrent = [c for c in rest if c.suite in CONCURRENT_SUITES]
    sequential = [c for c in rest if c.suite not in CONCURRENT_SUITES]
    pool = ThreadPoolExecutor(max_workers=max(1, len(concurrent)), thread_name_prefix="check")
    futures: Dict[str, Future] = {}
    try:
        # Quick checks first, background ones once those are through: a job that is
        # pending for resources blocks every later job in its partition (until the
        # backfill scheduler's next pass, 30 s), and the signal job holds a CPU for up to 30 s.
        quick = sorted((c for c in concurrent if not c.background), key=lambda c: (not c.early, c.wide))
        for batch in (quick, [c for c in concurrent if c.background]):
            for check in batch:
                fut = pool.submit(run_one, ctx, check)
                fut.add_done_callback(lambda f: done(f.result()))
                futures[check.name] = fut
            if batch is quick:
                for check in quick:
                    futures[check.name].result()
        for check in sequential:
            done(run_one(ctx, check))
        for fut in futures.values():
            fut.result()
    except BaseException:  # Ctrl-C: cancel our jobs, wake every waiting check, leave at once
        ctx.cancel_all()
        ctx.tracker.stop()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)  # also runs the last done() callbacks
    return [results[c.name] for c in checks]
