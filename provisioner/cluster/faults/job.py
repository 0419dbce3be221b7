"""`fault time-limit JOB --in S` and `fault preempt JOB`: faults of one job, through
slurmctld (jobfaults.py has them in full). They change only the job, never the cluster or
its state file, so they need no lock: their callers load the cluster without it (a
GraceTime wait holds up no other command), as `status` and `verify` do."""

from __future__ import annotations

from typing import Optional

from provisioner.cluster.faults import jobfaults
from provisioner.cluster.faults.record import check_can_inject
from provisioner.cluster.model.handle import Cluster
from provisioner.progress import Progress


def time_limit(c: Cluster, job_id: str, seconds: int) -> str:
    """The running job ends in about ``seconds`` (TIMEOUT), its --signal at its offset before that."""
    check_can_inject(c)
    return jobfaults.time_limit(c.client, job_id, int(seconds), c.name).message


def preempt(c: Cluster, job_id: str, mode: Optional[str] = None, progress: Progress = lambda line: None) -> str:
    """As slurmctld's preemption does it: GraceTime, the signal, then requeue or cancel."""
    check_can_inject(c)
    return jobfaults.preempt(c.client, job_id, c.name, mode, progress)
