"""What a job's #SBATCH header asks of a cluster (Ask: partitions, time, nodes, tasks, CPUs,
memory, GPUs by type, features, account, QoS), read the way slurmctld reads it, with Slurm's
values (times, memory, limits, the -C constraint grammar) and Slurm's own refusal texts."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, List, Optional, Set, Tuple

from provisioner.check.script import HeaderOpt, Script
from provisioner.check.shape import mem_mb, number, shape_of
from provisioner.config.types import ClusterSpec


SOURCE = "cluster"

# Slurm's own words (slurm_errno.c and sbatch, 22.05) for what it answers.
INVALID_PARTITION = "Invalid partition name specified"
INVALID_TIME = "Requested time limit is invalid (missing or exceeds some limit)"
INVALID_NODE_COUNT = "Node count specification invalid"
NODE_CONFIG = "Requested node configuration is not available"
INVALID_FEATURE = "Invalid feature specification"
INVALID_GRES = "Invalid generic resource (gres) specification"
INVALID_ACCOUNT = "Invalid account or account/partition combination specified"
INVALID_QOS = "Invalid qos specification"
INVALID_LICENSES = "Invalid license specification"


def slurm_seconds(text: str) -> Optional[int]:
    """A Slurm time ('60', '1:30:00', '2-00:00:00', 'INFINITE') in seconds; None for no limit.
    Raises ValueError for text sbatch does not read as a time."""
    t = text.strip().upper()
    if t in ("INFINITE", "UNLIMITED", "-1"):
        return None
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", t)
    if not m:
        raise ValueError(text)
    days, a, b, c = m.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        return ((int(days) * 24 + int(a)) * 60 + int(b or 0)) * 60 + int(c or 0)
    if c is not None:     # hours:minutes:seconds
        return (int(a) * 60 + int(b)) * 60 + int(c)
    if b is not None:     # minutes:seconds
        return int(a) * 60 + int(b)
    return int(a) * 60    # minutes


def minutes_of(seconds: int) -> int:
    """Slurm keeps time limits in whole minutes, rounding seconds up."""
    return -(-seconds // 60)


def mem_text(mb: int) -> str:
    """Memory as sbatch takes it: '250G' where it is whole gigabytes, else '256000M'."""
    return f"{mb // 1024}G" if mb % 1024 == 0 and mb >= 1024 else f"{mb}M"


def conf_value(spec: ClusterSpec, key: str) -> Optional[str]:
    """The value a `slurmConf:` line of the spec gives ``key`` (any case; the last one wins)."""
    value = None
    for line in spec.slurm_conf_extra:
        k, _, v = line.partition("=")
        if k.strip().lower() == key.lower():
            value = v.strip()
    return value


def names_of(value: Optional[str]) -> Optional[List[str]]:
    """A partition's comma list (AllowAccounts=a,b) in lower case; None when unset or ALL."""
    if value is None or not value.strip():
        return None
    items = [x.strip().lower() for x in value.split(",") if x.strip()]
    return None if "all" in items else items


def limit_value(value: Optional[str]) -> Optional[int]:
    """A partition's node limit (MaxNodes=4, UNLIMITED) as a number; None for none."""
    if value is None or value.strip().upper() in ("UNLIMITED", "INFINITE", ""):
        return None
    try:
        return int(value)
    except ValueError:
        return None


class FeatureSyntax(ValueError):
    """A --constraint Slurm cannot parse."""


def parse_constraint(text: str) -> Tuple[Callable[[Set[str]], bool], List[str]]:
    """A node-feature expression (`ib&h100`, `a100|h100`, `[rack1|rack2]`, `(a|b)&c`, `ib*2`)
    as a test of one node's features, and the feature names it uses. Matching OR (`[..]`)
    and counts (`*2`) are read as plain OR and plain names: what one node must offer."""
    tokens = re.findall(r"[A-Za-z0-9_.+:-]+|\*\d+|[&|,()\[\]]", text)
    if "".join(tokens) != re.sub(r"\s+", "", text) or not tokens:
        raise FeatureSyntax(text)
    pos = 0
    names: List[str] = []

    def peek() -> Optional[str]:
        return tokens[pos] if pos < len(tokens) else None

    def expr():
        nonlocal pos
        terms = [term()]
        while peek() == "|":
            pos += 1
            terms.append(term())
        return lambda f: any(t(f) for t in terms)

    def term():
        nonlocal pos
        factors = [factor()]
        while peek() in ("&", ","):
            pos += 1
            factors.append(factor())
        return lambda f: all(x(f) for x in factors)

    def factor():
        nonlocal pos
        tok = peek()
        if tok in ("(", "["):
            pos += 1
            inner = expr()
            if peek() != {"(": ")", "[": "]"}[tok]:
                raise FeatureSyntax(text)
            pos += 1
            if peek() and peek().startswith("*"):
                pos += 1
            return inner
        if tok is None or not re.fullmatch(r"[A-Za-z0-9_.+:-]+", tok):
            raise FeatureSyntax(text)
        pos += 1
        if peek() and peek().startswith("*"):
            pos += 1
        names.append(tok)
        return lambda f, name=tok: name in f

    test = expr()
    if pos != len(tokens):
        raise FeatureSyntax(text)
    return test, names


@dataclass
class GpuAsk:
    type: Optional[str]
    count: int
    opt: HeaderOpt
    per_node: bool  # False: --gpus=N over the whole job, nodes not fixed by the header


def _gpu_items(value: str, gres: bool) -> List[Tuple[str, Optional[str], int]]:
    """(name, type, count) of each entry: --gres 'gpu:h100:2,nvme' / --gpus* 'h100:8', '8'."""
    out = []
    for item in value.split(","):
        fields = [f for f in item.strip().split(":") if f != ""]
        if not fields:
            continue
        name = "gpu"
        if gres:
            name = fields.pop(0)
        count = 1
        if fields and fields[-1].isdigit():
            count = int(fields.pop())
        gtype = fields[0] if fields else None
        out.append((name, gtype, count))
    return out


@dataclass
class Ask:
    """What the header asks of the cluster, each with the #SBATCH line that says it."""
    partitions: List[str]
    part_opt: Optional[HeaderOpt]
    time: Optional[HeaderOpt]
    nodes_min: int
    nodes_max: int
    nodes_opt: Optional[HeaderOpt]
    nodes_given: bool                 # the header or `check --nodes` fixes the node count
    gpus: Optional[GpuAsk]
    other_gres: List[Tuple[str, HeaderOpt]]
    cpus: Optional[int]               # per node
    cpus_opt: Optional[HeaderOpt]
    tasks_per_node: Optional[int]
    mem: Optional[int]                # MB per node
    mem_opt: Optional[HeaderOpt]
    constraint: Optional[HeaderOpt]
    account: Optional[HeaderOpt]
    qos: Optional[HeaderOpt]


def ask_of(script: Script, nodes: Optional[int] = None) -> Ask:
    """The header's requests (``nodes``: the node count `sbatch -N` gives, over the header's)."""
    def o(key: str) -> Optional[HeaderOpt]:
        # sbatch reads `-C "ib&h100"` as ib&h100: the rules see the value without its quotes
        found = script.opt(key)
        if found is None:
            return None
        value = found.value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        return HeaderOpt(found.key, value, found.line, found.text)

    shape = shape_of(script, nodes)
    nodes_given = shape.nodes_stated and (nodes is not None or o("nodes") is not None)
    per_node_opt = o("ntasks-per-node")
    ntasks = number(o("ntasks").value) if o("ntasks") else None
    if per_node_opt is not None:
        tpn = number(per_node_opt.value)
    elif ntasks:
        tpn = math.ceil(ntasks / shape.nodes_max) if nodes_given else None
    else:
        tpn = 1
    cpt = number(o("cpus-per-task").value) if o("cpus-per-task") else 1
    cpt = cpt or 1

    gpus: Optional[GpuAsk] = None
    other: List[Tuple[str, HeaderOpt]] = []
    if o("gres"):
        for name, gtype, count in _gpu_items(o("gres").value, gres=True):
            if name == "gpu":
                gpus = GpuAsk(gtype, count, o("gres"), True)
            elif name.lower() != "none":
                other.append((name, o("gres")))
    if o("gpus-per-node"):
        items = _gpu_items(o("gpus-per-node").value, gres=False)
        if items:
            gpus = GpuAsk(items[0][1], items[0][2], o("gpus-per-node"), True)
    if gpus is None and o("gpus-per-task"):
        items = _gpu_items(o("gpus-per-task").value, gres=False)
        if items:
            gpus = GpuAsk(items[0][1], items[0][2] * (tpn or 1), o("gpus-per-task"), True)
    if gpus is None and o("gpus"):
        items = _gpu_items(o("gpus").value, gres=False)
        if items:
            total = items[0][2]
            if nodes_given:
                gpus = GpuAsk(items[0][1], math.ceil(total / shape.nodes_max), o("gpus"), True)
            else:
                gpus = GpuAsk(items[0][1], total, o("gpus"), False)

    cpus, cpus_opt = None, None
    if o("cpus-per-task") or per_node_opt is not None or (o("ntasks") and nodes_given):
        cpus = (tpn or 1) * cpt
        cpus_opt = o("cpus-per-task") if (o("cpus-per-task") and cpt > 1) else (per_node_opt or o("ntasks"))
    if o("cpus-per-gpu") and gpus is not None and gpus.per_node:
        by_gpu = (number(o("cpus-per-gpu").value) or 1) * gpus.count
        if cpus is None or by_gpu > cpus:
            cpus, cpus_opt = by_gpu, o("cpus-per-gpu")

    mem, mem_opt = None, None
    if o("mem"):
        m = mem_mb(o("mem").value)
        if m:  # --mem=0: all of a node's memory, whatever it is
            mem, mem_opt = m, o("mem")
    elif o("mem-per-cpu"):
        per = mem_mb(o("mem-per-cpu").value)
        if per:
            mem, mem_opt = per * (cpus or cpt), o("mem-per-cpu")
    elif o("mem-per-gpu") and gpus is not None and gpus.per_node:
        per = mem_mb(o("mem-per-gpu").value)
        if per:
            mem, mem_opt = per * gpus.count, o("mem-per-gpu")

    part = o("partition")
    names = [p.strip() for p in part.value.split(",") if p.strip()] if part else []
    return Ask(partitions=names, part_opt=part, time=o("time"),
               nodes_min=shape.nodes if nodes_given else 1, nodes_max=shape.nodes_max if nodes_given else 1,
               nodes_opt=o("nodes"), nodes_given=nodes_given, gpus=gpus, other_gres=other,
               cpus=cpus, cpus_opt=cpus_opt, tasks_per_node=tpn, mem=mem, mem_opt=mem_opt,
               constraint=o("constraint"), account=o("account"), qos=o("qos"))
