"""The accounting check for `verify`: a finished job must show up in sacct, COMPLETED, with its node.

This is what submitit and snakemake's Slurm executor rely on: they read a job's final
state from `sacct`, and a job sacct does not know stays UNKNOWN to them.
"""

from __future__ import annotations

from typing import Optional, Tuple

from provisioner.cluster.model.slurm import SlurmClient
from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.config.types import ClusterSpec

SACCT_FORMAT = "--format=JobID,JobName,State,ExitCode,NodeList"
JOB_NAME = "simcluster-acct-check"


def _sacct_row(client: SlurmClient, job_id: str) -> Optional[Tuple[str, str, str, str]]:
    """(name, state, exit code, node list) of the job's allocation as sacct reports it, or None."""
    proc = client.run(["sacct", "-n", "-P", "-X", "-j", job_id, SACCT_FORMAT], timeout=15)
    for line in proc.stdout.splitlines():
        fields = line.split("|")
        if len(fields) == 5 and fields[0] == job_id:
            return fields[1], fields[2], fields[3], fields[4]
    return None


def check_accounting(client: SlurmClient, spec: ClusterSpec, timeout: float = 60.0) -> Tuple[bool, str]:
    """Submit a tiny job with ``client`` (local or in a container) and wait until sacct
    reports it COMPLETED on a node.

    Returns (ok, detail); never raises for a cluster that misbehaves, so a verify report
    can show the detail next to the other checks.
    """
    if not spec.accounting:
        return False, "accounting is not enabled for this cluster (simcluster up --accounting)"
    sub = client.run(["sbatch", "--parsable", "-N1", "-J", JOB_NAME, "-o", "/dev/null", "--wrap", "true"],
                     timeout=15)
    if sub.returncode != 0:
        return False, f"sbatch failed: {sub.stderr.strip()}"
    job_id = sub.stdout.strip().split(";")[0]
    last: Optional[Tuple[str, str, str, str]] = None

    def recorded() -> Tuple[bool, Optional[Tuple[bool, str]]]:
        nonlocal last
        last = _sacct_row(client, job_id) or last
        # Until the job's start record arrives (it can trail a short job's end by ~1 s),
        # sacct shows a placeholder named 'allocation' with the batch host only.
        name, state, code, nodes = last or ("", "", "", "")
        if state == "COMPLETED" and name == JOB_NAME and nodes not in ("", "None assigned"):
            return True, (True, f"job {job_id} COMPLETED on {nodes} (exit code {code}) according to sacct")
        if state.split(" ")[0] in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return True, (False, f"job {job_id} ended {state} (exit code {code}) according to sacct")
        return False, None
    try:
        return poll_until(recorded, timeout, first_delay=0.2, max_delay=0.2)
    except WaitTimeout:
        pass
    seen = f"sacct last showed {last[1]}" if last else "sacct never showed it"
    return False, f"job {job_id} not recorded as COMPLETED within {timeout:.0f}s ({seen})"
