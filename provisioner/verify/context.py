"""What every check needs: the cluster, a Slurm client, the job tracker, a run directory."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from provisioner.cluster.model.jobfiles import JobFiles
from provisioner.cluster.model.slurm import SlurmClient, SlurmError
from provisioner.config.types import ClusterSpec
from provisioner.verify.jobs import JobError, JobTracker

if TYPE_CHECKING:
    from provisioner.verify.targets import VerifyTarget

WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "workloads"
_PLACEHOLDER = re.compile(r"@@([A-Z_]+)@@")


def free_port() -> int:
    """A TCP port nobody listens on right now (for a job's MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_template(name: str, values: Dict[str, object]) -> str:
    """workloads/<name> with every @@KEY@@ replaced (a missing key is an error, not a blank)."""
    text = (WORKLOADS_DIR / name).read_text()

    def sub(m: "re.Match[str]") -> str:
        if m.group(1) not in values:
            raise KeyError(f"{name}: no value for @@{m.group(1)}@@")
        return str(values[m.group(1)])
    return _PLACEHOLDER.sub(sub, text)


@dataclass
class Submitted:
    """A job verify submitted: its id, directory and output file."""

    job_id: str
    workdir: Path
    output: Path


@dataclass
class VerifyContext:
    target: "VerifyTarget"
    tracker: JobTracker
    run_dir: Path  # on this host; the cluster sees it at cluster_path(run_dir)
    timeout: Optional[float] = None  # --timeout: per-check limit, overrides the defaults
    job_prefix: str = "scv"
    jobs: List[str] = field(default_factory=list)
    _dirs: set = field(default_factory=set)
    # The target's parts the checks use most, under short names (set from ``target``).
    spec: ClusterSpec = field(init=False)
    client: SlurmClient = field(init=False)
    files: JobFiles = field(init=False)  # the job-file transport: job scripts and outputs go through it

    def __post_init__(self) -> None:
        self.spec, self.client, self.files = self.target.spec, self.target.client, self.target.files

    def read(self, path: Path) -> str:
        """A job file's text ("" while it does not exist)."""
        return self.files.read_text(path) or ""

    def cluster_path(self, host_path: Path) -> str:
        """``host_path`` (under run_dir) as the cluster's jobs see it."""
        return self.target.cluster_path(host_path)

    def workload(self, script: str) -> str:
        """A workloads/ script as the jobs see it (run_verify copies them into run_dir)."""
        return self.cluster_path(self.run_dir / "workloads" / script)

    @property
    def node_names(self) -> List[str]:
        return [n.name for n in self.spec.nodes]

    def limit(self, default: float) -> float:
        return float(self.timeout) if self.timeout else default

    def check_dir(self, check: str) -> Path:
        d = self.run_dir / check.replace(".", "-")
        if d not in self._dirs:
            self.files.make_dir(d)
            self._dirs.add(d)
        return d

    def time_minutes(self, seconds: float) -> int:
        """Slurm --time for a job verify will wait ``seconds`` for: a backstop past our own limit."""
        return max(1, int(seconds // 60) + 1)

    def submit(self, check: str, script_text: str, args: Sequence[str] = (), env: Optional[Dict[str, str]] = None,
               name: str = "job.sh", output: Optional[str] = None) -> Submitted:
        """Write ``script_text`` into the check's directory and sbatch it there."""
        workdir = self.check_dir(check)
        script = workdir / name
        self.files.write_text(script, script_text, 0o755)
        out_name = output or f"{script.stem}-%j.out"
        try:
            job_id = self.client.sbatch(self.cluster_path(script),
                                    [f"--job-name={self.job_prefix}-{check}",
                                     f"--output={self.cluster_path(workdir / out_name)}",
                                     "--chdir", self.cluster_path(workdir), *args], env=env)
        except SlurmError as exc:
            raise JobError(str(exc)) from None
        self.jobs.append(job_id)
        self.tracker.watch(job_id)
        return Submitted(job_id, workdir, workdir / out_name.replace("%j", job_id))

    def wait(self, job: Submitted, timeout: float, until=None):
        """Wait for the job; on timeout cancel it and raise JobError with its output."""
        try:
            return self.tracker.wait(job.job_id, timeout, until)
        except TimeoutError as exc:
            self.client.scancel(job.job_id)
            raise JobError(f"timed out: {exc}; cancelled it", job.output) from None

    def wait_ok(self, job: Submitted, timeout: float) -> None:
        """Wait for the job to finish and require COMPLETED (exit 0) for every task."""
        view = self.wait(job, timeout)
        bad = [s for s in view.states if s != "COMPLETED"]
        if bad or view.gone and not view.tasks:
            raise JobError(f"job {job.job_id} ended {view.summary}", job.output)

    def cancel_all(self) -> None:
        """scancel whatever verify submitted that still runs (after a failure or Ctrl-C)."""
        self.client.scancel(*self.tracker.active())

