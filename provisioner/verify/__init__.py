"""`simcluster verify`: prove a cluster works with real multi-node jobs.

basic.py (Slurm basics), accounting.py (sacct), versions.py (release-specific behaviour),
signals.py (a job's end and preemption, moved to now), training.py (DDP, FSDP, DeepSpeed,
Megatron) and faults.py (the faults suite) define checks; suites.py lists them; runner.py runs them with deadlines; report.py prints lines,
a table, JSON and JUnit. A check gets a VerifyContext (context.py) over a VerifyTarget
(targets.py: the cluster's client, spec and job-file transport), submits through
the run's JobTracker (jobs.py) and ends with an Outcome (outcome.py). Each run's job files,
with a copy of workloads/, go in <job root>/verify/<timestamp>/ (the placement's job root:
the state directory on local, the shared directory on docker), one directory per check,
so a failure can point at the full output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

from provisioner.verify.check_runner import CheckResult, run_checks
from provisioner.verify.context import WORKLOADS_DIR, VerifyContext
from provisioner.verify.jobs import JobTracker
from provisioner.verify.suites import SUITES, checks_for, parse_suites
from provisioner.verify.targets import VerifyTarget, target_for

__all__ = ["VerifyRun", "run_verify", "parse_suites", "SUITES"]


@dataclass
class VerifyRun:
    cluster: str
    suites: List[str]
    results: List[CheckResult]
    seconds: float
    run_dir: Path

    @property
    def failed(self) -> bool:
        return any(r.status == "FAIL" for r in self.results)


def run_verify(name: str, suites: List[str], report: Callable[[CheckResult], None],
               timeout: Optional[float] = None, header: Callable[[str], None] = lambda s: None,
               target: Optional[VerifyTarget] = None) -> VerifyRun:
    """Run ``suites`` on cluster ``name`` (or on ``target``, e.g. a deployed cluster over SSH)."""
    target = target or target_for(name)
    run_dir = target.files.new_run_dir()
    # The training scripts go with the job files: the run directory is all a job needs
    # (a docker cluster sees only its shared directory), and it can be re-run by hand.
    target.files.copy_tree(WORKLOADS_DIR, run_dir / "workloads")
    tracker = JobTracker(target.client)
    ctx = VerifyContext(target=target, tracker=tracker, run_dir=run_dir, timeout=timeout,
                        job_prefix=f"verify-{run_dir.name}")
    seen_as = target.cluster_path(run_dir)
    where = "" if seen_as == str(run_dir) else f" = {seen_as} on the nodes"
    checks = checks_for(suites, ctx.spec)
    # The suites that run here: "all" names rest, which has no check on a cluster without it.
    # One named on purpose says so (e.g. --suite rest on a cluster made without --rest).
    for s in getattr(suites, "named", ()):
        if not any(c.suite == s for c in checks):
            header(f"suite {s}: no check of it applies to this cluster (see docs/verify.md)")
    suites = [s for s in suites if any(c.suite == s for c in checks)]
    header(f"verifying {target.description} ({len(target.spec.nodes)} nodes): suites "
           f"{','.join(suites) or '(none that apply: the gates only)'}; job files in {run_dir}{where}")
    t0 = time.monotonic()
    tracker.start()
    try:
        results = run_checks(ctx, checks, report)
    finally:
        tracker.stop()
    return VerifyRun(name, suites, results, time.monotonic() - t0, run_dir)
