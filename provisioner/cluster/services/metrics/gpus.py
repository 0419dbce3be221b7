"""The fake GPUs as DCGM sees them: one reading per GPU (or MIG instance) per scrape.

Inputs, read defensively (a missing file or key means nothing, never an error):
- fake-gpus.json in the cluster's config directory (fakegpus/__init__.py writes it): each
  node's GPU count and model; per node an optional "mig": {"<gpu index>": [{"profile":
  "3g.40gb", "gi": 1, "uuid": "MIG-..."}]} (MIG layouts);
- gpu-faults.json beside it: {"node1": {"0": {"xid": 79, "ecc_errors": 0, "lost": false,
  "since": "..."}}} (GPU faults; absent: none);
- the jobs Slurm says hold which of a node's GPU gres entries (parse.Job.gpus).

Values follow the job: a GPU some job holds reads busy (utilisation, framebuffer, power and
temperature up; a stable value per job and GPU, so a dashboard shows a steady line), an idle
one reads what our nvidia-smi shows for it; a GPU with a fault carries its Xid and ECC
count; a lost GPU has no series at all (DCGM no longer sees it).

Slurm numbers a node's gpu gres entries (IDX:) in gres.conf's order. A whole GPU is one
entry, by index. On a MIG node every instance is an entry, numbered as slurmd numbers typed
GPUs: profile by profile (by name), then GPU by GPU, each GPU's instances in the order
fake-gpus.json lists them (provisioner/config/gpus.py: mig_instances writes that order).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from provisioner.cluster.services.fakegpus.nvidia_smi import DATA_FILE, gpu_uuid, gpus_of_node
from provisioner.cluster.services.metrics.parse import Job

FAULTS_FILE = "gpu-faults.json"  # beside fake-gpus.json (`simcluster fault gpu` writes it)


def read_json(path: Path) -> Dict:
    """A JSON object from ``path``; {} where it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Reading:
    """One GPU or MIG instance at one scrape, with dcgm-exporter's labels."""

    node: str
    gpu: int  # index on its node
    uuid: str
    device: str  # nvidia<minor>
    model: str
    mig_profile: str  # "" for a whole GPU
    mig_id: str  # GPU instance id, "" for a whole GPU
    job: str  # the job holding it, "" when idle
    util: float
    fb_used: float  # MiB
    fb_free: float  # MiB
    temp: float
    power: float  # W
    sm_clock: float
    mem_clock: float
    xid: float
    ecc_dbe: float

    def labels(self) -> Tuple[str, ...]:
        return (str(self.gpu), self.uuid, self.device, self.model, self.node, self.mig_profile, self.mig_id,
                self.job)


LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "GPU_I_PROFILE", "GPU_I_ID", "hpc_job")


def _mib_of_profile(profile: str, whole: int) -> int:
    """A MIG profile's memory: "3g.40gb" -> 40960 MiB; unknown forms: the whole GPU's."""
    m = re.search(r"(\d+)gb", profile or "")
    return int(m.group(1)) * 1024 if m else whole


def _load(job: str, node: str, slot: int) -> int:
    """A stable utilisation in 80..99 % for this job on this GPU slot."""
    return 80 + int(hashlib.sha256(f"{job}/{node}/{slot}".encode()).hexdigest()[:8], 16) % 20


def entries(node_data: Dict, count: int) -> List[Tuple[int, Optional[Dict]]]:
    """A node's gpu gres entries in Slurm's index order: (gpu index, MIG instance or None).
    MIG instances first, by (profile, GPU index, place in that GPU's list); then the GPUs
    that have none, whole, by index."""
    mig = node_data.get("mig") if isinstance(node_data.get("mig"), dict) else {}
    split: List[Tuple[str, int, int, Dict]] = []
    whole: List[Tuple[int, Optional[Dict]]] = []
    for index in range(count):
        instances = mig.get(str(index))
        if isinstance(instances, list) and instances:
            split.extend((str(inst.get("profile", "")) if isinstance(inst, dict) else "", index, pos,
                          inst if isinstance(inst, dict) else {}) for pos, inst in enumerate(instances))
        else:
            whole.append((index, None))
    return [(index, inst) for _, index, _, inst in sorted(split, key=lambda e: e[:3])] + whole


def holders(jobs: Iterable[Job]) -> Dict[Tuple[str, int], str]:
    """{(node, Slurm gpu index): job id} of the jobs that hold GPUs now."""
    out: Dict[Tuple[str, int], str] = {}
    for job in jobs:
        for held in job.gpus:
            for idx in held.indices:
                out.setdefault((held.node, idx), job.job_id)
    return out


def readings(data: Dict, faults: Dict, jobs: Sequence[Job],
             minors: Optional[Dict[str, Sequence[int]]] = None) -> List[Reading]:
    """Every GPU and MIG instance of ``data`` (fake-gpus.json) as read now. ``minors``: each
    node's device minors (the spec's GPU ids: /dev/nvidia<minor>); default the index."""
    held = holders(jobs)
    out: List[Reading] = []
    nodes = data.get("nodes") if isinstance(data.get("nodes"), dict) else {}
    cluster = str(data.get("cluster", ""))
    for node in sorted(nodes):
        spec = nodes[node] if isinstance(nodes[node], dict) else {}
        try:
            gpus = {g["index"]: g for g in gpus_of_node(data, node)}
        except (KeyError, TypeError, ValueError):
            continue  # a node entry without the fields the shim needs
        node_faults = faults.get(node) if isinstance(faults.get(node), dict) else {}
        node_minors = list((minors or {}).get(node) or [])
        for slot, (index, inst) in enumerate(entries(spec, len(gpus))):
            gpu = gpus[index]
            fault = node_faults.get(str(index)) if isinstance(node_faults.get(str(index)), dict) else {}
            if fault.get("lost"):
                continue
            total = gpu["memory_total"] if inst is None else _mib_of_profile(str(inst.get("profile", "")),
                                                                             gpu["memory_total"])
            job = held.get((node, slot), "")
            util = _load(job, node, slot) if job else 0
            used = round(total * (0.5 + util / 250)) if job else 0
            idle_w, limit_w = float(gpu["power_draw"]), float(gpu["power_limit"])
            minor = node_minors[index] if index < len(node_minors) else index
            out.append(Reading(
                node=node, gpu=index, uuid=gpu_uuid(cluster, node, index), device=f"nvidia{minor}",
                model=str(gpu["name"]), mig_profile=str(inst.get("profile", "")) if inst is not None else "",
                mig_id=str(inst.get("gi", "")) if inst is not None else "", job=job, util=util,
                fb_used=used, fb_free=total - used, temp=gpu["temperature"] + (util * 0.4 if job else 0),
                power=round(idle_w + (limit_w - idle_w) * util / 100, 2), sm_clock=gpu["sm_clock"],
                mem_clock=gpu["mem_clock"], xid=float(fault.get("xid") or 0),
                ecc_dbe=float(fault.get("ecc_errors") or 0)))
    return out
