"""`simcluster verify`: prove a cluster works with real multi-node jobs.

basic.py (Slurm basics) and training.py (DDP, FSDP, DeepSpeed, Megatron) define checks;
suites.py lists them; runner.py runs them with deadlines; report.py prints lines, a
table, JSON and JUnit. The jobs (workloads/) are written into
<state_dir>/verify/<timestamp>/<check>/ so a failure can point at the full output.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

from provisioner.errors import UsageError
from provisioner.providers.local import load_state
from provisioner.verify.context import VerifyContext
from provisioner.verify.jobs import JobTracker, SlurmClient
from provisioner.verify.runner import CheckResult, run_checks
from provisioner.verify.suites import SUITES, checks_for, parse_suites

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


def new_run_dir(state_root: Path) -> Path:
    """<state_dir>/verify/<YYYYmmdd-HHMMSS>[-N]: one directory per verify run."""
    base = state_root / "verify" / time.strftime("%Y%m%d-%H%M%S")
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
    state = load_state(name)
    if state.backend != "local":
        raise UsageError(f"verify runs on the local backend; '{name}' is a {state.backend} cluster")
    run_dir = new_run_dir(Path(state.root))
    client = SlurmClient(state.layout.slurm_conf)
    tracker = JobTracker(client)
    ctx = VerifyContext(state=state, client=client, tracker=tracker, run_dir=run_dir, timeout=timeout,
                        job_prefix=f"verify-{run_dir.name}")
    header(f"verifying cluster '{name}' ({len(state.cluster_spec.nodes)} nodes): suites {','.join(suites)}; "
           f"job files in {run_dir}")
    t0 = time.monotonic()
    tracker.start()
    try:
        results = run_checks(ctx, checks_for(suites, ctx.spec), report)
    finally:
        tracker.stop()
    return VerifyRun(name, suites, results, time.monotonic() - t0, run_dir)
