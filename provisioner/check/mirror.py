"""The cluster `simcluster check --like/--config` judges scripts against, and its dry-run copy.

`--like prod/slurm.conf [--gres-conf F]` reads a production slurm.conf the way `simcluster up
--like` does (provisioner.like): its partitions, node shapes, typed GPUs, features,
accounts, QoS and the cluster-wide settings jobs see. `--config cluster.yaml` takes a
simcluster spec instead. Either way the static rules get the whole cluster, every node of
it; `check --run` brings up a copy of it on this machine (fake GPUs, free ports, at most
dryrun.MAX_NODES nodes and 256 GPUs: every partition keeps a node of each of its shapes,
the job's partitions as many as the job asks for).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from provisioner.config.parse import MAX_GPU_ID
from provisioner.config.types import AccountSpec, ClusterSpec, NodeSpec, PartitionSpec, QosSpec
from provisioner.errors import UsageError


# Fake GPUs are numbered 0..MAX_GPU_ID across a cluster.
MAX_FAKE_GPUS = MAX_GPU_ID + 1


@dataclass
class Target:
    """The cluster scripts are judged against."""
    spec: ClusterSpec
    label: str            # as the user named it: "prod/slurm.conf", "cluster.yaml"
    report: str = ""      # --like: what was kept and dropped of the conf (one line)


def load_target(like: Optional[str], gres_conf: Optional[str], config: Optional[str]) -> Optional[Target]:
    """The cluster --like or --config names (None without either); bad input is one UsageError."""
    if like and config:
        raise UsageError("--like and --config both name the cluster to judge against: give one",
                         "simcluster check --like prod/slurm.conf job.sbatch")
    if gres_conf and not like:
        raise UsageError("--gres-conf only goes with --like", "simcluster check --like slurm.conf --gres-conf "
                         "gres.conf job.sbatch")
    if config:
        from provisioner.config import load_spec
        return Target(load_spec(config), config)
    if like:
        return _like_target(like, gres_conf)
    return None


def _like_target(path: str, gres_conf: Optional[str]) -> Target:
    """Every node and partition of a production slurm.conf, read by the same reader and mapping
    `up --like` uses. Unlike `up --like`, nothing here has to fit this machine (128 nodes of 8
    GPUs are judged as 128 nodes of 8 GPUs): the spec is data to judge against, its GPU ids are
    per-node placeholders, and `check --run` brings up a subset of it (dry_run_spec)."""
    # lazy: the conf reader loads only for --like
    from provisioner.like.gres import parse_gres
    from provisioner.like.mapping import parse_conf
    from provisioner.like.production import apply_gres, settle_sharing
    from provisioner.like.reader import LikeError, display_path, read_conf
    from provisioner.like.report import Report
    conf_path = Path(path)
    source = display_path(conf_path) if conf_path.is_absolute() else path
    conf = read_conf(conf_path, source)
    report = Report(source=source)
    gres_path = Path(gres_conf) if gres_conf else conf_path.parent / "gres.conf"
    if gres_conf and not gres_path.is_file():
        raise LikeError(f"gres.conf {gres_conf} does not exist", "check the path given to --gres-conf")
    parsed = parse_conf(conf, report, source)
    if gres_path.is_file() and conf_path.name != "gres.conf":
        apply_gres(parsed, parse_gres(read_conf(gres_path, gres_conf or display_path(gres_path)),
                                      list(parsed.nodes)), report)
    settle_sharing(parsed, report)
    nodes = tuple(NodeSpec(name=n.name, gpus=tuple(range(n.gpus)), cpus=n.cpus or 1, memory=n.memory or 1,
                           gpu_type=n.gpu_type if n.gpus else None, features=tuple(n.features),
                           options=tuple(n.options.items()), mig=n.mig, shards=n.shards, mps=n.mps)
                  for n in parsed.nodes.values())
    parts = tuple(PartitionSpec(p.name, tuple(parsed.nodes) if p.all_nodes else tuple(p.nodes), p.default,
                                p.max_time, tuple(p.options.items()))
                  for p in parsed.partitions)
    spec = ClusterSpec(name="mirror", backend="local", nodes=nodes, partitions=parts, fake_gpus=True,
                       slurm_conf_extra=tuple(parsed.slurm_conf.values()), accounting=parsed.accounting,
                       accounts=tuple(AccountSpec(a) for a in parsed.accounts),
                       qos=tuple(QosSpec(q) for q in parsed.qos))
    return Target(spec, path, report.summary())


# ---------------------------------------------------------------- the dry run's copy

def _shape(n: NodeSpec) -> Tuple:
    return (n.cpus, n.memory, len(n.gpus), n.gpu_type, tuple(sorted(n.features)), n.options, n.mig, n.shards, n.mps)


def pick_nodes(spec: ClusterSpec, partitions: Sequence[str], nodes_wanted: int, max_nodes: int,
               max_gpus: int = MAX_FAKE_GPUS, fits: Callable[[NodeSpec], bool] = lambda n: True) -> List[str]:
    """At most ``max_nodes`` node names of ``spec`` with at most ``max_gpus`` GPUs in all (in the
    spec's order): each partition keeps one node of each of its shapes, and the job's
    ``partitions`` get up to ``nodes_wanted`` nodes each that ``fits`` (the job's node). All of
    them when they are few enough."""
    gpus = {n.name: len(n.gpus) for n in spec.nodes}
    if len(spec.nodes) <= max_nodes and sum(gpus.values()) <= max_gpus:
        return [n.name for n in spec.nodes]
    shapes: Dict[str, Tuple] = {n.name: _shape(n) for n in spec.nodes}
    keep: List[str] = []

    def take(name: str) -> None:
        if name not in keep and len(keep) < max_nodes and sum(gpus[x] for x in keep) + gpus[name] <= max_gpus:
            keep.append(name)

    for p in spec.partitions:
        have = {shapes[n] for n in p.nodes if n in keep}
        for n in p.nodes:
            if shapes[n] not in have:
                have.add(shapes[n])
                take(n)
    by_name = {n.name: n for n in spec.nodes}
    for p in spec.partitions:
        if p.name in partitions:
            for n in p.nodes:
                if sum(1 for x in p.nodes if x in keep and fits(by_name[x])) >= nodes_wanted:
                    break
                if fits(by_name[n]):
                    take(n)
    order = {n.name: i for i, n in enumerate(spec.nodes)}
    return sorted(keep, key=order.get)


def dry_run_spec(spec: ClusterSpec, name: str, partitions: Sequence[str], nodes_wanted: int,
                 max_nodes: int, fits: Callable[[NodeSpec], bool] = lambda n: True) -> ClusterSpec:
    """The copy `check --run` brings up: ``spec`` under ``name``, local, with fake GPUs numbered
    from 0, its own free ports, and at most ``max_nodes`` nodes (pick_nodes)."""
    kept = set(pick_nodes(spec, partitions, nodes_wanted, max_nodes, fits=fits))
    nodes: List[NodeSpec] = []
    gpu = 0
    for n in spec.nodes:
        if n.name not in kept:
            continue
        ids = tuple(range(gpu, gpu + len(n.gpus)))
        gpu += len(n.gpus)
        nodes.append(dataclasses.replace(n, gpus=ids, port=None))
    parts = []
    for p in spec.partitions:
        members = tuple(x for x in p.nodes if x in kept)
        if members:
            parts.append(PartitionSpec(p.name, members, p.default, p.max_time, p.options))
    if parts and not any(p.default for p in parts):
        parts[0] = dataclasses.replace(parts[0], default=True)
    return dataclasses.replace(spec, name=name, backend="local", nodes=tuple(nodes), partitions=tuple(parts),
                               fake_gpus=True, controller_port=None, image=None, privileged=False)
