"""`simcluster check --like/--config`: does the #SBATCH header fit the cluster it is meant for?

A header written for a particular cluster names its partition, account and QoS, typed GPUs
and node features, a time limit, a node count and per-node CPUs and memory. Slurm refuses a
header that no node or partition of that cluster can satisfy, or (with
EnforcePartLimits=NO, Slurm's default) accepts it and keeps it pending forever. This module
judges the header against a ClusterSpec (a mirror of a production slurm.conf, or a
cluster.yaml) the way slurmctld 22.05 does at submission, and says at the header line what
Slurm would answer, in its own words, and what the cluster offers instead.

What each request is compared with:

* the partition (`-p`, a comma list, or the default one) must exist;
* `--time` against the partition's MaxTime, the node count against its nodes, MaxNodes and
  MinNodes (a QoS with the PartitionTimeLimit / PartitionMaxNodes / PartitionMinNodes flag
  lifts them), the account against AllowAccounts/DenyAccounts, the QoS against
  AllowQos/DenyQos and the QoS the accounting database defines;
* what one node must offer (GPUs of a type, CPUs, memory, features) against the
  partition's nodes: each request alone, then all of them on one node, then enough such
  nodes for the job.

Per-node amounts are judged only where the header fixes them (`--ntasks` without
`--ntasks-per-node` or `--nodes` lets Slurm spread the tasks over as many nodes as it
needs). A job with several partitions fits when one of them takes it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from provisioner.check.options import SHORT_OPTIONS

from provisioner.check.script import HeaderOpt, Script
from provisioner.check.rules.core import ERROR, WARNING, Edit, Finding, fix_text
from provisioner.check.shape import mem_mb, number, shape_of
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec

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


# ---------------------------------------------------------------- Slurm values

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


def _minutes(seconds: int) -> int:
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


def _names(value: Optional[str]) -> Optional[List[str]]:
    """A partition's comma list (AllowAccounts=a,b) in lower case; None when unset or ALL."""
    if value is None or not value.strip():
        return None
    items = [x.strip().lower() for x in value.split(",") if x.strip()]
    return None if "all" in items else items


def _limit(value: Optional[str]) -> Optional[int]:
    """A partition's node limit (MaxNodes=4, UNLIMITED) as a number; None for none."""
    if value is None or value.strip().upper() in ("UNLIMITED", "INFINITE", ""):
        return None
    try:
        return int(value)
    except ValueError:
        return None


# ---------------------------------------------------------------- node features (-C)

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


# ---------------------------------------------------------------- what the header asks

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


# ---------------------------------------------------------------- the cluster's side

def node_type(n: NodeSpec) -> str:
    """One node's shape as a header would ask for it: '64 CPUs, 250G, gpu:h100:8, features ib,h100'."""
    parts = [f"{n.cpus} CPUs", mem_text(n.memory)]
    if n.gpus:
        parts.append(f"gpu:{n.gpu_type}:{len(n.gpus)}" if n.gpu_type else f"gpu:{len(n.gpus)}")
    if n.features:
        parts.append("features " + ",".join(n.features))
    return ", ".join(parts)


def node_types(nodes: Sequence[NodeSpec]) -> str:
    """'2 x (64 CPUs, 250G, gpu:h100:8); 1 x (32 CPUs, 125G)': the node types of a partition."""
    counts: Dict[str, int] = {}
    for n in nodes:
        t = node_type(n)
        counts[t] = counts.get(t, 0) + 1
    return "; ".join(f"{c} x ({t})" for t, c in counts.items())


def partitions_text(spec: ClusterSpec) -> str:
    return ", ".join(p.name + (" (default)" if p.default else "") for p in spec.partitions)


def _enforce_part_limits(spec: ClusterSpec) -> str:
    """EnforcePartLimits as slurmctld reads it: NO (Slurm's default), ANY or ALL."""
    v = (conf_value(spec, "EnforcePartLimits") or "NO").upper()
    return {"YES": "ANY", "1": "ANY", "0": "NO"}.get(v, v)


def _enforce_accounting(spec: ClusterSpec) -> Set[str]:
    """AccountingStorageEnforce's parts, with what each implies (qos/limits/safe: associations)."""
    if not spec.accounting:
        return set()
    parts = {x.strip().lower() for x in (conf_value(spec, "AccountingStorageEnforce") or "").split(",") if x.strip()}
    if "all" in parts:
        parts |= {"associations", "limits", "qos", "safe", "wckeys"}
    if parts & {"qos", "limits", "safe"}:
        parts.add("associations")
    return parts


@dataclass
class Judge:
    """One header against one cluster: the findings for each partition the job names."""
    script: Script
    spec: ClusterSpec
    ask: Ask
    findings: List[Finding] = field(default_factory=list)

    @property
    def enforce(self) -> str:
        return _enforce_part_limits(self.spec)

    def add(self, opt: Optional[HeaderOpt], severity: str, rule: str, message: str, offer: str,
            value: Optional[str] = None, insert: Optional[str] = None) -> None:
        """A finding at ``opt``'s line (the header's first line without one). ``value`` replaces
        the option's value there; ``insert`` is an #SBATCH line to add after the header."""
        path = self.script.path
        line = opt.line if opt is not None else self._first_header_line()
        edits: List[Edit] = []
        if opt is not None and value is not None:
            new = set_option(self.script.line_text(line), opt, value)
            if new is not None:
                edits = [Edit(path, line, line, new)]
        if insert is not None:
            last = max((o.line for o in self.script.header), default=1)
            edits = [Edit(path, last + 1, last, insert)]
        if not edits:
            fix = "# " + offer
        else:  # an insertion's text already ends with a comment saying where it goes
            fix = fix_text(edits, line, path) + ("; " if insert is not None else "   # ") + offer
        self.findings.append(Finding(path, line, severity, rule, message, fix, source=SOURCE, edits=edits))

    def _first_header_line(self) -> int:
        return min((o.line for o in self.script.header), default=1)

    def held_or_refused(self, refused: str, reason: str) -> str:
        """What Slurm does with a request over a partition limit, by EnforcePartLimits."""
        if self.enforce == "NO":
            if reason.startswith("Partition"):
                # the submission's own test says PartitionConfig; the scheduler's next pass says which limit
                reason = f"PartitionConfig, then {reason}"
            return f"sbatch accepts the job and it stays pending forever (Reason={reason}; EnforcePartLimits=NO)"
        return f'sbatch refuses the job: "{refused}" (EnforcePartLimits={self.enforce})'


def set_option(line: str, opt: HeaderOpt, value: str) -> Optional[str]:
    """``line`` (an #SBATCH line) with ``opt``'s value replaced by ``value`` (inside the quotes
    it had, if any); None when the option cannot be found there as written."""
    long = "[-_]".join(re.escape(w) for w in opt.key.split("-"))
    shorts = [s for s, k in SHORT_OPTIONS.items() if k == opt.key]
    v = re.escape(opt.value)
    patterns = [rf"(--{long}(?:=|\s+))([\"']?)({v})\2(?=\s|#|$)"]
    patterns += [rf"((?<![\w-])-{s}(?:=|\s*))([\"']?)({v})\2(?=\s|#|$)" for s in shorts]
    for pat in patterns:
        m = re.search(pat, line)
        if m:
            return line[:m.start(3)] + value + line[m.end(3):]
    return None


def _qos_flags(spec: ClusterSpec, name: Optional[str]) -> Set[str]:
    if not name:
        return set()
    for q in spec.qos:
        if q.name.lower() == name.lower():
            return {f.lower() for f in q.flags}
    return set()


def judge_partition(j: Judge, part: PartitionSpec) -> List[Finding]:
    """The findings of the header in ``part`` (none: the job can run there)."""
    before = len(j.findings)
    spec, ask = j.spec, j.ask
    nodes = [spec.node(n) for n in part.nodes]
    name = part.name
    flags = _qos_flags(spec, ask.qos.value if ask.qos else None)
    offer = f"partition {name}: {len(nodes)} node{'s' if len(nodes) != 1 else ''}, {node_types(nodes)}"

    # time limit
    if ask.time is not None:
        try:
            seconds = slurm_seconds(ask.time.value)
        except ValueError:
            j.add(ask.time, ERROR, "cluster.time-limit",
                  f"--time={ask.time.value} is not a time sbatch reads: it refuses the job (\"Invalid --time "
                  "specification\")", "times: MINUTES, HH:MM:SS, DAYS-HH[:MM[:SS]]")
            seconds = None
        limit = slurm_seconds(part.max_time) if part.max_time else None
        if seconds is not None and limit is not None and _minutes(seconds) > _minutes(limit) \
                and "partitiontimelimit" not in flags:
            j.add(ask.time, ERROR, "cluster.time-limit",
                  f"--time={ask.time.value} is above partition {name}'s MaxTime={part.max_time}: "
                  + j.held_or_refused(INVALID_TIME, "PartitionTimeLimit"),
                  f"partition {name} allows at most {part.max_time}", part.max_time)

    # node count
    if ask.nodes_given:
        max_nodes = _limit(part.option("MaxNodes"))
        min_nodes = _limit(part.option("MinNodes"))
        written = ask.nodes_opt.value if ask.nodes_opt is not None else str(ask.nodes_max)
        how = f"--nodes={written}" + ("" if ask.nodes_opt is not None else " (given at submission)")
        allowed = min(len(nodes), max_nodes) if max_nodes is not None else len(nodes)
        if ask.nodes_min > len(nodes):
            j.add(ask.nodes_opt, ERROR, "cluster.nodes",
                  f"{how} asks for more nodes than partition {name} has ({len(nodes)}): "
                  + j.held_or_refused(INVALID_NODE_COUNT, "PartitionNodeLimit"),
                  f"partition {name} has {len(nodes)} node{'s' if len(nodes) != 1 else ''}"
                  + (f", MaxNodes={max_nodes}" if max_nodes is not None else ""), str(allowed))
        elif max_nodes is not None and ask.nodes_max > max_nodes and "partitionmaxnodes" not in flags:
            j.add(ask.nodes_opt, ERROR, "cluster.nodes",
                  f"{how} is above partition {name}'s MaxNodes={max_nodes}: "
                  + j.held_or_refused(INVALID_NODE_COUNT, "PartitionNodeLimit"),
                  f"partition {name} allows at most {max_nodes} node{'s' if max_nodes != 1 else ''} per job",
                  str(allowed))
        elif min_nodes is not None and ask.nodes_min < min_nodes and "partitionminnodes" not in flags:
            j.add(ask.nodes_opt, ERROR, "cluster.nodes",
                  f"{how} is below partition {name}'s MinNodes={min_nodes}: "
                  + j.held_or_refused(INVALID_NODE_COUNT, "PartitionNodeLimit"),
                  f"partition {name} takes jobs of at least {min_nodes} nodes", str(min_nodes))

    _judge_nodes(j, part, nodes, offer)
    _judge_account(j, part)
    _judge_qos(j, part)
    return j.findings[before:]


def gpu_typed(g: GpuAsk) -> Callable[[NodeSpec], bool]:
    """Whether a node has GPUs of the type ``g`` asks for (any GPUs when it names none)."""
    want = g.type.lower() if g.type else None
    if want:
        return lambda n: bool(n.gpus) and (n.gpu_type or "").lower() == want
    return lambda n: bool(n.gpus)


def node_tests(ask: Ask) -> List[Tuple[str, Callable[[NodeSpec], bool]]]:
    """What one node of the job must offer, each as (what, test of a node)."""
    tests: List[Tuple[str, Callable[[NodeSpec], bool]]] = []
    g = ask.gpus
    if g is not None:
        typed = gpu_typed(g)
        if g.per_node:
            tests.append((f"{g.count} x {'gpu:' + g.type if g.type else 'gpu'}",
                          lambda n: typed(n) and len(n.gpus) >= g.count))
        else:
            tests.append(("GPUs" if not g.type else f"gpu:{g.type}", typed))
    if ask.cpus is not None:
        cpus = ask.cpus
        tests.append((f"{cpus} CPUs", lambda n: n.cpus >= cpus))
    if ask.mem is not None:
        mem = ask.mem
        tests.append((f"{mem_text(mem)} of memory", lambda n: n.memory >= mem))
    if ask.constraint is not None:
        try:
            test, _ = parse_constraint(ask.constraint.value)
        except FeatureSyntax:
            test = None
        if test is not None:
            tests.append((f"features {ask.constraint.value}", lambda n: test(set(n.features))))
    return tests


def fits_node(ask: Ask, node: NodeSpec) -> bool:
    """Whether ``node`` offers what one node of the job asks for."""
    return all(t(node) for _, t in node_tests(ask))


def _judge_nodes(j: Judge, part: PartitionSpec, nodes: List[NodeSpec], offer: str) -> None:
    """What one node must offer (GPUs, CPUs, memory, features) against the partition's nodes."""
    ask, spec, name = j.ask, j.spec, part.name
    start = len(j.findings)
    all_nodes = list(spec.nodes)

    for gres, opt in ask.other_gres:
        j.add(opt, ERROR, "cluster.gres",
              f"--gres={opt.value}: this cluster has no generic resource '{gres}' (only gpu): sbatch refuses "
              f'the job: "{INVALID_GRES}"', f"gres here: gpu ({node_types(nodes)})")

    g = ask.gpus
    if g is not None:
        typed = gpu_typed(g)
        if g.type and not any(typed(n) for n in nodes):
            types = sorted({n.gpu_type for n in nodes if n.gpus and n.gpu_type})
            untyped = any(n.gpus and not n.gpu_type for n in nodes)
            elsewhere = sorted({p.name for p in spec.partitions
                                if any(typed(spec.node(x)) for x in p.nodes)})
            where = (f" (gpu:{g.type} nodes are in partition{'s' if len(elsewhere) > 1 else ''} "
                     f"{', '.join(elsewhere)})" if elsewhere else
                     (" and no node of this cluster has" if not any(typed(n) for n in all_nodes) else ""))
            has = (f"its GPU types: {', '.join(types)}" if types else
                   "its GPUs are untyped" if untyped else "it has no GPUs")
            new = None
            if len(types) == 1:
                new = _with_gpu_type(g, types[0])
            j.add(g.opt, ERROR, "cluster.gpu-type",
                  f"--{g.opt.key}={g.opt.value}: no node of partition {name} has GPU type {g.type}{where}; "
                  f"{has}: sbatch refuses the job: \"{NODE_CONFIG}\"", offer, new)
        elif g.per_node:
            most = max((len(n.gpus) for n in nodes if typed(n)), default=0)
            if g.count > most:
                what = f"gpu:{g.type}" if g.type else "GPUs"
                j.add(g.opt, ERROR, "cluster.gpus-per-node",
                      f"{g.count} {what} per node asked (--{g.opt.key}={g.opt.value}), and partition {name}'s "
                      f"nodes have at most {most}: sbatch refuses the job: \"{NODE_CONFIG}\"", offer,
                      _with_gpu_count(g, most) if most else None)
        else:
            total = sum(len(n.gpus) for n in nodes if typed(n))
            max_nodes = _limit(part.option("MaxNodes"))
            if max_nodes is not None:
                total = sum(sorted((len(n.gpus) for n in nodes if typed(n)), reverse=True)[:max_nodes])
            if g.count > total:
                j.add(g.opt, ERROR, "cluster.gpus-per-node",
                      f"--{g.opt.key}={g.opt.value} asks for {g.count} GPUs and partition {name} has {total}"
                      + (f" on the {max_nodes} nodes a job may use" if max_nodes is not None else "")
                      + f": sbatch refuses the job: \"{NODE_CONFIG}\"", offer)

    if ask.cpus is not None:
        most = max((n.cpus for n in nodes), default=0)
        if ask.cpus > most:
            tpn = ask.tasks_per_node or 1
            new = None
            if ask.cpus_opt is not None and ask.cpus_opt.key == "cpus-per-task" and most // tpn >= 1:
                new = str(most // tpn)
            j.add(ask.cpus_opt, ERROR, "cluster.cpus-per-node",
                  f"{ask.cpus} CPUs per node asked ({_cpus_how(j)}), and partition {name}'s nodes have at most "
                  f"{most}: sbatch refuses the job: \"CPU count per node can not be satisfied\", "
                  f"\"{NODE_CONFIG}\"", offer, new)

    if ask.mem is not None:
        most = max((n.memory for n in nodes), default=0)
        if ask.mem > most:
            new = None
            opt = ask.mem_opt
            if opt.key == "mem":
                new = mem_text(most)
            elif opt.key == "mem-per-cpu" and ask.cpus:
                new = mem_text(most // ask.cpus) if most // ask.cpus else None
            elif opt.key == "mem-per-gpu" and ask.gpus is not None and ask.gpus.count:
                new = mem_text(most // ask.gpus.count) if most // ask.gpus.count else None
            j.add(opt, ERROR, "cluster.memory-per-node",
                  f"{mem_text(ask.mem)} of memory per node asked (--{opt.key}={opt.value}"
                  + (f" x {ask.mem // max(mem_mb(opt.value) or 1, 1)}" if opt.key != "mem" else "")
                  + f"), and partition {name}'s nodes have at most {mem_text(most)} (RealMemory={most}): sbatch "
                  f"refuses the job: \"Memory specification can not be satisfied\", \"{NODE_CONFIG}\"", offer, new)

    if ask.constraint is not None:
        try:
            test, names = parse_constraint(ask.constraint.value)
        except FeatureSyntax:
            j.add(ask.constraint, ERROR, "cluster.feature",
                  f"--constraint={ask.constraint.value} is not a feature expression Slurm reads: sbatch refuses "
                  f"the job: \"{INVALID_FEATURE}\"", "use NAME, A&B, A|B, [A|B]")
        else:
            known = {f for n in all_nodes for f in n.features}
            unknown = [x for x in names if x not in known]
            here = sorted({f for n in nodes for f in n.features})
            offer_f = f"features in partition {name}: {', '.join(here) if here else 'none'} ({node_types(nodes)})"
            if unknown:
                j.add(ask.constraint, ERROR, "cluster.feature",
                      f"--constraint={ask.constraint.value}: no node of this cluster has feature"
                      f"{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: sbatch refuses the job: "
                      f"\"{INVALID_FEATURE}\"", offer_f)
            elif not any(test(set(n.features)) for n in nodes):
                j.add(ask.constraint, ERROR, "cluster.feature",
                      f"--constraint={ask.constraint.value}: no node of partition {name} has "
                      f"{'these features' if len(names) > 1 else 'this feature'}: sbatch refuses the job: "
                      f"\"{NODE_CONFIG}\"", offer_f)

    tests = node_tests(ask)
    if len(j.findings) > start or not tests:
        return  # one request no node offers is reported as itself, not again in the combination
    fit = [n for n in nodes if all(t(n) for _, t in tests)]
    line_opt = next((o for o in (g.opt if g else None, ask.cpus_opt, ask.mem_opt, ask.constraint) if o), None)
    wants = ", ".join(w for w, _ in tests)
    if not fit:
        j.add(line_opt, ERROR, "cluster.node-config",
              f"no node of partition {name} has all of {wants} (each is on some node, not together): sbatch "
              f"refuses the job: \"{NODE_CONFIG}\"", offer)
    elif ask.nodes_given and len(fit) < ask.nodes_min <= len(nodes):
        j.add(ask.nodes_opt or line_opt, ERROR, "cluster.node-config",
              f"the job asks for {ask.nodes_min} nodes with {wants}, and partition {name} has {len(fit)} such "
              f"node{'s' if len(fit) != 1 else ''}: sbatch refuses the job: \"{NODE_CONFIG}\"", offer,
              str(len(fit)) if ask.nodes_opt is not None else None)


def _cpus_how(j: Judge) -> str:
    o = j.script.opt
    parts = []
    if j.ask.tasks_per_node and j.ask.tasks_per_node > 1:
        parts.append(f"{j.ask.tasks_per_node} tasks per node")
    if o("cpus-per-task"):
        parts.append(f"--cpus-per-task={o('cpus-per-task').value}")
    if o("cpus-per-gpu") and j.ask.cpus_opt is o("cpus-per-gpu"):
        parts = [f"--cpus-per-gpu={o('cpus-per-gpu').value} x {j.ask.gpus.count} GPUs"]
    return " x ".join(parts) or "one task"


def _with_gpu_type(g: GpuAsk, new_type: str) -> Optional[str]:
    """The option's value with its GPU type replaced."""
    if g.opt.key == "gres":
        return re.sub(rf"(^|,)gpu:{re.escape(g.type)}(?=:|,|$)", rf"\1gpu:{new_type}", g.opt.value, count=1)
    return re.sub(rf"^{re.escape(g.type)}(?=:|,|$)", new_type, g.opt.value, count=1)


def _with_gpu_count(g: GpuAsk, count: int) -> Optional[str]:
    """The option's value with its GPU count per node set to ``count`` (--gres, --gpus-per-node)."""
    if g.opt.key not in ("gres", "gpus-per-node"):
        return None
    typed = f"{g.type}:" if g.type else ""
    if g.opt.key == "gres":
        return re.sub(r"(^|,)gpu(:[^,]*)?(?=,|$)", rf"\1gpu:{typed}{count}", g.opt.value, count=1)
    return f"{typed}{count}"


@dataclass(frozen=True)
class _Listed:
    """What a partition's Allow*/Deny* list (accounts or QoS) is judged with."""

    option: str  # the sbatch option: "account"
    noun: str  # in messages: "accounts"
    key: str  # the partition's keys: Allow<key>, Deny<key>
    rule: str
    refused: str  # sbatch's error
    held: str  # the reason a held job shows
    slurm_noun: str  # as slurmctld's message names it
    without: str  # what a job without the option gets
    unless: str  # ... which must be one of the allowed
    default_ok: Callable[[List[str]], bool]  # the default passes the Allow list without the option


ACCOUNTS = _Listed("account", "accounts", "Accounts", "cluster.account", INVALID_ACCOUNT, "AccountNotAllowed",
                   "account", "the job runs under your default account", "that", lambda allow: False)
QOS = _Listed("qos", "QoS", "Qos", "cluster.qos", INVALID_QOS, "QOSNotAllowed", "QOS",
              "the job gets your default QoS (normal unless your association sets another)", "your default",
              lambda allow: "normal" in allow)


def _judge_partition_list(j: Judge, part: PartitionSpec, listed: _Listed, opt: Optional[HeaderOpt],
                          value: Optional[str]) -> bool:
    """--account / --qos (``value``, lower case; None when not given) against the partition's
    Allow*/Deny* list; True when it reported something."""
    name = part.name
    allow = _names(part.option(f"Allow{listed.key}"))
    deny = _names(part.option(f"Deny{listed.key}"))
    if allow is not None:
        allowed = f"partition {name} allows {listed.noun} {', '.join(allow)}"
        if value is None:
            if not listed.default_ok(allow):
                j.add(None, WARNING, listed.rule,
                      f"no --{listed.option}: {listed.without}, and partition {name} allows only {', '.join(allow)}: "
                      f"unless {listed.unless} is one of them, " + j.held_or_refused(listed.refused, listed.held),
                      allowed, insert=f"#SBATCH --{listed.option}={allow[0]}")
            return True
        if value not in allow:
            j.add(opt, ERROR, listed.rule,
                  f"--{listed.option}={opt.value}: {allowed} (Allow{listed.key}): " + j.held_or_refused(
                      listed.refused, f"\"Job's {listed.slurm_noun} not permitted to use this partition ({name} "
                      f"allows {','.join(allow)} not {value})\""), allowed, allow[0])
            return True
    elif deny is not None and value is not None and value in deny:
        j.add(opt, ERROR, listed.rule,
              f"--{listed.option}={opt.value}: partition {name} denies {listed.noun} {', '.join(deny)} "
              f"(Deny{listed.key}): " + j.held_or_refused(
                  listed.refused, f"\"Job's {listed.slurm_noun} not permitted to use this partition ({name} denies "
                  f"{','.join(deny)} including {value})\""),
              f"partition {name} denies {listed.noun} {', '.join(deny)}")
        return True
    return False


def _judge_account(j: Judge, part: PartitionSpec) -> None:
    """-A against the accounting database first (slurmctld looks the association up before it
    looks at the partition), then against the partition's AllowAccounts / DenyAccounts."""
    ask, spec, name = j.ask, j.spec, part.name
    acct = ask.account.value.strip().lower() if ask.account else None
    allow = _names(part.option("AllowAccounts"))
    enforce = _enforce_accounting(spec)
    known = {a.name.lower() for a in spec.accounts}
    if acct is not None and spec.accounting and known and acct not in known | {"root", "simcluster"}:
        accounts = f"accounts: {', '.join(sorted(known))}"
        if "associations" in enforce:
            j.add(ask.account, ERROR, "cluster.account",
                  f"--account={ask.account.value}: no such account in this cluster's accounting database, and "
                  f"AccountingStorageEnforce={conf_value(spec, 'AccountingStorageEnforce')} refuses it: "
                  f"\"{INVALID_ACCOUNT}\"", accounts, (allow or sorted(known))[0])
        else:
            j.add(ask.account, WARNING, "cluster.account",
                  f"--account={ask.account.value}: no such account in this cluster's accounting database: without "
                  "associations in AccountingStorageEnforce Slurm runs the job under your default account instead"
                  + (f", and partition {name} allows only {', '.join(allow)}" if allow else ""),
                  accounts, (allow or sorted(known))[0])
        return
    _judge_partition_list(j, part, ACCOUNTS, ask.account, acct)


def _judge_licenses(j: Judge) -> None:
    """-L/--licenses against the cluster's Licenses= (name:count, counts added up)."""
    opt = j.script.opt("licenses")
    if opt is None:
        return
    have: Dict[str, int] = {}
    for item in (conf_value(j.spec, "Licenses") or "").split(","):
        name, _, count = item.strip().partition(":")
        if name:
            have[name.lower()] = int(count) if count.isdigit() else 1
    offer = f"licenses here: {', '.join(f'{k}:{v}' for k, v in have.items()) or 'none'} (Licenses=)"
    for item in re.split(r"[,|]", opt.value.strip("'\"")):
        name, _, count = item.strip().partition(":")
        want = int(count) if count.isdigit() else 1
        if name and (name.lower() not in have or want > have[name.lower()]):
            what = (f"this cluster has no license {name}" if name.lower() not in have
                    else f"{want} {name} licenses asked, the cluster has {have[name.lower()]}")
            j.add(opt, ERROR, "cluster.license",
                  f"--licenses={opt.value}: {what}: sbatch refuses the job: \"{INVALID_LICENSES}\"", offer)
            return


def _judge_qos(j: Judge, part: PartitionSpec) -> None:
    """--qos against the accounting database, the partition's AllowQos / DenyQos, then the
    QoS the job's account may use."""
    ask, spec = j.ask, j.spec
    qos = ask.qos.value.strip().lower() if ask.qos else None
    enforce = _enforce_accounting(spec)
    defined = {q.name.lower() for q in spec.qos} | {"normal"}
    if qos is not None and spec.accounting and qos not in defined:
        if "qos" in enforce:
            j.add(ask.qos, ERROR, "cluster.qos",
                  f"--qos={ask.qos.value}: no such QoS in this cluster's accounting database: sbatch refuses the "
                  f"job: \"{INVALID_QOS}\" (AccountingStorageEnforce={conf_value(spec, 'AccountingStorageEnforce')})",
                  f"QoS here: {', '.join(sorted(defined))}", sorted(defined)[0])
        else:
            j.add(ask.qos, WARNING, "cluster.qos",
                  f"--qos={ask.qos.value}: no such QoS in this cluster's accounting database: without qos in "
                  "AccountingStorageEnforce Slurm takes the job and gives it no QoS (its priority, limits and "
                  "preemption do not apply)", f"QoS here: {', '.join(sorted(defined))}", sorted(defined)[0])
        return
    if _judge_partition_list(j, part, QOS, ask.qos, qos):
        return
    acct = ask.account.value.strip().lower() if ask.account else None
    if qos is not None and "qos" in enforce and acct is not None:
        for a in spec.accounts:
            if a.name.lower() == acct and a.qos and qos not in {x.lower() for x in a.qos}:
                j.add(ask.qos, ERROR, "cluster.qos",
                      f"--qos={ask.qos.value}: account {a.name} may use QoS {', '.join(a.qos)} only: sbatch refuses "
                      f"the job: \"{INVALID_QOS}\"", f"account {a.name} may use QoS {', '.join(a.qos)}", a.qos[0])


def judge(script: Script, spec: ClusterSpec, nodes: Optional[int] = None) -> List[Finding]:
    """The findings of ``script``'s header on the cluster ``spec`` describes (``nodes``: the
    node count `sbatch -N` gives). A job with several partitions is judged in each; it fits
    when one of them takes it."""
    ask = ask_of(script, nodes)
    j = Judge(script, spec, ask)
    known = {p.name: p for p in spec.partitions}
    if ask.partitions:
        missing = [p for p in ask.partitions if p not in known]
        if missing:
            # Slurm stops at the name; the rest of the header is judged in the partition the fix
            # suggests, so that one round of fixes is enough
            suggestion, rest = _partition_that_fits(script, spec, nodes)
            j.add(ask.part_opt, ERROR, "cluster.partition",
                  f"--partition={ask.part_opt.value}: this cluster has no partition "
                  f"{', '.join(missing)}: sbatch refuses the job: \"{INVALID_PARTITION}\"",
                  f"partitions: {partitions_text(spec)}; "
                  + (f"{suggestion} takes the rest of this header" if not rest else
                     f"the other findings judge the rest of this header in {suggestion}"), suggestion)
            return sorted(j.findings + rest, key=lambda f: (f.line, f.rule))
        parts = [known[p] for p in ask.partitions]
    else:
        parts = [next((p for p in spec.partitions if p.default), spec.partitions[0])]
    _judge_licenses(j)
    per_part = [judge_partition(Judge(script, spec, ask), p) for p in parts]
    taking = [fs for fs in per_part if not any(f.severity == ERROR for f in fs)]
    if taking:  # one of the partitions takes the job: what remains to say is about that one
        return sorted(j.findings + taking[0], key=lambda f: (f.line, f.rule))
    out: List[Finding] = list(j.findings)
    seen = set()
    for fs in per_part:
        for f in fs:
            if (f.line, f.rule, f.message) not in seen:
                seen.add((f.line, f.rule, f.message))
                out.append(f)
    return sorted(out, key=lambda f: (f.line, f.rule))


def _partition_that_fits(script: Script, spec: ClusterSpec, nodes: Optional[int]) -> Tuple[str, List[Finding]]:
    """The partition to suggest, and the header's findings there: the first partition
    (default first) that takes the rest of the header, else the default one."""
    ask = ask_of(script, nodes)
    order = sorted(spec.partitions, key=lambda p: not p.default)
    for p in order:
        if not judge_partition(Judge(script, spec, ask), p):
            return p.name, []
    return order[0].name, judge_partition(Judge(script, spec, ask), order[0])


def describe(spec: ClusterSpec) -> str:
    """One line about the cluster a header is judged against."""
    return (f"{len(spec.nodes)} node{'s' if len(spec.nodes) != 1 else ''}, partitions {partitions_text(spec)}"
            + (", accounting" if spec.accounting else ""))
