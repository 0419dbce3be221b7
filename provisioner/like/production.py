"""The production cluster as the mirror keeps it (Node, Partition, Parsed: what mapping.py read
of its slurm.conf, gres.conf applied), and the raw spec made of it: the GPU ids its nodes
get, the nodes kept under --max-nodes, the spec's YAML keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from provisioner.config import hostlist
from provisioner.config.parse import MAX_GPU_ID
from provisioner.config.mig import FAMILIES as MIG_FAMILIES
from provisioner.config.mig import place as place_mig
from provisioner.config.mig import profile_of
from provisioner.config.validate import MAX_NODES
from provisioner.like import scale
from provisioner.like.gres import GresConf
from provisioner.like.reader import LikeError, Where
from provisioner.like.report import Report
from provisioner.like.specfile import node_entry, sharing_keys


# Fake GPUs are numbered 0..MAX_GPU_ID across the whole cluster.
MAX_FAKE_GPUS = MAX_GPU_ID + 1


@dataclass
class Node:
    """A production node as the mirror sees it."""

    name: str
    where: Where
    cpus: Optional[int] = None
    memory: Optional[int] = None
    gpus: int = 0
    gpu_type: Optional[str] = None
    features: Tuple[str, ...] = ()
    options: Dict[str, str] = field(default_factory=dict)
    port: Optional[int] = None
    device_ids: Optional[List[int]] = None
    # GPU sharing as slurm.conf's Gres= says it, on the whole node: MIG instances by profile
    # (gpu:3g.40gb:4), shard and mps counts; settle_sharing turns them into per-GPU keys.
    mig_total: Dict[str, int] = field(default_factory=dict)
    shard_total: int = 0
    mps_total: int = 0
    mig_parents: Optional[List[int]] = None  # gres.conf's parent GPUs of the MIG lines (MultipleFiles)
    # Per GPU, as the spec says it (settle_sharing).
    mig: Tuple[Tuple[str, int], ...] = ()
    shards: int = 0
    mps: int = 0

    @property
    def shape(self) -> Tuple:
        return (self.cpus, self.memory, self.gpus, self.gpu_type, self.features, self.mig, self.shards, self.mps)


@dataclass
class Partition:
    name: str
    where: Where
    nodes_expr: Optional[str]
    default: bool = False
    max_time: str = "INFINITE"
    options: Dict[str, str] = field(default_factory=dict)
    nodes: List[str] = field(default_factory=list)
    all_nodes: bool = False


@dataclass
class Parsed:
    """The conf's nodes, partitions and kept global lines, before scaling and GPU ids."""

    nodes: Dict[str, Node] = field(default_factory=dict)
    partitions: List[Partition] = field(default_factory=list)
    slurm_conf: Dict[str, str] = field(default_factory=dict)  # canonical key -> "Key=Value"
    accounting: bool = False
    accounts: List[str] = field(default_factory=list)
    qos: List[str] = field(default_factory=list)
    health_check: Dict[str, Any] = field(default_factory=dict)  # the spec's healthCheck: (like/mapping.py)


def apply_gres(parsed: Parsed, gres: GresConf, report: Report) -> None:
    """gres.conf's GPU types (where slurm.conf's Gres= has none) and device numbers."""
    for where, key, value, reason in gres.dropped:
        report.drop(where, key, value, reason)
    typed_from_gres = set()
    for node in parsed.nodes.values():
        parents = sorted({i for e in gres.for_node(node.name) for i in e.mig_parents or ()})
        if parents:
            node.mig_parents = parents
        entries = [e for e in gres.for_node(node.name) if not is_mig_type(e.gpu_type)]
        if not entries or not node.gpus:
            if entries and not node.gpus:
                report.note(f"{entries[0].where}: gres.conf gives {node.name} GPUs that its NodeName line "
                            "(Gres=) does not: the node has none, as slurmctld would say")
            continue
        types = {e.gpu_type for e in entries if e.gpu_type}
        if node.gpu_type is None and len(types) == 1:
            node.gpu_type = types.pop()
            typed_from_gres.add((node.gpu_type, str(entries[0].where)))
        elif node.gpu_type and types and node.gpu_type not in types:
            report.note(f"{entries[0].where}: gres.conf types {node.name}'s GPUs {','.join(sorted(types))}, "
                        f"slurm.conf gpu:{node.gpu_type}: slurm.conf's is kept")
        if all(e.ids is not None for e in entries):
            ids = [i for e in entries if (e.gpu_type in (None, node.gpu_type)) for i in e.ids]
            if len(ids) == node.gpus and len(set(ids)) == len(ids):
                node.device_ids = ids
    for gpu_type, where in sorted(typed_from_gres):
        report.note(f"{where}: GPU type {gpu_type} from gres.conf (slurm.conf's Gres= has no type)")


def is_mig_type(gpu_type: Optional[str]) -> bool:
    return bool(gpu_type) and profile_of(gpu_type) is not None


# The GPU type a mirror's MIG nodes get, by the MIG profile family of their profiles: the
# card those profiles are most often cut from.
FAMILY_TYPES = {"80gb": "h100", "40gb": "a100-40gb", "94gb": "h100-nvl", "96gb": "gh200", "141gb": "h200",
                "180gb": "b200", "24gb": "a30"}


def _mig_split(totals: Dict[str, int], gpus: Optional[int]) -> Optional[Tuple[str, int, Tuple[Tuple[str, int], ...]]]:
    """(family, GPUs, per-GPU layout) of a node's MIG instances: over ``gpus`` GPUs where
    gres.conf says how many, else the fewest GPUs each profile's count splits evenly over and
    whose per-GPU layout fits the card; None where nothing fits."""
    for family, profiles in MIG_FAMILIES.items():
        if not all(p in profiles for p in totals):
            continue
        for n in ([gpus] if gpus else range(1, 65)):
            if any(c % n for c in totals.values()):
                continue
            layout = tuple((p, c // n) for p, c in totals.items())
            try:
                place_mig(layout, family)
            except ValueError:
                continue
            return family, n, layout
    return None


def settle_sharing(parsed: Parsed, report: Report) -> None:
    """slurm.conf's MIG, shard and mps gres as the spec's per-GPU keys: a MIG node gets the
    GPUs its instances are cut from (gres.conf's parent devices, else the fewest that fit), a
    GPU type of that card, and its layout; shards and MPS are divided over the node's GPUs.
    What the spec cannot say (MIG beside plain GPUs, shards on MIG, shards and MPS in one
    cluster) is reported and left out."""
    for node in parsed.nodes.values():
        if node.mig_total:
            text = ",".join(f"gpu:{p}:{c}" for p, c in node.mig_total.items())
            split = None if node.gpus else _mig_split(node.mig_total, len(node.mig_parents or ()) or None)
            if split is None:
                why = ("MIG instances beside plain GPUs on one node: the node keeps its plain GPUs" if node.gpus else
                       f"these MIG instances fit no GPU model's layout here"
                       + (f" when split over its {len(node.mig_parents)} GPUs (gres.conf)" if node.mig_parents else ""))
                report.drop(node.where, "Gres", text, why)
            else:
                family, count, layout = split
                node.gpus, node.mig = count, layout
                node.gpu_type = node.gpu_type or FAMILY_TYPES[family]
                report.keep(node.where, "Gres", text, f"mig: {','.join(f'{p}:{c}' for p, c in layout)} on each of "
                                                      f"{count} fake {node.gpu_type} GPU{'s' if count > 1 else ''}")
        for kind in ("shard", "mps"):
            total = getattr(node, f"{kind}_total")
            if not total:
                continue
            if not node.gpus or node.mig:
                report.drop(node.where, "Gres", f"{kind}:{total}", "on a node without plain GPUs (MIG instances are "
                                                                  "not shared here)")
            elif kind == "mps" and any(n.shard_total for n in parsed.nodes.values()):
                report.drop(node.where, "Gres", f"mps:{total}", "shards and MPS in one cluster: Slurm then gives MPS "
                                                              "jobs a wrong CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; the "
                                                              "shards are kept")
            else:
                per_gpu = max(1, total // node.gpus)
                setattr(node, "shards" if kind == "shard" else "mps", per_gpu)
                report.keep(node.where, "Gres", f"{kind}:{total}", f"{'shards' if kind == 'shard' else 'mps'}: "
                                                                  f"{per_gpu} per GPU")


def gpu_ids(nodes: List[Node], host_gpus: Optional[List[int]], source: str) -> Dict[str, List[int]]:
    """The physical GPU ids of each node with GPUs: gres.conf's device numbers where they
    are distinct (and, with --gpus, among the host's), else handed out in node order."""
    with_gpus = [n for n in nodes if n.gpus]
    total = sum(n.gpus for n in with_gpus)
    from_gres = [i for n in with_gpus for i in (n.device_ids or [])]
    distinct = (all(n.device_ids for n in with_gpus) and len(set(from_gres)) == len(from_gres)
                and all(i <= MAX_GPU_ID for i in from_gres))
    if host_gpus is not None:
        if distinct and set(from_gres) <= set(host_gpus):
            return {n.name: list(n.device_ids or []) for n in with_gpus}
        if total > len(host_gpus):
            raise LikeError(f"{source}: the mirrored nodes have {total} GPUs, --gpus gives {len(host_gpus)}",
                            "give --gpus enough of this host's GPUs, keep fewer nodes with --max-nodes, or leave "
                            "--gpus out to fake them")
        pool = list(host_gpus)
    else:
        if distinct:
            return {n.name: list(n.device_ids or []) for n in with_gpus}
        pool = list(range(total))
    out: Dict[str, List[int]] = {}
    for n in with_gpus:
        out[n.name], pool = pool[:n.gpus], pool[n.gpus:]
    return out


def to_raw(parsed: Parsed, keep: List[str], ids: Dict[str, List[int]], fake: bool) -> Dict[str, Any]:
    """The raw spec (YAML keys) of the kept nodes."""
    kept = set(keep)
    scaled = len(keep) < len(parsed.nodes)
    nodes = []
    for name in keep:
        n = parsed.nodes[name]
        entry = node_entry(name, ids.get(name), n.cpus, n.memory, n.port, n.gpu_type if name in ids else None,
                           None, n.features, n.options)
        if name in ids and fake:  # real GPUs (--gpus) get theirs from the driver
            entry.update(sharing_keys(n.mig, n.shards, n.mps))
        nodes.append(entry)
    partitions = []
    for p in parsed.partitions:
        entry = {"name": p.name, "nodes": "ALL" if p.all_nodes and not scaled else [n for n in p.nodes if n in kept],
                 "default": p.default, "maxTime": p.max_time}
        if p.options:
            entry["options"] = dict(p.options)
        partitions.append(entry)
    raw: Dict[str, Any] = {"nodes": nodes, "partitions": partitions}
    if parsed.slurm_conf:
        raw["slurmConf"] = list(parsed.slurm_conf.values())
    if ids:
        raw["fakeGpus"] = fake
    if parsed.accounting:
        raw["accounting"] = True
    if parsed.health_check:
        raw["healthCheck"] = dict(parsed.health_check)
    if parsed.accounts:
        raw["accounts"] = [{"name": a} for a in parsed.accounts]
    if parsed.qos:
        raw["qos"] = [{"name": q} for q in parsed.qos]
    return raw


def choose_nodes(parsed: Parsed, max_nodes: Optional[int], report: Report, source: str,
                 fake_gpus: bool) -> List[str]:
    """The node names the mirror keeps: all, or a --max-nodes subset; too many is an error."""
    order = list(parsed.nodes)
    members = [(p.name, p.nodes) for p in parsed.partitions]
    shape_of = {n.name: n.shape for n in parsed.nodes.values()}
    minimum = scale.needed(members, shape_of)
    if max_nodes is None:
        if len(order) > MAX_NODES:
            raise LikeError(f"{source}: {len(order)} nodes, more than simcluster's limit of {MAX_NODES}",
                            f"mirror a scaled subset that keeps every partition's node shapes: --max-nodes "
                            f"{max(len(minimum), 8)}")
        gpus = sum(n.gpus for n in parsed.nodes.values())
        if fake_gpus and gpus > MAX_FAKE_GPUS:
            raise LikeError(f"{source}: {len(order)} nodes with {gpus} GPUs, more than the {MAX_FAKE_GPUS} fake GPUs "
                            "a cluster here can have",
                            f"mirror a scaled subset that keeps every partition's node shapes: --max-nodes "
                            f"{max(len(minimum), 8)}")
        return order
    if max_nodes < 1:
        raise LikeError(f"--max-nodes {max_nodes}: give at least 1")
    keep = scale.select(order, members, shape_of, max_nodes)
    if keep is None:
        per = scale.shapes_per_partition(members, shape_of)
        detail = ", ".join(f"{name}: {count}" for name, count in per.items())
        raise LikeError(f"--max-nodes {max_nodes} is too few: keeping one node of each shape in each partition "
                        f"needs {len(minimum)} (shapes per partition: {detail})",
                        f"give --max-nodes {len(minimum)} or more")
    if len(keep) < len(order):
        report.note(f"--max-nodes {max_nodes}: kept {len(keep)} of {len(order)} nodes: {hostlist.compress(keep)}")
        for p in parsed.partitions:
            count = sum(1 for n in p.nodes if n in set(keep))
            for key in ("MaxNodes", "MinNodes"):
                value = p.options.get(key)
                if value and value.isdecimal() and int(value) > count:
                    report.note(f"partition {p.name}: {key}={value} kept, it has {count} node"
                                f"{'s' if count != 1 else ''} here (a job asking for more is refused)")
    gpus = sum(parsed.nodes[n].gpus for n in keep)
    if fake_gpus and gpus > MAX_FAKE_GPUS:
        raise LikeError(f"--max-nodes {max_nodes}: the kept nodes have {gpus} GPUs, more than the {MAX_FAKE_GPUS} "
                        "fake GPUs a cluster here can have", "give a smaller --max-nodes")
    return keep
