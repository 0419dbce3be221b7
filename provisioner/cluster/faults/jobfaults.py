"""Faults of one job, in seconds: `fault time-limit` and `fault preempt` (docs/faults.md).

A production job is told to checkpoint in two ways: its ``--signal`` some seconds before
its time limit (``--time=24:00:00 --signal=B:USR1@90``), and preemption (the job is
requeued or cancelled for a higher-priority one, after a GraceTime that starts with a
SIGTERM). Both take hours to happen by themselves; these faults make them happen now,
with Slurm's own commands only (so they work the same on every backend, and on a
deployed cluster, through a SlurmClient):

time-limit  ``scontrol update JobId=N TimeLimit=M`` (root may raise or lower it): M is
            the smallest whole-minute limit whose end is at least SECONDS from now.
            slurmctld then sends the job's ``--signal`` and ends it TIMEOUT itself,
            exactly as at hour 24. Precision, from slurmctld's source (22.05): time
            limits are whole minutes; its time-limit pass runs every 30 s
            (PERIODIC_TIMEOUT, not a setting) and sends the ``--signal`` at the first
            pass with at most offset+30 s left, ends the job at the first pass after
            its end (SIGTERM, SIGKILL KillWait later).
preempt     what slurmctld's preemption does (preempt.c, slurm_job_preempt): with a
            GraceTime, SIGCONT + SIGTERM to the job's steps (or, with
            PreemptParameters=send_user_signal, its ``--signal``), then after GraceTime
            the requeue or cancel: ``scancel --signal``, ``scontrol requeue``,
            ``scancel``. So sacct records REQUEUED or CANCELLED, where Slurm's own
            preemption records PREEMPTED.

Which mode and GraceTime apply is read from the cluster as slurmctld decides it
(``resolve_mode``): the PreemptType plugin picks the source, the QoS's (preempt/qos) or
the partition's (preempt/partition_prio), falling back to the cluster's PreemptMode.
"""

from __future__ import annotations

import math
import re
import signal as _signal
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from provisioner.cluster.model.poll import WaitTimeout, poll_until
from provisioner.cluster.model.slurm import SlurmClient, parse_oneliner, parse_show_config
from provisioner.errors import SimclusterError, UsageError

# slurmctld's time-limit pass: PERIODIC_TIMEOUT in slurmctld.h (22.05 and later), compiled in.
PASS_S = 30
# What --signal means without @offset (sbatch's default).
DEFAULT_SIGNAL_OFFSET = 60
MODES = ("requeue", "cancel")
_JOB_ID = re.compile(r"^\d+(?:[_+]\d+)?$")


# ---------------------------------------------------------------- Slurm values (pure)

def clock_seconds(text: str) -> Optional[int]:
    """Seconds in a duration as scontrol/sacctmgr print it ('1-00:00:00', '00:02:00', '05:00');
    None for UNLIMITED, Partition_Limit and other words."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", (text or "").strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def grace_seconds(text: str) -> int:
    """A GraceTime: seconds as `scontrol show partition` prints it ('30'), or a duration as
    sacctmgr does ('00:00:30'); 0 when there is none."""
    text = (text or "").strip()
    return int(text) if text.isdigit() else clock_seconds(text) or 0


def clock_text(seconds: int) -> str:
    """Seconds as scontrol prints a time limit: '1-00:00:00', '00:02:00'."""
    days, rest = divmod(int(seconds), 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


@dataclass(frozen=True)
class WarnSignal:
    """A job's ``--signal``: which signal, how long before the end, to whom."""

    name: str  # "USR1"
    offset: int  # seconds before the end
    batch: bool  # B: the batch shell only; else the job's steps only (never the batch shell)
    text: str  # as written

    @property
    def to(self) -> str:
        return "the batch shell" if self.batch else "the job steps (not the batch shell)"


def parse_signal(value: str) -> Optional[WarnSignal]:
    """sbatch's ``--signal=[{R|B}:]<sig_num>[@sig_time]`` ('B:USR1@90', 'SIGUSR1@90', '10@90',
    'USR1'); None when it is not one."""
    m = re.fullmatch(r"(?:([RBrb]+):)?([A-Za-z0-9]+)(?:@(\d+))?", value.strip())
    if not m:
        return None
    flags, sig, offset = m.groups()
    if sig.isdigit():
        try:
            name = _signal.Signals(int(sig)).name[3:]
        except ValueError:
            return None
    else:
        name = sig.upper()[3:] if sig.upper().startswith("SIG") else sig.upper()
        if not hasattr(_signal, f"SIG{name}"):
            return None
    return WarnSignal(name, int(offset) if offset else DEFAULT_SIGNAL_OFFSET, "B" in (flags or "").upper(), value)


def new_time_limit(run_s: int, in_s: float) -> int:
    """The smallest whole-minute TimeLimit whose end is at least ``in_s`` seconds from now, for
    a job that has run ``run_s`` seconds (RunTime: time suspended does not count, as it does
    not for the end). At least 1: Slurm takes 0 as no limit."""
    return max(1, math.ceil((run_s + in_s) / 60))


parse_config = parse_show_config  # the one parser, in cluster/model/slurm.py


def _mode_of(text: Optional[str]) -> str:
    """'REQUEUE,GANG' -> 'REQUEUE'; '', 'cluster' (a QoS without one) and None -> ''."""
    modes = [m.strip().upper() for m in (text or "").split(",") if m.strip()]
    modes = [m for m in modes if m not in ("GANG", "WITHIN", "CLUSTER")]
    return modes[0] if modes else ""


@dataclass(frozen=True)
class Preemption:
    """How a job is preempted: the mode and GraceTime, and where each came from."""

    mode: str  # REQUEUE, CANCEL, SUSPEND, OFF
    mode_from: str  # "partition 'low'", "QoS 'scavenger'", "the cluster's PreemptMode", "--mode"
    grace_s: int
    grace_from: str


def resolve_mode(preempt_type: str, cluster_mode: str, partition: Tuple[str, str, int],
                 qos: Optional[Tuple[str, str, int]], override: Optional[str] = None) -> Preemption:
    """The PreemptMode and GraceTime slurmctld 22.05 applies to a job (preempt/qos and
    preempt/partition_prio's _job_preempt_mode and _get_grace_time).

    ``partition``: (name, PreemptMode as `scontrol show partition` prints it, which is the
    cluster's where the partition sets none, GraceTime s); ``qos``: (name, PreemptMode,
    ''/'cluster' where it sets none, GraceTime s), None without accounting.

    preempt/qos: the QoS's mode where it has one, else the cluster's; the QoS's GraceTime.
    preempt/partition_prio: the partition's mode (else the cluster's); its GraceTime.
    preempt/none: OFF (Slurm never preempts). ``override`` (``--mode``) replaces the mode;
    the GraceTime is then the plugin's, or with preempt/none the QoS's where it has one,
    else the partition's.
    """
    ptype = preempt_type.split("/")[-1].lower()
    pname, pmode, pgrace = partition
    qname, qmode, qgrace = qos if qos else ("", "", 0)
    cluster = _mode_of(cluster_mode) or "OFF"
    if ptype == "qos":
        mode, mode_from = ((_mode_of(qmode), f"QoS '{qname}'") if _mode_of(qmode)
                           else (cluster, "the cluster's PreemptMode"))
        grace, grace_from = qgrace, f"QoS '{qname}'" if qos else "no QoS"
    elif ptype == "partition_prio":
        mode, mode_from = _mode_of(pmode) or cluster, f"partition '{pname}'"
        grace, grace_from = pgrace, f"partition '{pname}'"
    else:
        mode, mode_from = "OFF", f"PreemptType={preempt_type or 'preempt/none'}"
        grace, grace_from = (qgrace, f"QoS '{qname}'") if qgrace else (pgrace, f"partition '{pname}'")
    if override:
        mode, mode_from = override.upper(), "--mode"
    return Preemption(mode, mode_from, int(grace or 0), grace_from)


# ---------------------------------------------------------------- what the cluster says

@dataclass
class RunningJob:
    """What `fault time-limit` and `fault preempt` need to know of a running job."""

    job_id: str
    info: Dict[str, str]  # scontrol show job -o
    signal: Optional[WarnSignal]  # from its batch script's #SBATCH lines

    @property
    def run_s(self) -> int:
        return clock_seconds(self.info.get("RunTime", "")) or 0

    @property
    def limit_s(self) -> Optional[int]:
        return clock_seconds(self.info.get("TimeLimit", ""))


def running_job(client: SlurmClient, job_id: str, cluster: str) -> RunningJob:
    """The job ``job_id`` of ``cluster``, which must be running (else a UsageError that says why)."""
    job_id = str(job_id).strip()
    if not _JOB_ID.match(job_id):
        raise UsageError(f"'{job_id}' is not a job id", "give the number sbatch printed, e.g. 42 or 42_3 for an array task")
    res = client.run(["scontrol", "show", "job", "-o", job_id], timeout=20)
    if not res.ok:
        if "Invalid job id" in res.stderr:
            raise UsageError(f"no job {job_id} on cluster '{cluster}'",
                             f"list its jobs: simcluster exec --name {cluster} -- squeue")
        raise SimclusterError(f"scontrol show job {job_id} failed: {res.error_line()}")
    rows = parse_oneliner(res.stdout)
    if len(rows) > 1:
        tasks = ", ".join(r.get("JobId", "?") + "_" + r.get("ArrayTaskId", "?") for r in rows[:3])
        raise UsageError(f"job {job_id} is an array of {len(rows)} jobs", f"name one task: {tasks} ...")
    info = rows[0] if rows else {}
    state = info.get("JobState", "UNKNOWN")
    if state != "RUNNING":
        when = ("its end is set when it starts: wait until squeue shows it RUNNING" if state == "PENDING"
                else "only a running job has an end to move or can be preempted")
        raise UsageError(f"job {job_id} is {state}, not running", when)
    return RunningJob(job_id, info, job_signal(client, job_id))


def job_signal(client: SlurmClient, job_id: str) -> Optional[WarnSignal]:
    """The job's ``--signal`` as its batch script's #SBATCH lines give it (None: none there).
    Slurm 22.05 shows a job's --signal in no command; one given on sbatch's command line is
    not seen."""
    res = client.run(["scontrol", "write", "batch_script", job_id, "-"], timeout=20)
    value = header_signal(res.stdout) if res.ok else None
    return parse_signal(value) if value else None


def header_signal(script: str) -> Optional[str]:
    """The value of the last ``--signal`` in a batch script's #SBATCH lines, as sbatch reads
    them: up to the first line that is neither blank nor a comment. (The doctor's full
    header parser is provisioner/check/parse.py, above cluster/.)"""
    found = None
    for line in script.splitlines()[1:] if script.startswith("#!") else script.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            break
        m = re.match(r"#SBATCH\s.*?--signal(?:=|\s+)(\S+)", line)
        if m:
            found = m.group(1)
    return found


def cluster_config(client: SlurmClient) -> Dict[str, str]:
    res = client.run(["scontrol", "show", "config"], timeout=20)
    if not res.ok:
        raise SimclusterError(f"scontrol show config failed: {res.error_line()}")
    return parse_config(res.stdout)


def _partition(client: SlurmClient, name: str) -> Dict[str, str]:
    res = client.run(["scontrol", "show", "partition", "-o", name], timeout=20)
    rows = parse_oneliner(res.stdout) if res.ok else []
    return rows[0] if rows else {}


def _qos(client: SlurmClient, name: str) -> Optional[Tuple[str, str, int]]:
    res = client.run(["sacctmgr", "-n", "-P", "show", "qos", name, "format=Name,PreemptMode,GraceTime"], timeout=20)
    for line in res.stdout.splitlines() if res.ok else []:
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0] == name:
            return parts[0], parts[1], grace_seconds(parts[2])
    return None


def cred_expire(config: Dict[str, str]) -> int:
    """AuthInfo's cred_expire (Slurm's default: 120 s): a requeued job waits it, plus 1 s."""
    m = re.search(r"cred_expire=(\d+)", config.get("AuthInfo", ""))
    return int(m.group(1)) if m else 120


def _kill_wait(config: Dict[str, str]) -> str:
    return config.get("KillWait", "30 sec").replace(" sec", " s")


# ---------------------------------------------------------------- fault time-limit

def _at(seconds_from_now: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(time.time() + seconds_from_now))


@dataclass(frozen=True)
class MovedEnd:
    """What `fault time-limit` did: the new limit, and what it says about it."""

    job_id: str
    minutes: int  # the new TimeLimit
    ends_in: int  # seconds from now
    message: str


def time_limit(client: SlurmClient, job_id: str, in_s: int, cluster: str) -> MovedEnd:
    """Move running job ``job_id``'s end to about ``in_s`` seconds from now (``scontrol update
    TimeLimit``); the message says what was set and when the --signal and the end are due."""
    if in_s < 0:
        raise UsageError(f"--in {in_s}: expected seconds from now, 0 or more")
    job = running_job(client, job_id, cluster)
    run_s, old = job.run_s, job.limit_s
    minutes = new_time_limit(run_s, in_s)
    res = client.run(["scontrol", "update", f"JobId={job.job_id}", f"TimeLimit={minutes}"], timeout=20)
    if not res.ok:
        raise SimclusterError(f"scontrol update JobId={job.job_id} TimeLimit={minutes} failed: {res.error_line()}")
    config = cluster_config(client)
    ends_in = minutes * 60 - run_s
    old_text = clock_text(old) if old is not None else job.info.get("TimeLimit", "UNLIMITED")
    lines = [f"job {job.job_id}: TimeLimit {old_text} -> {clock_text(minutes * 60)} "
             f"(scontrol update JobId={job.job_id} TimeLimit={minutes}); it has run {run_s} s, "
             f"so it ends in {ends_in} s, at {_at(ends_in)}"]
    lines += _signal_lines(job, ends_in, old, in_s)
    lines.append(f"the end: slurmctld ends it TIMEOUT at its first time-limit pass (every {PASS_S} s) after "
                 f"{_at(ends_in)}: SIGTERM to the job, SIGKILL KillWait={_kill_wait(config)} later")
    return MovedEnd(job.job_id, minutes, ends_in, "\n".join(lines))


def _signal_lines(job: RunningJob, ends_in: int, old_limit: Optional[int], in_s: int) -> List[str]:
    sig = job.signal
    if sig is None:
        return ["--signal: none in its batch script's #SBATCH lines (one given on sbatch's command line "
                "is not shown by Slurm: it comes at its offset before the end, as below)"]
    due = ends_in - sig.offset
    # Sent at the first pass with at most offset+30 s left: up to 30 s early, never late.
    early = max(0, due - PASS_S)
    lines = [f"--signal={sig.text}: SIG{sig.name} to {sig.to} is due {sig.offset} s before the end, "
             + (f"in {due} s (at {_at(due)}); slurmctld sends it at its first {PASS_S}-s pass with at most "
                f"{sig.offset + PASS_S} s left: {early}-{early + PASS_S} s from now" if due > 0 else
                f"so at once (slurmctld's next pass, within {PASS_S} s)")]
    if in_s < sig.offset:
        lines.append(f"warning: --in {in_s} is less than the --signal offset ({sig.offset} s): the signal "
                     f"is due at once, not {sig.offset} s before the end; use --in {sig.offset} or more")
    if old_limit is not None and old_limit - job.run_s <= sig.offset + PASS_S:
        lines.append(f"note: the job already had less than {sig.offset + PASS_S} s left: Slurm sends --signal once, "
                     "so if it was sent, it is not sent again")
    return lines


# ---------------------------------------------------------------- fault preempt

def preemption(client: SlurmClient, job: RunningJob, mode: Optional[str] = None,
               config: Optional[Dict[str, str]] = None) -> Preemption:
    """The PreemptMode and GraceTime that apply to ``job`` (``mode``: --mode, which wins)."""
    config = config if config is not None else cluster_config(client)
    part_name = job.info.get("Partition", "")
    part = _partition(client, part_name)
    qos = None
    qos_name = job.info.get("QOS", "")
    if config.get("AccountingStorageType", "").endswith("/slurmdbd") and qos_name not in ("", "(null)"):
        qos = _qos(client, qos_name)
    return resolve_mode(config.get("PreemptType", "preempt/none"), config.get("PreemptMode", "OFF"),
                        (part_name, part.get("PreemptMode", ""), grace_seconds(part.get("GraceTime", ""))),
                        qos, mode)


def _scancel(client: SlurmClient, args: List[str]) -> None:
    res = client.run(["scancel", *args], timeout=20)
    if not res.ok:
        raise SimclusterError(f"scancel {' '.join(args)} failed: {res.error_line()}")


def _still_running(client: SlurmClient, job_id: str) -> str:
    return client.show_job(job_id).get("JobState", "gone")


def preempt(client: SlurmClient, job_id: str, cluster: str, mode: Optional[str] = None,
            progress: Callable[[str], None] = lambda line: None) -> str:
    """Preempt running job ``job_id`` as slurmctld would (see the module docstring) with
    Slurm's own commands; ``mode`` ('requeue'/'cancel', --mode) replaces the configured one."""
    if mode is not None and mode.lower() not in MODES:
        raise UsageError(f"--mode {mode}: expected one of {', '.join(MODES)}")
    job = running_job(client, job_id, cluster)
    config = cluster_config(client)
    how = preemption(client, job, mode, config)
    if how.mode == "OFF":
        raise UsageError(f"job {job.job_id} is not preemptible: PreemptMode is OFF ({how.mode_from})",
                         "pass --mode requeue or --mode cancel, or configure PreemptType and PreemptMode",
                         doc="docs/faults.md#fault-preempt")
    if how.mode not in ("REQUEUE", "CANCEL"):
        raise UsageError(f"PreemptMode={how.mode} ({how.mode_from}) is not emulated by fault preempt",
                         "pass --mode requeue or --mode cancel", doc="docs/faults.md#fault-preempt")
    if how.mode == "REQUEUE" and job.info.get("Requeue") != "1":
        raise UsageError(f"job {job.job_id} cannot be requeued (Requeue=0): Slurm would cancel it instead",
                         "submit it with --requeue or set JobRequeue=1 in slurmConf; or pass --mode cancel")
    user_signal = "send_user_signal" in config.get("PreemptParameters", "").lower()
    sig = job.signal if user_signal else None
    said = [f"job {job.job_id}: PreemptMode={how.mode} (from {how.mode_from}), "
            f"GraceTime={how.grace_s} s (from {how.grace_from})"]
    sent = False
    if how.grace_s > 0:
        sent = _grace_signal(client, job, sig)
        what = f"SIGCONT + SIG{sig.name} (--signal, PreemptParameters=send_user_signal) to {sig.to}" if sig \
            else "SIGCONT + SIGTERM to the job steps (not the batch shell, as Slurm does)"
        progress(f" - {what}; waiting GraceTime {how.grace_s} s")
        said.append(f"sent {what}, waited GraceTime {how.grace_s} s")
        ended = _wait_grace(client, job.job_id, how.grace_s)
        if ended:
            said.append(f"it ended by itself in the grace time ({ended}): nothing left to preempt")
            return "\n".join(said)
    if sig and not sent:
        _grace_signal(client, job, sig)
        said.append(f"sent SIGCONT + SIG{sig.name} (--signal, PreemptParameters=send_user_signal) to {sig.to}")
    if how.mode == "REQUEUE":
        res = client.run(["scontrol", "requeue", job.job_id], timeout=20)
        if not res.ok:
            raise SimclusterError(f"scontrol requeue {job.job_id} failed: {res.error_line()}")
        said.append("requeued it (scontrol requeue): SIGTERM to the job, SIGKILL KillWait="
                    f"{_kill_wait(config)} later; it may start again in cred_expire+1 = "
                    f"{cred_expire(config) + 1} s")
    else:
        _scancel(client, [job.job_id])
        said.append(f"cancelled it (scancel): SIGTERM to the job, SIGKILL KillWait={_kill_wait(config)} later")
    said.append("emulated with Slurm's own commands: sacct shows "
                + ("the run REQUEUED (sacct -D)" if how.mode == "REQUEUE" else "it CANCELLED")
                + ", where Slurm's preemption shows PREEMPTED")
    return "\n".join(said)


def _grace_signal(client: SlurmClient, job: RunningJob, sig: Optional[WarnSignal]) -> bool:
    """SIGCONT then SIGTERM to the job's steps, or with ``sig`` (send_user_signal) the job's
    --signal to whom it names; scancel without --batch signals the steps only, as slurmctld's
    job_signal does for preemption. True when the job's --signal was sent."""
    batch = ["--batch"] if sig and sig.batch else []
    _scancel(client, ["--signal=CONT", *batch, job.job_id])
    _scancel(client, [f"--signal={sig.name if sig else 'TERM'}", *batch, job.job_id])
    return sig is not None


# Job states in which the job has not ended: SIGNALING is RUNNING while slurmctld delivers a
# signal (the grace signal itself, on a loaded host for seconds), not an end.
STILL_RUNNING = frozenset({"RUNNING", "SIGNALING", "CONFIGURING", "SUSPENDED", "STOPPED"})


def _wait_grace(client: SlurmClient, job_id: str, grace_s: int) -> Optional[str]:
    """Wait the GraceTime out (slurmctld too acts only once it is over); the job's state if
    it ended meanwhile (its trap exited), else None."""
    def ended() -> Tuple[bool, str]:
        state = _still_running(client, job_id)
        return state not in STILL_RUNNING, state
    try:
        return poll_until(ended, grace_s, first_delay=0.5, max_delay=1.0)
    except WaitTimeout:
        return None
