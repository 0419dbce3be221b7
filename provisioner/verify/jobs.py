"""Submit verify's jobs to a cluster and follow them to the end, without ever hanging.

One JobTracker per verify run polls `squeue` for *all* jobs in flight with a single call
every POLL_S seconds (a dozen checks each polling on their own would keep a 2-core host
busy with squeue processes). Waiting always has a deadline; on expiry the job is
cancelled and the caller reports a failure with the job's output.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from provisioner.cluster.model.jobfiles import JobError  # noqa: F401  (checks import it from here)


POLL_S = 0.2
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}


@dataclass
class TaskState:
    """One line of squeue: a job, or one task of an array."""

    task_id: str
    state: str
    reason: str = ""


@dataclass
class JobView:
    """What the tracker last saw of a job (every task of it, for arrays)."""

    job_id: str
    tasks: Dict[str, TaskState] = field(default_factory=dict)
    gone: bool = False  # no longer listed (purged after MinJobAge)

    @property
    def states(self) -> List[str]:
        return [t.state for t in self.tasks.values()]

    @property
    def finished(self) -> bool:
        return self.gone or (bool(self.tasks) and all(s in FINAL_STATES for s in self.states))

    @property
    def summary(self) -> str:
        if not self.tasks:
            return "gone" if self.gone else "not seen yet"
        return ", ".join(f"{t.task_id}:{t.state}{'(' + t.reason + ')' if t.reason and t.reason != 'None' else ''}"
                         for t in sorted(self.tasks.values(), key=lambda t: t.task_id))


if TYPE_CHECKING:
    from provisioner.cluster.model.slurm import SlurmClient


class JobTracker:
    """Follows every job verify submitted with one squeue call per poll."""

    def __init__(self, client: "SlurmClient"):
        self.client = client
        self._views: Dict[str, JobView] = {}
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._stop = False

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="job-tracker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread:
            self._thread.join(timeout=5)

    @property
    def stopped(self) -> bool:
        return self._stop

    def watch(self, job_id: str) -> None:
        with self._cond:
            self._views.setdefault(job_id, JobView(job_id))
            self._cond.notify_all()

    def view(self, job_id: str) -> JobView:
        with self._cond:
            return self._views.get(job_id) or JobView(job_id)

    def active(self) -> List[str]:
        with self._cond:
            return [j for j, v in self._views.items() if not v.finished]

    # -- polling --------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not any(not v.finished for v in self._views.values()):
                    self._cond.wait(1.0)
                if self._stop:
                    return
                ids = [j for j, v in self._views.items() if not v.finished]
            self._poll(ids)
            with self._cond:
                self._cond.notify_all()
                self._cond.wait(self.client.poll_s)

    def _poll(self, ids: List[str]) -> None:
        # Keyed by %F, the array's base job id: %A is each element's own job id, and the
        # base id's record is just the element left in the array's record (often the last
        # to start), so waiting on it alone could end while other tasks still ran.
        fmt = "--format=%F|%i|%T|%r"
        proc = self.client.run(["squeue", "--noheader", "--array", "--states=all", f"--jobs={','.join(ids)}", fmt],
                               timeout=15)
        every_job = False
        if proc.returncode != 0:
            if "Invalid job id" not in proc.stderr:
                # A call that timed out or failed (a host so busy that one squeue takes more
                # than its limit, a docker exec under qemu's TCG): asked again at the next poll.
                return
            # One purged id makes squeue refuse the whole list: one listing of every job
            # instead, where the ids that are not listed are gone. (Asking for each alone was
            # a call per job: on a slow host minutes, in which jobs that ended were purged,
            # MinJobAge, before they were ever seen.)
            proc = self.client.run(["squeue", "--noheader", "--array", "--states=all", fmt], timeout=15)
            if proc.returncode != 0:
                return
            every_job = True
        seen: Dict[str, Dict[str, TaskState]] = {}
        for line in proc.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4:
                seen.setdefault(parts[0], {})[parts[1]] = TaskState(parts[1], parts[2].split()[0], parts[3])
        with self._cond:
            for job_id in ids:
                view = self._views[job_id]
                if job_id in seen:
                    view.tasks = seen[job_id]
                elif view.tasks or every_job:
                    view.gone = True  # purged after it ended

    # -- waiting --------------------------------------------------------------------------
    def wait(self, job_id: str, timeout: float,
             until: Optional[Callable[[JobView], bool]] = None) -> JobView:
        """Block until ``until(view)`` (default: the job finished) or ``timeout`` seconds.

        Raises TimeoutError (the caller cancels the job and reports what it printed).
        """
        self.watch(job_id)
        until = until or (lambda v: v.finished)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                view = self._views[job_id]
                if until(view):
                    return view
                if self._stop:
                    raise TimeoutError(f"job {job_id} still {view.summary}: verify was interrupted")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} still {view.summary} after {timeout:.0f}s")
                self._cond.wait(min(left, 1.0))


def tail(text: Optional[str], path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a job's output ``text`` read from ``path`` (or why there is none)."""
    if text is None:
        return f"(no output file: {path})"
    out = text.splitlines()[-lines:]
    return "\n".join(out) if out else f"(empty output file: {path})"


# "RuntimeError: ...", "torch.distributed.DistBackendError: ...", "slurmstepd: error: ..."
# (after an optional "[rank1]: " or srun --label "1: " prefix), and the C++/interpreter
# deaths that print no exception: "terminate called ...", "Fatal Python error: ...".
_ERROR_LINE = re.compile(r"^\s*(?:\[rank\d+\]:\s*|\d+:\s*)?"
                         r"(?:[\w.]+(?:Error|Exception)\b[^:(]*:|slurmstepd\S*: error:|srun: error:|error:"
                         r"|terminate called|Fatal Python error:|Segmentation fault)", re.I)
# Lines that follow a failure rather than cause it: SIGTERMed ranks, srun's step teardown,
# and torchrun's wrapper exception (its "Root Cause" block is read separately).
_NOISE = re.compile(r"SignalException|got signal: 15|Job step aborted|Terminating StepId|task \d+: (Terminated|Exited)"
                    r"|ChildFailedError")
# torchrun's summary of the first worker that died (host, rank, exit code), e.g. a SIGABRT.
_ROOT_CAUSE_FIELD = re.compile(r"^\s*(host|rank|exitcode)\s*:\s*(.+?)\s*$")


def torchrun_root_cause(text: str) -> str:
    """'rank 1 (local_rank: 0) on node2: exitcode -6 (pid: 777) (SIGABRT)' from torchrun's
    "Root Cause (first observed failure)" block, or ''."""
    idx = text.find("Root Cause (first observed failure)")
    if idx < 0:
        return ""
    fields: Dict[str, str] = {}
    for line in text[idx:].splitlines()[1:12]:
        m = _ROOT_CAUSE_FIELD.match(line)
        if m:
            fields.setdefault(m.group(1), " ".join(m.group(2).split()))
    if not fields:
        return ""
    return f"rank {fields.get('rank', '?')} on {fields.get('host', '?')}: exitcode {fields.get('exitcode', '?')}"


def first_error(text: Optional[str]) -> str:
    """The first line of a job's output that reads like the cause of a failure.

    With --kill-on-bad-exit the *other* ranks die last (SIGTERM tracebacks), so the tail
    of the output hides the rank that failed first; this line names it, followed by
    torchrun's own account of which worker died first when there is one.
    """
    if not text:
        return ""
    found = ""
    for line in text.splitlines():
        if _ERROR_LINE.match(line) and not _NOISE.search(line):
            found = line.strip()[:300]
            break
    cause = torchrun_root_cause(text)
    if cause:
        return f"{found} (torchrun: first failure {cause})" if found else f"torchrun: first failure {cause}"
    return found
