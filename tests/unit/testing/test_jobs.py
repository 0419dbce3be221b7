"""Batch jobs for tests (provisioner/testing/jobs.py): where output goes, what
`scontrol show job` and `sacct` say, and waiting with a deadline, against a fake client."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from provisioner.cluster.model.command_runner import Result
from provisioner.testing.jobs import Job, JobTimeout, wants_own_output
from tests.unit.testing.conftest import FakeClient


@pytest.mark.parametrize("text, args, expected", [
    ("#!/bin/bash\necho hi\n", [], False),
    ("#!/bin/bash\n#SBATCH --output=out.txt\n", [], True),
    ("#!/bin/bash\n#SBATCH -o out.txt\n", [], True),
    ("#!/bin/bash\n#SBATCH --open-mode=append\n", [], False),
    ("#!/bin/bash\n# SBATCH --output=commented.txt\n", [], False),
    ("#!/bin/bash\n", ["--output=x.out"], True),
    ("#!/bin/bash\n", ["-o", "x.out"], True),
    ("#!/bin/bash\n", ["--error=x.err", "--nodes=2"], False),
])
def test_wants_own_output(text, args, expected):
    assert wants_own_output(text, args) is expected


class FakeHandle:
    """The SlurmCluster side a Job reads: its client, spec, name and host paths."""

    def __init__(self, client: FakeClient, accounting: bool = False, host_dir: Path = None):
        self.client = client
        self.spec = SimpleNamespace(accounting=accounting)
        self.name = "c1"
        self.host_dir = host_dir

    def host_path(self, cluster_path: str):
        return self.host_dir / Path(cluster_path).name if self.host_dir else None


def job_with(*infos, accounting=False, outputs=None, host_dir=None) -> Job:
    client = FakeClient(jobs={"7": list(infos)}, outputs=outputs)
    return Job(FakeHandle(client, accounting, host_dir), 7, Path("/tmp/job-x"), "train.sh")


def test_refresh_reads_scontrol_fields():
    job = job_with({"JobState": "FAILED", "ExitCode": "3:0", "Restarts": "2", "Reason": "NonZeroExitCode",
                    "BatchHost": "node2", "StdOut": "/shared/slurm-7.out", "NodeList": "node[1-2]"}).refresh()
    assert (job.state, job.exit_code, job.signal, job.restarts) == ("FAILED", 3, 0, 2)
    assert job.batch_host == "node2" and job.finished and job.reason == "NonZeroExitCode"


def test_refresh_killed_by_a_signal_and_no_batch_host_yet():
    job = job_with({"JobState": "CANCELLED", "ExitCode": "0:9", "BatchHost": "(null)"}).refresh()
    assert (job.exit_code, job.signal, job.batch_host) == (0, 9, "")


def test_refresh_pending_has_no_exit_code_and_no_nodes():
    job = job_with({"JobState": "PENDING", "ExitCode": "", "NodeList": "(null)"}).refresh()
    assert job.exit_code is None and not job.finished and job.nodes == []


def test_refresh_after_the_purge_asks_sacct_on_accounting_clusters():
    sacct = Result(["sacct"], 0, "COMPLETED|0:0|node[1-2]\nCANCELLED by 0|0:15|node1\n")
    job = job_with({}, accounting=True, outputs={"sacct": sacct}).refresh()
    assert (job.state, job.exit_code, job.signal) == ("CANCELLED", 0, 15)  # the last row, first word
    assert job.info["NodeList"] == "node1"


def test_refresh_after_the_purge_without_accounting_keeps_what_it_knew():
    job = job_with({}).refresh()
    assert job.state == "PENDING" and not any(c[0] == "run" for c in job.cluster.client.calls)


def test_wait_returns_once_the_job_ended():
    job = job_with({"JobState": "PENDING"}, {"JobState": "RUNNING"}, {"JobState": "COMPLETED", "ExitCode": "0:0"})
    assert job.wait(timeout=30) is job
    assert job.state == "COMPLETED" and job.exit_code == 0


def test_wait_until_another_state():
    job = job_with({"JobState": "PENDING"}, {"JobState": "RUNNING"})
    job.wait(timeout=30, until=["RUNNING"])
    assert job.state == "RUNNING"


def test_wait_times_out_naming_the_last_state_and_cancels():
    job = job_with({"JobState": "PENDING", "Reason": "Resources"})
    with pytest.raises(JobTimeout) as exc:
        job.wait(timeout=0.05)
    assert "job 7 (train.sh) on cluster 'c1' did not reach a final state" in str(exc.value)
    assert "last state seen: PENDING (reason: Resources)" in str(exc.value) and "(cancelled it)" in str(exc.value)
    assert ("scancel", "7") in job.cluster.client.calls


def test_wait_without_cancel_leaves_the_job():
    job = job_with({"JobState": "PENDING"})
    with pytest.raises(JobTimeout, match="RUNNING within") as exc:
        job.wait(timeout=0.05, until=["RUNNING"], cancel=False)
    assert "cancelled" not in str(exc.value)
    assert not any(c[0] == "scancel" for c in job.cluster.client.calls)


def test_output_read_on_this_host(tmp_path):
    (tmp_path / "slurm-7.out").write_text("hello\n")
    job = job_with({"JobState": "COMPLETED", "StdOut": "/shared/slurm-7.out"}, host_dir=tmp_path)
    assert job.output == "hello\n"
    assert job.output_path == tmp_path / "slurm-7.out"


def test_output_not_written_yet_is_empty(tmp_path):
    job = job_with({"JobState": "PENDING", "StdOut": "/shared/slurm-7.out"}, host_dir=tmp_path)
    assert job.output == ""
