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

import re
from typing import Callable, List, Optional, Tuple

from provisioner.check.access import judge_account, judge_licenses, judge_qos
from provisioner.check.asks import (INVALID_FEATURE, INVALID_GRES, INVALID_NODE_COUNT, INVALID_PARTITION,
                                    INVALID_TIME, NODE_CONFIG, Ask, FeatureSyntax, GpuAsk, ask_of, limit_value,
                                    mem_text, minutes_of, parse_constraint, slurm_seconds)
from provisioner.check.judge import Judge, node_types, partitions_text, qos_flags
from provisioner.check.rules.core import ERROR, Finding
from provisioner.check.script import Script
from provisioner.check.shape import mem_mb
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec


def judge_partition(j: Judge, part: PartitionSpec) -> List[Finding]:
    """The findings of the header in ``part`` (none: the job can run there)."""
    before = len(j.findings)
    spec, ask = j.spec, j.ask
    nodes = [spec.node(n) for n in part.nodes]
    name = part.name
    flags = qos_flags(spec, ask.qos.value if ask.qos else None)
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
        if seconds is not None and limit is not None and minutes_of(seconds) > minutes_of(limit) \
                and "partitiontimelimit" not in flags:
            j.add(ask.time, ERROR, "cluster.time-limit",
                  f"--time={ask.time.value} is above partition {name}'s MaxTime={part.max_time}: "
                  + j.held_or_refused(INVALID_TIME, "PartitionTimeLimit"),
                  f"partition {name} allows at most {part.max_time}", part.max_time)

    # node count
    if ask.nodes_given:
        max_nodes = limit_value(part.option("MaxNodes"))
        min_nodes = limit_value(part.option("MinNodes"))
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
    judge_account(j, part)
    judge_qos(j, part)
    return j.findings[before:]


def gpu_count(n: NodeSpec, want: Optional[str]) -> int:
    """How many GPUs of type ``want`` (any, for None) Slurm counts on a node: on a MIG node
    its MIG instances of that profile (the type a job asks for: --gres=gpu:3g.40gb:1)."""
    if n.mig:
        per_gpu = dict(n.mig)
        return len(n.gpus) * (sum(per_gpu.values()) if want is None else per_gpu.get(want, 0))
    if want and (n.gpu_type or "").lower() != want:
        return 0
    return len(n.gpus)


def gpu_types(n: NodeSpec) -> List[str]:
    """The GPU types a node offers: its gpuType, or its MIG profiles."""
    return [p for p, _ in n.mig] if n.mig and n.gpus else [n.gpu_type] if n.gpus and n.gpu_type else []


def shared_gres(nodes: List[NodeSpec]) -> List[str]:
    """The GPU-sharing gres the nodes have (shard, mps), as --gres may ask for them."""
    return [name for name, has in (("shard", any(n.shards for n in nodes)), ("mps", any(n.mps for n in nodes)))
            if has]


def gpu_typed(g: GpuAsk) -> Callable[[NodeSpec], bool]:
    """Whether a node has GPUs of the type ``g`` asks for (any GPUs when it names none)."""
    want = g.type.lower() if g.type else None
    return lambda n: gpu_count(n, want) > 0


def node_tests(ask: Ask) -> List[Tuple[str, Callable[[NodeSpec], bool]]]:
    """What one node of the job must offer, each as (what, test of a node)."""
    tests: List[Tuple[str, Callable[[NodeSpec], bool]]] = []
    g = ask.gpus
    if g is not None:
        typed = gpu_typed(g)
        if g.per_node:
            want = g.type.lower() if g.type else None
            tests.append((f"{g.count} x {'gpu:' + g.type if g.type else 'gpu'}",
                          lambda n: gpu_count(n, want) >= g.count))
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

    offered = ["gpu"] + shared_gres(nodes)
    for gres, opt in ask.other_gres:
        if gres in offered:
            continue
        elsewhere = sorted(p.name for p in spec.partitions if gres in shared_gres([spec.node(x) for x in p.nodes]))
        if elsewhere:  # in GresTypes: Slurm takes the gres and finds no node with it
            j.add(opt, ERROR, "cluster.gres",
                  f"--gres={opt.value}: no node of partition {name} has '{gres}' (partition"
                  f"{'s' if len(elsewhere) > 1 else ''} {', '.join(elsewhere)} do{'es' if len(elsewhere) == 1 else ''})"
                  f": sbatch refuses the job: \"{NODE_CONFIG}\"", f"gres here: {', '.join(offered)} ({node_types(nodes)})")
            continue
        j.add(opt, ERROR, "cluster.gres",
              f"--gres={opt.value}: this cluster has no generic resource '{gres}' (only {', '.join(offered)}): "
              f'sbatch refuses the job: "{INVALID_GRES}"', f"gres here: {', '.join(offered)} ({node_types(nodes)})")

    g = ask.gpus
    if g is not None:
        typed = gpu_typed(g)
        if g.type and not any(typed(n) for n in nodes):
            types = sorted({t for n in nodes for t in gpu_types(n)})
            untyped = any(n.gpus and not gpu_types(n) for n in nodes)
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
            want = g.type.lower() if g.type else None
            most = max((gpu_count(n, want) for n in nodes), default=0)
            if g.count > most:
                what = f"gpu:{g.type}" if g.type else "GPUs"
                j.add(g.opt, ERROR, "cluster.gpus-per-node",
                      f"{g.count} {what} per node asked (--{g.opt.key}={g.opt.value}), and partition {name}'s "
                      f"nodes have at most {most}: sbatch refuses the job: \"{NODE_CONFIG}\"", offer,
                      _with_gpu_count(g, most) if most else None)
        else:
            want = g.type.lower() if g.type else None
            total = sum(gpu_count(n, want) for n in nodes)
            max_nodes = limit_value(part.option("MaxNodes"))
            if max_nodes is not None:
                total = sum(sorted((gpu_count(n, want) for n in nodes), reverse=True)[:max_nodes])
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
    judge_licenses(j)
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
