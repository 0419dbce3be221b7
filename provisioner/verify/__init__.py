"""`simcluster verify`: prove a cluster works with real multi-node jobs.

basic.py (Slurm basics) and training.py (DDP, FSDP, DeepSpeed, Megatron) define checks;
suites.py lists them; runner.py runs them with deadlines; report.py prints lines, a
table, JSON and JUnit. The jobs (workloads/) are written into
<state_dir>/verify/<timestamp>/<check>/ so a failure can point at the full output.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

from provisioner.verify.context import WORKLOADS_DIR, VerifyContext
from provisioner.verify.jobs import JobTracker
from provisioner.verify.runner import CheckResult, run_checks
from provisioner.verify.suites import SUITES, checks_for, parse_suites
from provisioner.verify.targets import target_for

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


def new_run_dir(runs_root: Path) -> Path:
    """<runs_root>/verify/<YYYYmmdd-HHMMSS>[-N]: one directory per verify run (runs_root is
    the state directory of a local cluster, the shared directory of a docker one)."""
    base = runs_root / "verify" / time.strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            # Jobs may run as another user (SlurmUser) on a rootless cluster: let them write.
            os.chmod(path, 0o777)
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def run_verify(name: str, suites: List[str], report: Callable[[CheckResult], None],
               timeout: Optional[float] = None, header: Callable[[str], None] = lambda s: None) -> VerifyRun:
    target = target_for(name)
    run_dir = new_run_dir(target.runs_root)
    # The training scripts go with the job files: the run directory is all a job needs
    # (a docker cluster sees only its shared directory), and it can be re-run by hand.
    shutil.copytree(WORKLOADS_DIR, run_dir / "workloads", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    tracker = JobTracker(target.client)
    ctx = VerifyContext(target=target, tracker=tracker, run_dir=run_dir, timeout=timeout,
                        job_prefix=f"verify-{run_dir.name}")
    where = "" if target.backend == "local" else f" = {target.cluster_path(run_dir)} in the containers"
    header(f"verifying {target.backend} cluster '{name}' ({len(target.spec.nodes)} nodes): suites "
           f"{','.join(suites)}; job files in {run_dir}{where}")
    t0 = time.monotonic()
    tracker.start()
    try:
        results = run_checks(ctx, checks_for(suites, ctx.spec), report)
    finally:
        tracker.stop()
    return VerifyRun(name, suites, results, time.monotonic() - t0, run_dir)
