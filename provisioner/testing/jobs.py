"""Batch jobs for tests: submit a script with `sbatch --parsable`, follow it to its end.

A Job is read from `scontrol show job -o` (one call gives state, exit code, output path,
batch host and restart count); after slurmctld purged it (MinJobAge), from `sacct` on
accounting clusters. Waiting polls through the cluster's SlurmClient with a backoff and
always has a deadline: a timeout says what was awaited and the last state seen, and
cancels the job so that nothing keeps running after the test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Protocol, Sequence

from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.slurm import SlurmClient
from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.verify.jobs import FINAL_STATES

# States a job passes through on its way to the end (a requeued one goes back to PENDING).
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "RESIZING",
                 "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT")
_OUTPUT_ARG = re.compile(r"^(-o|--output)(=|$)")
_OUTPUT_LINE = re.compile(r"^#SBATCH\s+(-o\b|--output\b)", re.M)


class JobTimeout(AssertionError):
    """A job did not reach the awaited state in time (an AssertionError: the test fails)."""


class SbatchError(AssertionError):
    """sbatch refused the script: the test fails with sbatch's own message."""


def wants_own_output(script_text: str, sbatch_args: Sequence[str]) -> bool:
    """True when the script or the arguments already say where its stdout goes."""
    return any(_OUTPUT_ARG.match(a) for a in sbatch_args) or bool(_OUTPUT_LINE.search(script_text))


class JobsCluster(Protocol):
    """What a Job reads of the cluster it runs on (testing/handle.py's SlurmCluster is one):
    named here, so that the handle imports the jobs and not the other way round."""

    name: str
    spec: Any
    client: SlurmClient
    cluster: Cluster

    def host_path(self, cluster_path: str) -> Optional[Path]: ...


class Job:
    """A batch job: ``id`` (int), ``state`` (Slurm's name, e.g. "COMPLETED"), ``exit_code``
    (int), ``output`` (its stdout as text), ``restarts``, ``nodes``, ``batch_host``, and ``dir``
    (the directory on this host with its script and default output)."""

    def __init__(self, cluster: JobsCluster, job_id: int, job_dir: Path, script_name: str):
        self.cluster = cluster
        self.id = job_id
        self.dir = job_dir
        self.script_name = script_name
        self.info: Dict[str, str] = {}  # the last `scontrol show job -o` fields seen
        self.state = "PENDING"
        self.exit_code: Optional[int] = None
        self.signal: Optional[int] = None
        self.restarts = 0
        self.reason = ""
        self._stdout_path = ""  # as the cluster sees it
        self._batch_host = ""

    def __repr__(self) -> str:
        return f"Job(id={self.id}, state={self.state!r}, exit_code={self.exit_code})"

    @property
    def logs_dir(self) -> Path:
        """The directory on this host holding the job's script and (default) output."""
        return self.dir

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def batch_host(self) -> str:
        return self._batch_host

    @property
    def nodes(self) -> List[str]:
        """The nodes of the job's (last) allocation, expanded ([] while pending)."""
        node_list = self.info.get("NodeList", "")
        if not node_list or node_list == "(null)":
            return []
        res = self.cluster.client.run(["scontrol", "show", "hostnames", node_list], timeout=15)
        return res.stdout.split() if res.ok else [node_list]

    def refresh(self) -> "Job":
        """Ask slurmctld (then sacct) for the job's current state."""
        info = self.cluster.client.show_job(str(self.id))
        if info:
            self.info = info
            self.state = info.get("JobState", "?")
            self.reason = info.get("Reason", "")
            self.restarts = int(info.get("Restarts", "0") or 0)
            self._set_exit(info.get("ExitCode", ""))
            self._stdout_path = info.get("StdOut", self._stdout_path)
            if info.get("BatchHost") and info.get("BatchHost") != "(null)":
                self._batch_host = info["BatchHost"]
        elif self.cluster.spec.accounting:
            self._from_sacct()
        return self

    def _set_exit(self, text: str) -> None:
        code, _, sig = text.partition(":")
        if code.strip().lstrip("-").isdigit():
            self.exit_code = int(code)
            self.signal = int(sig) if sig.strip().isdigit() else None

    def _from_sacct(self) -> None:
        res = self.cluster.client.run(["sacct", "-X", "-n", "-P", "-j", str(self.id),
                                       "--format=State,ExitCode,NodeList"], timeout=15)
        rows = [line.split("|") for line in res.stdout.splitlines() if line.count("|") == 2] if res.ok else []
        if rows:
            state, exit_code, nodes = rows[-1]
            self.state = state.split()[0]
            self._set_exit(exit_code)
            self.info.setdefault("NodeList", nodes)

    def wait(self, timeout: float = 300.0, until: Iterable[str] = FINAL_STATES, cancel: bool = True) -> "Job":
        """Block until the job's state is one of ``until`` (default: it ended); on timeout,
        cancel it (unless ``cancel=False``) and raise JobTimeout naming the last state seen."""
        wanted = set(until)

        def check():
            self.refresh()
            return self.state in wanted, f"{self.state}{self._reason_note()}"

        try:
            poll_until(check, timeout, first_delay=0.05, max_delay=max(0.5, self.cluster.client.poll_s))
        except WaitTimeout as exc:
            what = "a final state" if wanted == set(FINAL_STATES) else " or ".join(sorted(wanted))
            if cancel:
                self.cluster.client.scancel(str(self.id))
            raise JobTimeout(f"job {self.id} ({self.script_name}) on cluster '{self.cluster.name}' did not reach "
                             f"{what} within {timeout:.0f}s; last state seen: {exc.last_seen}, restarts "
                             f"{self.restarts}{' (cancelled it)' if cancel else ''}") from None
        return self

    def _reason_note(self) -> str:
        return f" (reason: {self.reason})" if self.reason and self.reason != "None" else ""

    @property
    def output_path(self) -> Optional[Path]:
        """The job's stdout file on this host, when the cluster keeps it where this host sees it."""
        return self.cluster.host_path(self._stdout_path) if self._stdout_path else None

    @property
    def output(self) -> str:
        """The job's stdout as text ('' when it wrote none yet)."""
        if not self._stdout_path:
            self.refresh()
        path = self._stdout_path
        if not path:
            return ""
        local = self.cluster.host_path(path)
        if local is not None:
            try:
                return local.read_text(errors="replace")
            except OSError:
                return ""
        # Elsewhere in the cluster (a node's own disk): read it on the machine that ran it.
        text = self.cluster.cluster.runner(self._batch_host or "controller").read_text(path)
        return text or ""

    def cancel(self) -> None:
        self.cluster.client.scancel(str(self.id))
