"""What the exporter reads of Slurm's client commands, as plain data (no I/O here).

One scrape runs `scontrol -o show node`, `scontrol -o show partition`, `scontrol -o -d
show job` and `sdiag` (collector.py); these functions turn their text into records. The
one-line (-o) forms of scontrol are Key=Value words, except values that may hold blanks
(a node's Reason, OS, a job's Command): those run up to the next " Key=" word.

`scontrol -d show job` gives each running job's GPUs per node: "Nodes=node[1-2] CPU_IDs=0
Mem=12052 GRES=gpu:1(IDX:0)" (Slurm's indices of the gres entries on each of those nodes),
which is how a GPU is tied to the job holding it. sdiag has no --json before Slurm 23.02
(22.05: "unrecognized option"), so its text is parsed: the labels are the same from 22.05
to 26.05.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

from provisioner.config.hostlist import HostlistError, expand

# " Key=" starts the next field; keys are words with / : . _ (CPUs/Task, AllocNode:Sid).
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=")
# Per-node detail of `scontrol -d show job`: one group per set of nodes with the same allocation.
_NODE_DETAIL = re.compile(r"(?:^|\s)Nodes=(\S+) CPU_IDs=\S* Mem=\S* GRES=(\S*)")
# One gres of a GRES= word: gpu:1(IDX:0), gpu:a100:2(IDX:0-1), gpu:3g.40gb:1(IDX:4), shard:2(2/4,0/4)...
# (A type is never a bare count: "gpu:1(IDX:0)" has none.)
_GRES = re.compile(r"(?P<name>[a-z]+)(?::(?P<type>(?!\d+[(:])[^:(,]+))?(?::(?P<count>\d+))?\(IDX:(?P<idx>[^)]*)\)")


def key_values(line: str) -> Dict[str, str]:
    """{Key: value} of one `scontrol -o show ...` line. A value runs up to the next " Key="
    (so "Reason=gpu xid 79 [root@...]" keeps its blanks); a repeated key keeps its first value
    (a job's per-node "Nodes=" detail comes after its own fields)."""
    out: Dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


def records(text: str, first_key: str) -> Iterator[Dict[str, str]]:
    """Each line of a `scontrol -o show ...` output that starts with ``first_key``=."""
    for line in text.splitlines():
        if line.startswith(first_key + "="):
            yield key_values(line)


def _int(value: Optional[str], default: int = 0) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def index_list(text: str) -> List[int]:
    """Slurm's index list "0-1,3" -> [0, 1, 3] (bad pieces are skipped)."""
    out: List[int] = []
    for piece in text.split(","):
        lo, _, hi = piece.partition("-")
        if lo.strip().isdigit() and (not hi or hi.strip().isdigit()):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


# -- nodes -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    name: str
    state: str  # as sinfo names it: idle, mixed, allocated, drained, draining, down, ...
    raw_state: str  # scontrol's: IDLE+DRAIN
    reason: str  # the drain/down reason without its [user@time] suffix; "" when none
    partitions: Tuple[str, ...]
    cpus: int
    cpus_alloc: int
    memory_mb: int
    memory_alloc_mb: int


def node_state(raw: str) -> str:
    """scontrol's State word as one state name, sinfo's long form: IDLE+DRAIN -> drained,
    MIXED+DRAIN or ALLOCATED+DRAIN -> draining, DOWN+NOT_RESPONDING -> down, IDLE+COMPLETING
    -> completing; otherwise the base state in lower case."""
    base, *flags = (raw or "unknown").upper().replace("*", "").split("+")
    if base == "DOWN":
        return "down"
    if "DRAIN" in flags:
        return "draining" if base in ("ALLOCATED", "MIXED") or "COMPLETING" in flags else "drained"
    for flag, name in (("FAIL", "fail"), ("MAINTENANCE", "maint"), ("REBOOT_REQUESTED", "reboot"),
                       ("COMPLETING", "completing"), ("NOT_RESPONDING", "not_responding")):
        if flag in flags:
            return name
    return base.lower()


def parse_nodes(text: str) -> List[Node]:
    nodes = []
    for kv in records(text, "NodeName"):
        reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", kv.get("Reason", "")).strip()
        parts = kv.get("Partitions", "")
        nodes.append(Node(name=kv["NodeName"], state=node_state(kv.get("State", "")), raw_state=kv.get("State", ""),
                          reason=reason, partitions=tuple(p for p in parts.split(",") if p),
                          cpus=_int(kv.get("CPUTot")), cpus_alloc=_int(kv.get("CPUAlloc")),
                          memory_mb=_int(kv.get("RealMemory")), memory_alloc_mb=_int(kv.get("AllocMem"))))
    return nodes


# -- partitions --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Partition:
    name: str
    state: str  # up, down, drain, inactive
    nodes: int
    cpus: int
    default: bool


def parse_partitions(text: str) -> List[Partition]:
    return [Partition(name=kv["PartitionName"], state=kv.get("State", "").lower() or "unknown",
                      nodes=_int(kv.get("TotalNodes")), cpus=_int(kv.get("TotalCPUs")),
                      default=kv.get("Default", "").upper() == "YES")
            for kv in records(text, "PartitionName")]


# -- jobs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GresHeld:
    """GPUs a job holds on one node: Slurm's indices of that node's gpu gres entries, and the
    gres type where it has one (a MIG profile such as 3g.40gb, or a model such as a100)."""

    node: str
    gres_type: str
    indices: Tuple[int, ...]


@dataclass(frozen=True)
class Job:
    job_id: str
    state: str  # lower case: running, pending, completed, ...
    partition: str
    user: str
    gpus: Tuple[GresHeld, ...] = field(default_factory=tuple)


def _user(word: str) -> str:
    return word.split("(", 1)[0] if word else ""


def job_gpus(line: str) -> List[GresHeld]:
    """The GPUs of one `scontrol -o -d show job` line, per node (empty for a job that holds
    none, or whose allocation is gone: a finished job's GRES= is empty)."""
    held: List[GresHeld] = []
    for m in _NODE_DETAIL.finditer(line):
        try:
            nodes = expand(m.group(1))
        except HostlistError:
            continue
        for g in _GRES.finditer(m.group(2)):
            if g.group("name") != "gpu":
                continue  # shard/mps: shares of a GPU, not the GPU itself
            indices = tuple(index_list(g.group("idx")))
            held.extend(GresHeld(n, g.group("type") or "", indices) for n in nodes)
    return held


def parse_jobs(text: str) -> List[Job]:
    """Every job of a `scontrol -o -d show job` output ("No jobs in the system": none).
    Array tasks and the pieces of a heterogeneous job are jobs of their own, as Slurm lists
    them; their JobId is the id Slurm shows (ArrayJobId_TaskId where it is an array task)."""
    jobs = []
    for line in text.splitlines():
        if not line.startswith("JobId="):
            continue
        kv = key_values(line)
        job_id = kv["JobId"]
        if kv.get("ArrayJobId") and kv.get("ArrayTaskId"):
            job_id = f"{kv['ArrayJobId']}_{kv['ArrayTaskId']}"
        state = kv.get("JobState", "unknown").lower()
        gpus = tuple(job_gpus(line)) if state in ("running", "suspended", "completing") else ()
        jobs.append(Job(job_id=job_id, state=state, partition=kv.get("Partition", ""), user=_user(kv.get("UserId", "")),
                        gpus=gpus))
    return jobs


# -- sdiag -------------------------------------------------------------------------------------

# sdiag's lines -> series names (collector.py prefixes slurm_scheduler_); microseconds ->
# seconds for the cycle times. Section matters for "Last cycle" and "Total cycles".
_SDIAG_TOP = {
    "Server thread count": "server_threads",
    "Agent queue size": "agent_queue_size",
    "Agent count": "agent_count",
    "Agent thread count": "agent_threads",
    "DBD Agent queue size": "dbd_agent_queue_size",
    "Jobs submitted": "jobs_submitted",
    "Jobs started": "jobs_started",
    "Jobs completed": "jobs_completed",
    "Jobs canceled": "jobs_canceled",
    "Jobs failed": "jobs_failed",
    "Jobs pending": "jobs_pending",
    "Jobs running": "jobs_running",
}
_SDIAG_MAIN = {"Last cycle": "main_cycle_last", "Max cycle": "main_cycle_max", "Mean cycle": "main_cycle_mean",
               "Total cycles": "main_cycles", "Mean depth cycle": "main_depth_mean",
               "Last queue length": "main_queue_length"}
_SDIAG_BACKFILL = {"Total backfilled jobs (since last slurm start)": "backfilled_jobs",
                   "Total cycles": "backfill_cycles", "Last cycle": "backfill_cycle_last",
                   "Max cycle": "backfill_cycle_max", "Mean cycle": "backfill_cycle_mean",
                   "Last depth cycle": "backfill_depth_last", "Last queue length": "backfill_queue_length"}
# Series in microseconds in sdiag: exported in seconds, as Prometheus names want.
SDIAG_MICROSECONDS = {"main_cycle_last", "main_cycle_max", "main_cycle_mean", "backfill_cycle_last",
                      "backfill_cycle_max", "backfill_cycle_mean"}


def parse_sdiag(text: str) -> Dict[str, float]:
    """{series: value} of sdiag's text (microsecond times converted to seconds)."""
    out: Dict[str, float] = {}
    section = _SDIAG_TOP
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Main schedule statistics"):
            section = _SDIAG_MAIN
            continue
        if line.startswith("Backfilling stats"):
            section = _SDIAG_BACKFILL
            continue
        if line.startswith(("Latency for", "Remote Procedure Call", "Pending RPC")):
            section = {}
            continue
        key, sep, value = line.partition(":")
        name = section.get(key.strip()) if sep else None
        if name is None or name in out:
            continue
        number = value.strip().split(" ")[0]
        try:
            v = float(number)
        except ValueError:
            continue  # "Last cycle when: N/A"
        out[name] = v / 1e6 if name in SDIAG_MICROSECONDS else v
    return out
