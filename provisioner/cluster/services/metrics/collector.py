"""The exporter's prometheus_client collector: Slurm's state and the fake GPUs, per scrape.

A scrape costs a fixed number of Slurm client calls, whatever the cluster's size: one each
of SLURM_CALLS (node, partition and job lists, sdiag), run side by side. Their outputs are
kept for ``ttl`` seconds (Snapshots), so scrapes that come close together (two Prometheus
servers, a dashboard refresh) share one set of calls instead of adding to slurmctld's load.
A call that fails leaves its series out and sets slurm_exporter_source_up{source} to 0;
the others are still exported.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from provisioner.cluster.services.metrics import gpus as gpu_model
from provisioner.cluster.services.metrics import parse

# source -> the Slurm client call (one each per scrape, at most).
SLURM_CALLS: Dict[str, List[str]] = {
    "nodes": ["scontrol", "-o", "show", "node"],
    "partitions": ["scontrol", "-o", "show", "partition"],
    "jobs": ["scontrol", "-o", "-d", "show", "job"],
    "sdiag": ["sdiag"],
}
DEFAULT_TTL = 2.0  # seconds a snapshot of Slurm's outputs is reused
# Job states every scrape exports (0 when there are none), so that a rate or an alert on one
# has a series from the start.
JOB_STATES = ("pending", "running", "suspended", "completing", "completed", "cancelled", "failed", "timeout",
              "node_fail", "preempted", "out_of_memory")
# Node states always exported in the counts (sinfo's long names).
NODE_STATES = ("idle", "mixed", "allocated", "completing", "draining", "drained", "down")

# argv -> (the call succeeded, its stdout)
Fetch = Callable[[Sequence[str]], Tuple[bool, str]]


@dataclass
class Snapshot:
    """Slurm's outputs of one round of calls: {source: text or None (the call failed)}."""

    outputs: Dict[str, Optional[str]]
    taken: float  # time.monotonic()
    seconds: float  # how long the calls took


class SlurmSource:
    """Runs SLURM_CALLS through ``fetch`` and keeps the result for ``ttl`` s (one round at a
    time: a scrape that arrives while a round runs waits for it and uses it)."""

    def __init__(self, fetch: Fetch, ttl: float = DEFAULT_TTL, calls: Optional[Dict[str, List[str]]] = None):
        self.fetch, self.ttl = fetch, ttl
        self.calls = dict(SLURM_CALLS if calls is None else calls)
        self._lock = threading.Lock()
        self._snap: Optional[Snapshot] = None
        self.rounds = 0  # rounds of calls made (each is len(calls) client calls)

    def snapshot(self) -> Snapshot:
        with self._lock:
            now = time.monotonic()
            if self._snap is None or now - self._snap.taken >= self.ttl:
                self._snap = self._take()
            return self._snap

    def _take(self) -> Snapshot:
        t0 = time.monotonic()

        def one(argv: List[str]) -> Optional[str]:
            try:
                ok, out = self.fetch(argv)
            except Exception:  # a runner error is a failed source, never a failed scrape
                return None
            return out if ok else None
        with ThreadPoolExecutor(max_workers=len(self.calls)) as pool:
            futures = {name: pool.submit(one, argv) for name, argv in self.calls.items()}
            outputs = {name: f.result() for name, f in futures.items()}
        self.rounds += 1
        return Snapshot(outputs, time.monotonic(), time.monotonic() - t0)


class ClusterCollector(Collector):
    """Every series of the exporter (docs/metrics.md lists them), from one snapshot."""

    def __init__(self, source: SlurmSource, cluster: str, gpu_data_dir: Optional[Path] = None,
                 minors: Union[None, Dict[str, Sequence[int]], Callable[[], Dict[str, Sequence[int]]]] = None):
        """``minors``: each node's GPU device numbers, or a function that reads them at each
        scrape (nodes that `simcluster scale` adds have theirs only from then on)."""
        self.source, self.cluster = source, cluster
        self.gpu_data_dir, self.minors = gpu_data_dir, minors

    def describe(self) -> List[Metric]:
        return []  # series depend on the cluster; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        t0 = time.monotonic()
        snap = self.source.snapshot()
        up = GaugeMetricFamily("slurm_exporter_source_up", "1 when the Slurm call of this source answered at the "
                               "last snapshot", labels=["source"])
        for name, text in sorted(snap.outputs.items()):
            up.add_metric([name], 0 if text is None else 1)
        yield up
        yield GaugeMetricFamily("slurm_exporter_slurm_seconds", "How long the last round of Slurm calls took",
                                value=snap.seconds)
        yield GaugeMetricFamily("slurm_exporter_snapshot_age_seconds", "Age of the Slurm outputs this scrape "
                                "reports (they are reused for a short time)", value=time.monotonic() - snap.taken)
        jobs = parse.parse_jobs(snap.outputs["jobs"]) if snap.outputs.get("jobs") is not None else None
        if snap.outputs.get("nodes") is not None:
            yield from node_families(parse.parse_nodes(snap.outputs["nodes"]))
        if snap.outputs.get("partitions") is not None:
            yield from partition_families(parse.parse_partitions(snap.outputs["partitions"]), jobs)
        if jobs is not None:
            yield from job_families(jobs)
        if snap.outputs.get("sdiag") is not None:
            yield from sdiag_families(parse.parse_sdiag(snap.outputs["sdiag"]))
        if self.gpu_data_dir is not None:
            data = gpu_model.read_json(self.gpu_data_dir / gpu_model.DATA_FILE)
            faults = gpu_model.read_json(self.gpu_data_dir / gpu_model.FAULTS_FILE)
            if data:
                minors = self.minors() if callable(self.minors) else self.minors
                yield from gpu_families(gpu_model.readings(data, faults, jobs or [], minors))
        yield GaugeMetricFamily("slurm_exporter_collect_seconds", "How long this scrape's collection took "
                                "(Slurm calls included when the snapshot was taken for it)",
                                value=time.monotonic() - t0)


def node_families(nodes: List[parse.Node]) -> Iterator[Metric]:
    info = GaugeMetricFamily("slurm_node_state", "1 for each node, labelled with its state (sinfo's long name), "
                             "Slurm's own state word and the reason it is drained or down",
                             labels=["node", "state", "slurm_state", "reason"])
    cpus = GaugeMetricFamily("slurm_node_cpus", "CPUs of each node", labels=["node"])
    cpus_alloc = GaugeMetricFamily("slurm_node_cpus_allocated", "CPUs of each node allocated to jobs",
                                   labels=["node"])
    mem = GaugeMetricFamily("slurm_node_memory_bytes", "Memory of each node (RealMemory)", labels=["node"])
    mem_alloc = GaugeMetricFamily("slurm_node_memory_allocated_bytes", "Memory of each node allocated to jobs",
                                  labels=["node"])
    counts = GaugeMetricFamily("slurm_nodes", "Nodes in each state", labels=["state"])
    by_state = Counter(n.state for n in nodes)
    for n in nodes:
        info.add_metric([n.name, n.state, n.raw_state, n.reason], 1)
        cpus.add_metric([n.name], n.cpus)
        cpus_alloc.add_metric([n.name], n.cpus_alloc)
        mem.add_metric([n.name], n.memory_mb * 1024 * 1024)
        mem_alloc.add_metric([n.name], n.memory_alloc_mb * 1024 * 1024)
    for state in sorted(set(NODE_STATES) | set(by_state)):
        counts.add_metric([state], by_state.get(state, 0))
    yield from (info, counts, cpus, cpus_alloc, mem, mem_alloc)


def partition_families(parts: List[parse.Partition], jobs: Optional[List[parse.Job]]) -> Iterator[Metric]:
    state = GaugeMetricFamily("slurm_partition_state", "1 for each partition, labelled with its state",
                              labels=["partition", "state", "default"])
    nodes = GaugeMetricFamily("slurm_partition_nodes", "Nodes in each partition", labels=["partition"])
    cpus = GaugeMetricFamily("slurm_partition_cpus", "CPUs in each partition", labels=["partition"])
    for p in parts:
        state.add_metric([p.name, p.state, "true" if p.default else "false"], 1)
        nodes.add_metric([p.name], p.nodes)
        cpus.add_metric([p.name], p.cpus)
    yield from (state, nodes, cpus)
    if jobs is not None:
        per = GaugeMetricFamily("slurm_partition_jobs", "Jobs of each partition in each state",
                                labels=["partition", "state"])
        counted = Counter((j.partition, j.state) for j in jobs)
        for p in parts:
            for st in JOB_STATES:
                counted.setdefault((p.name, st), 0)
        for (part, st), n in sorted(counted.items()):
            per.add_metric([part, st], n)
        yield per


def job_families(jobs: List[parse.Job]) -> Iterator[Metric]:
    total = GaugeMetricFamily("slurm_jobs", "Jobs Slurm lists in each state (finished ones for MinJobAge)",
                              labels=["state"])
    by_state = Counter(j.state for j in jobs)
    for st in sorted(set(JOB_STATES) | set(by_state)):
        total.add_metric([st], by_state.get(st, 0))
    per_user = GaugeMetricFamily("slurm_user_jobs", "Jobs of each user in each state", labels=["user", "state"])
    for (user, st), n in sorted(Counter((j.user, j.state) for j in jobs).items()):
        per_user.add_metric([user, st], n)
    info = GaugeMetricFamily("slurm_job_gpus", "GPUs (gpu gres entries) each running job holds",
                             labels=["job", "user", "partition"])
    for j in jobs:
        count = sum(len(h.indices) for h in j.gpus)
        if count:
            info.add_metric([j.job_id, j.user, j.partition], count)
    yield from (total, per_user, info)


SDIAG_HELP = {
    "server_threads": "slurmctld's server thread count",
    "agent_queue_size": "RPCs slurmctld has queued to send (agent queue size)",
    "main_cycle_last": "The last main scheduling cycle, in seconds",
    "backfill_cycle_last": "The last backfill cycle, in seconds",
}


def sdiag_families(values: Dict[str, float]) -> Iterator[Metric]:
    for name, value in sorted(values.items()):
        unit = "_seconds" if name in parse.SDIAG_MICROSECONDS else ""
        yield GaugeMetricFamily(f"slurm_scheduler_{name}{unit}",
                                SDIAG_HELP.get(name, f"sdiag: {name.replace('_', ' ')}"), value=value)


# dcgm-exporter's field names -> (Reading attribute, help). All gauges, as dcgm-exporter's
# default counters file makes most of them.
DCGM_FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "util", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "fb_used", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "fb_free", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "temp", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "power", "Power draw (in W)."),
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "mem_clock", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_XID_ERRORS", "xid", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_dbe", "Total number of double-bit volatile ECC errors."),
)


def gpu_families(readings: List[gpu_model.Reading]) -> Iterator[Metric]:
    for name, attr, help_text in DCGM_FIELDS:
        fam = GaugeMetricFamily(name, help_text, labels=list(gpu_model.LABELS))
        for r in readings:
            fam.add_metric(list(r.labels()), getattr(r, attr))
        yield fam
