"""What a script's #SBATCH header asks for: nodes, tasks, CPUs, memory, GPUs, signal.

Used by the rules (how many nodes and tasks a mistake hits) and by `check --run` (the
shape of the throwaway cluster).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from provisioner.check.script import Script


def number(text: Optional[str]) -> Optional[int]:
    """The leading whole number of an option's value ('8', '2-4' -> 2), or None."""
    if text is None:
        return None
    m = re.match(r"\s*(\d+)", text)
    return int(m.group(1)) if m else None


def mem_mb(text: Optional[str]) -> Optional[int]:
    """An sbatch memory size ('200G', '8000', '1.5T') in MB, rounded up; None when unreadable."""
    if not text:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)B?", text.strip().upper())
    if not m:
        return None
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2)]
    return int(math.ceil(float(m.group(1)) * scale))


def _gpu_count(spec: Optional[str], gres: bool = False) -> Optional[int]:
    """--gres 'gpu:2', 'gpu:a100:2', 'gpu' (a gres list: its gpu entry); --gpus* '8', 'a100:8'."""
    if not spec:
        return None
    for item in spec.split(","):
        fields = item.split(":")
        if gres:
            if fields[0] != "gpu":
                continue
            fields = fields[1:]
            if not fields:
                return 1
        count = number(fields[-1])
        return count if count is not None else 1
    return None


@dataclass
class Shape:
    nodes: int
    nodes_max: int
    tasks_per_node: int
    cpus_per_task: int
    mem_mb: Optional[int]         # per node
    gpus_per_node: Optional[int]  # None: the job asks for no GPUs
    gpus_per_task: Optional[int]
    signal: Optional[str]         # as written, e.g. "SIGUSR1@90" or "B:USR1@90"
    nodes_stated: bool = True     # the header (or check --nodes) says how many nodes

    @property
    def multi_node(self) -> bool:
        return self.nodes_max > 1

    @property
    def total_tasks(self) -> int:
        return self.nodes_max * self.tasks_per_node

    @property
    def cpus_per_node(self) -> int:
        return max(1, self.tasks_per_node * self.cpus_per_task)


def shape_of(script: Script, nodes: Optional[int] = None) -> Shape:
    """The job shape the header asks for (Slurm's defaults where it says nothing); ``nodes``
    as `sbatch -N` would give it, over the header's."""
    o = script.opt
    nodes_text = str(nodes) if nodes else (o("nodes").value if o("nodes") else None)
    nodes, nodes_max = 1, 1
    if nodes_text:
        lo, _, hi = nodes_text.partition("-")
        nodes = number(lo) or 1
        nodes_max = number(hi) or nodes
    ntasks = number(o("ntasks").value) if o("ntasks") else None
    per_node = number(o("ntasks-per-node").value) if o("ntasks-per-node") else None
    stated = bool(nodes_text)
    if not nodes_text and ntasks and per_node:
        nodes = nodes_max = max(1, math.ceil(ntasks / per_node))
        stated = True
    if per_node is None:
        per_node = math.ceil(ntasks / nodes_max) if ntasks else 1
    cpus = number(o("cpus-per-task").value) if o("cpus-per-task") else 1
    gpt = _gpu_count(o("gpus-per-task").value) if o("gpus-per-task") else None
    gpn = None
    if o("gres"):
        gpn = _gpu_count(o("gres").value, gres=True)
    if o("gpus-per-node"):
        gpn = _gpu_count(o("gpus-per-node").value)
    if gpn is None and o("gpus"):
        total = _gpu_count(o("gpus").value)
        gpn = math.ceil(total / nodes_max) if total else None
    if gpn is None and gpt:
        gpn = gpt * per_node
    mem = mem_mb(o("mem").value) if o("mem") else None
    if mem is None and o("mem-per-cpu"):
        per = mem_mb(o("mem-per-cpu").value)
        mem = per * per_node * (cpus or 1) if per else None
    if mem is None and o("mem-per-gpu") and gpn:
        per = mem_mb(o("mem-per-gpu").value)
        mem = per * gpn if per else None
    return Shape(nodes=nodes, nodes_max=nodes_max, tasks_per_node=per_node, cpus_per_task=cpus or 1,
                 mem_mb=mem, gpus_per_node=gpn, gpus_per_task=gpt,
                 signal=o("signal").value if o("signal") else None, nodes_stated=stated)
