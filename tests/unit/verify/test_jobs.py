"""verify's JobTracker: how one poll reads squeue's answer, without a cluster."""

from __future__ import annotations

from types import SimpleNamespace

from provisioner.verify.jobs import JobTracker


class FakeClient:
    """Answers each squeue call with the next (returncode, stdout, stderr); records the --jobs."""

    poll_s = 0.2

    def __init__(self, answers):
        self.answers, self.asked = list(answers), []

    def run(self, argv, timeout=None):
        self.asked.append(next((a.split("=", 1)[1] for a in argv if a.startswith("--jobs=")), "*"))
        rc, out, err = self.answers.pop(0)
        return SimpleNamespace(returncode=rc, stdout=out, stderr=err)


def test_a_squeue_that_times_out_is_asked_again_at_the_next_poll_not_once_per_job():
    client = FakeClient([(124, "", "squeue did not finish within 15s"),
                         (0, "3|3|OUT_OF_MEMORY|OutOfMemory\n5|5|RUNNING|None\n", "")])
    tracker = JobTracker(client)
    for job in ("3", "5"):
        tracker.watch(job)
    tracker._poll(["3", "5"])
    assert client.asked == ["3,5"]  # one call, no per-job sequence after a timeout
    assert tracker.view("3").summary == "not seen yet"
    tracker._poll(["3", "5"])
    assert tracker.view("3").finished and tracker.view("3").states == ["OUT_OF_MEMORY"]
    assert not tracker.view("5").finished


def test_a_purged_job_makes_squeue_refuse_the_list_then_one_listing_of_every_job_decides():
    client = FakeClient([(1, "", "slurm_load_jobs error: Invalid job id specified"),
                         (0, "5|5|RUNNING|None\n9|9|PENDING|Priority\n", "")])
    tracker = JobTracker(client)
    for job in ("3", "5"):
        tracker.watch(job)
    tracker._poll(["3", "5"])
    assert client.asked == ["3,5", "*"]  # one more call, not one per job
    assert tracker.view("3").gone and tracker.view("3").finished
    assert tracker.view("5").states == ["RUNNING"] and not tracker.view("5").finished
