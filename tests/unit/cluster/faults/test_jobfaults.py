"""cluster/faults/jobfaults.py: the TimeLimit arithmetic, --signal parsing, which PreemptMode and
GraceTime slurmctld applies, and the commands `fault time-limit` / `fault preempt` run, over
a scripted Slurm client (no daemon)."""

from __future__ import annotations

import pytest

from provisioner.cluster.faults import jobfaults
from provisioner.cluster.faults.jobfaults import (Preemption, WarnSignal, clock_seconds, clock_text, grace_seconds,
                                           header_signal, new_time_limit, parse_signal, resolve_mode)
from provisioner.cluster.model.slurm import SlurmClient
from provisioner.errors import SimclusterError, UsageError
from tests.unit.cluster.fakes import ScriptedRunner


# -- time limits -----------------------------------------------------------------------------
@pytest.mark.parametrize("run_s, in_s, minutes", [
    (0, 90, 2),      # a fresh job: 90 s needs the 2nd minute
    (3, 90, 2),      # ends 117 s from now: at least 90
    (30, 90, 2),     # exactly 120 s from the start
    (31, 90, 3),     # one second too old for 2 minutes
    (0, 60, 1),      # a whole minute exactly
    (10, 0, 1),      # "now": the end of the current minute
    (0, 0, 1),       # never 0: Slurm reads 0 as no limit
    (3600, 120, 62),  # an hour in: the limit counts from the start
    (86000, 90, 1435),
])
def test_new_time_limit_is_the_smallest_whole_minute_reaching_in_seconds(run_s, in_s, minutes):
    assert new_time_limit(run_s, in_s) == minutes
    ends_in = minutes * 60 - run_s
    assert ends_in >= in_s or minutes == 1 and run_s > in_s  # reaches it...
    if minutes > 1:
        assert (minutes - 1) * 60 - run_s < in_s  # ...and one minute less would not


@pytest.mark.parametrize("text, seconds", [
    ("1-00:00:00", 86400), ("00:02:00", 120), ("05:00", 300), ("2-03:04:05", 183845),
    ("UNLIMITED", None), ("Partition_Limit", None), ("", None), ("90", None)])
def test_clock_seconds_reads_scontrols_durations(text, seconds):
    assert clock_seconds(text) == seconds


def test_clock_text_is_scontrols_format():
    assert [clock_text(s) for s in (86400, 120, 61, 183845)] == ["1-00:00:00", "00:02:00", "00:01:01", "2-03:04:05"]


def test_grace_seconds_reads_scontrol_and_sacctmgr():
    assert [grace_seconds(t) for t in ("30", "00:00:30", "00:02:00", "", "None")] == [30, 30, 120, 0, 0]


# -- --signal --------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    ("B:USR1@90", WarnSignal("USR1", 90, True, "B:USR1@90")),
    ("SIGUSR1@90", WarnSignal("USR1", 90, False, "SIGUSR1@90")),  # the book chapter's: steps only
    ("10@30", WarnSignal("USR1", 30, False, "10@30")),  # by number
    ("usr2", WarnSignal("USR2", 60, False, "usr2")),  # sbatch's default offset
    ("RB:TERM@5", WarnSignal("TERM", 5, True, "RB:TERM@5")),
    ("NOPE@3", None), ("B:USR1@x", None), ("", None)])
def test_parse_signal(value, expected):
    assert parse_signal(value) == expected


def test_header_signal_reads_sbatch_lines_before_the_first_command():
    script = "#!/bin/bash\n#SBATCH --time=24:00:00\n\n# a comment\n#SBATCH -N1 --signal B:USR1@90  # x\n" \
             "echo hi\n#SBATCH --signal=USR2@5\n"
    assert header_signal(script) == "B:USR1@90"
    assert header_signal("#!/bin/bash\n#SBATCH --signal=USR1\n#SBATCH --signal=USR2@9\n") == "USR2@9"
    assert header_signal("#!/bin/sh\n# This script was created by sbatch --wrap.\n\nsleep 9\n") is None


# -- which PreemptMode and GraceTime ---------------------------------------------------------
PART = ("low", "REQUEUE", 30)


def test_partition_prio_takes_the_partitions_mode_and_grace():
    assert resolve_mode("preempt/partition_prio", "CANCEL", PART, ("q", "SUSPEND", 99)) == \
        Preemption("REQUEUE", "partition 'low'", 30, "partition 'low'")


def test_partition_prio_falls_back_to_the_cluster_where_the_partition_says_nothing():
    assert resolve_mode("preempt/partition_prio", "CANCEL,GANG", ("p", "", 0), None).mode == "CANCEL"


def test_qos_takes_the_qoss_mode_and_grace_over_the_partition():
    got = resolve_mode("preempt/qos", "REQUEUE", PART, ("scavenger", "cancel", 120))
    assert got == Preemption("CANCEL", "QoS 'scavenger'", 120, "QoS 'scavenger'")


def test_qos_without_a_mode_of_its_own_takes_the_clusters():
    got = resolve_mode("preempt/qos", "REQUEUE", ("p", "CANCEL", 30), ("normal", "cluster", 0))
    assert (got.mode, got.mode_from, got.grace_s) == ("REQUEUE", "the cluster's PreemptMode", 0)
    # no accounting, no QoS: the cluster's mode, no grace
    assert resolve_mode("preempt/qos", "REQUEUE", PART, None).grace_s == 0


def test_preempt_none_is_off_and_mode_replaces_it_keeping_a_configured_grace():
    assert resolve_mode("preempt/none", "OFF", PART, None).mode == "OFF"
    assert resolve_mode("", "", PART, None).mode == "OFF"
    got = resolve_mode("preempt/none", "OFF", PART, ("q", "cluster", 0), override="requeue")
    assert got == Preemption("REQUEUE", "--mode", 30, "partition 'low'")
    assert resolve_mode("preempt/none", "OFF", PART, ("q", "", 7), override="cancel").grace_s == 7


def test_mode_wins_over_a_configured_one():
    assert resolve_mode("preempt/partition_prio", "REQUEUE", PART, None, override="cancel").mode == "CANCEL"


def test_gang_and_within_are_flags_not_modes():
    assert resolve_mode("preempt/qos", "SUSPEND,GANG", PART, ("q", "WITHIN,REQUEUE", 0)).mode == "REQUEUE"
    assert resolve_mode("preempt/partition_prio", "OFF", ("p", "GANG", 0), None).mode == "OFF"


# -- the commands, over a scripted client ----------------------------------------------------
SHOW_JOB = ("JobId=7 JobName=x JobState={state} Requeue={requeue} Restarts=0 RunTime=00:00:03 "
            "TimeLimit=1-00:00:00 Partition=low QOS=(null) NodeList=node1")
CONFIG = ("KillWait                = 5 sec\nPreemptMode             = {mode}\nPreemptType             = {ptype}\n"
          "AuthInfo                = socket=/x/munge.socket,cred_expire=10\n"
          "AccountingStorageType   = accounting_storage/none\nPreemptParameters       = {params}\n")


def client(state="RUNNING", requeue=1, script="#!/bin/bash\n#SBATCH --signal=B:USR1@90\nsleep 1\n",
           ptype="preempt/partition_prio", mode="REQUEUE", part="PartitionName=low GraceTime=0 PreemptMode=REQUEUE",
           params="(null)", show_rc=0):
    runner = ScriptedRunner({
        ("scontrol", "show", "job"): (show_rc, SHOW_JOB.format(state=state, requeue=requeue) if not show_rc else "",
                                      "slurm_load_jobs error: Invalid job id specified" if show_rc else ""),
        ("scontrol", "write", "batch_script"): (0, script, ""),
        ("scontrol", "show", "config"): (0, CONFIG.format(mode=mode, ptype=ptype, params=params), ""),
        ("scontrol", "show", "partition"): (0, part, ""),
        ("scontrol", "update"): (0, "", ""),
        ("scontrol", "requeue"): (0, "", ""),
        ("scancel",): (0, "", ""),
    })
    return SlurmClient(runner), runner


def test_time_limit_sets_minutes_and_says_when_the_signal_and_the_end_come():
    c, runner = client()
    moved = jobfaults.time_limit(c, "7", 90, "x")
    assert ["scontrol", "update", "JobId=7", "TimeLimit=2"] in runner.calls
    assert (moved.minutes, moved.ends_in) == (2, 117)
    text = moved.message
    assert "TimeLimit 1-00:00:00 -> 00:02:00" in text and "ends in 117 s" in text
    assert "SIGUSR1 to the batch shell is due 90 s before the end, in 27 s" in text
    assert "0-30 s from now" in text and "KillWait=5 s" in text and "warning" not in text


def test_time_limit_below_the_signal_offset_warns():
    c, _ = client()
    text = jobfaults.time_limit(c, "7", 30, "x").message
    assert "warning: --in 30 is less than the --signal offset (90 s)" in text


def test_time_limit_refuses_a_pending_an_unknown_and_a_bad_job():
    with pytest.raises(UsageError, match="job 7 is PENDING, not running"):
        jobfaults.time_limit(client(state="PENDING")[0], "7", 90, "x")
    with pytest.raises(UsageError, match="no job 7 on cluster 'x'"):
        jobfaults.time_limit(client(show_rc=1)[0], "7", 90, "x")
    with pytest.raises(UsageError, match="not a job id"):
        jobfaults.time_limit(client()[0], "7; rm -rf /", 90, "x")


def test_preempt_requeues_as_the_partition_says_with_slurms_commands():
    c, runner = client()
    text = jobfaults.preempt(c, "7", "x")
    assert ["scontrol", "requeue", "7"] in runner.calls
    assert not any(call[0] == "scancel" for call in runner.calls)  # no grace: no signal first
    assert "PreemptMode=REQUEUE (from partition 'low')" in text and "cred_expire+1 = 11 s" in text
    assert "sacct shows the run REQUEUED (sacct -D)" in text


def test_preempt_with_grace_signals_the_steps_first_then_requeues(monkeypatch):
    c, runner = client(part="PartitionName=low GraceTime=3 PreemptMode=REQUEUE")
    monkeypatch.setattr(jobfaults, "_wait_grace", lambda client, job_id, grace_s: None)
    jobfaults.preempt(c, "7", "x")
    acts = [call for call in runner.calls if call[0] == "scancel" or call[:2] == ["scontrol", "requeue"]]
    assert acts == [["scancel", "--signal=CONT", "7"], ["scancel", "--signal=TERM", "7"], ["scontrol", "requeue", "7"]]


def test_preempt_with_send_user_signal_sends_the_jobs_signal_to_the_batch_shell(monkeypatch):
    c, runner = client(part="PartitionName=low GraceTime=3 PreemptMode=REQUEUE", params="send_user_signal")
    monkeypatch.setattr(jobfaults, "_wait_grace", lambda client, job_id, grace_s: None)
    jobfaults.preempt(c, "7", "x")
    assert ["scancel", "--signal=USR1", "--batch", "7"] in runner.calls


def test_preempt_cancel_mode():
    c, runner = client()
    text = jobfaults.preempt(c, "7", "x", mode="cancel")
    assert ["scancel", "7"] in runner.calls and ["scontrol", "requeue", "7"] not in runner.calls
    assert "PreemptMode=CANCEL (from --mode)" in text


def test_preempt_refuses_mode_off_suspend_and_a_job_that_cannot_be_requeued():
    with pytest.raises(UsageError, match="PreemptMode is OFF") as exc:
        jobfaults.preempt(client(ptype="preempt/none", mode="OFF")[0], "7", "x")
    assert "--mode requeue" in exc.value.one_line()
    with pytest.raises(UsageError, match="SUSPEND"):
        jobfaults.preempt(client(part="PartitionName=low GraceTime=0 PreemptMode=SUSPEND")[0], "7", "x")
    c, runner = client(requeue=0)
    with pytest.raises(UsageError, match="cannot be requeued"):
        jobfaults.preempt(c, "7", "x")
    assert not any(call[0] == "scancel" or call[:2] == ["scontrol", "requeue"] for call in runner.calls)
    with pytest.raises(UsageError, match="--mode suspend"):
        jobfaults.preempt(client()[0], "7", "x", mode="suspend")


def test_a_failing_slurm_command_is_an_error_of_its_own():
    c, runner = client()
    runner.answers[("scontrol", "requeue")] = (1, "", "Requested operation is presently disabled for job 7")
    with pytest.raises(SimclusterError, match="scontrol requeue 7 failed: Requested operation"):
        jobfaults.preempt(c, "7", "x")


def test_parse_config_keeps_an_empty_value_to_its_own_line():
    # `scontrol show config` prints "PowerPlugin             = " with nothing after it.
    text = "PowerPlugin             = \nPreemptMode             = CANCEL\nKillWait                = 5 sec\n"
    assert jobfaults.parse_config(text) == {"PowerPlugin": "", "PreemptMode": "CANCEL", "KillWait": "5 sec"}


@pytest.mark.parametrize("states, ended", [
    (["SIGNALING", "RUNNING", "SIGNALING"], None),  # the grace signal being delivered: not an end
    (["RUNNING", "SIGNALING", "COMPLETING"], "COMPLETING"),  # its trap exited
    (["RUNNING", "COMPLETED"], "COMPLETED"),
    (["gone"], "gone"),
])
def test_grace_ends_only_on_a_state_that_is_an_end(monkeypatch, states, ended):
    seen = iter(states)
    last = {"state": states[-1]}

    def state(client, job_id):
        last["state"] = next(seen, last["state"])
        return last["state"]
    monkeypatch.setattr(jobfaults, "_still_running", state)
    assert jobfaults._wait_grace(None, "7", 2) == ended
