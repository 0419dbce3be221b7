"""A mirrored spec written out as a spec file: what `render --like` leaves to edit and `up --config`."""

from __future__ import annotations

import yaml

from typing import Any, Dict, List, Optional, Sequence, Tuple

from provisioner.config.types import API_VERSION, KIND, ClusterSpec


def node_entry(name: str, gpus: Optional[List[int]] = None, cpus: Optional[int] = None, memory: Optional[int] = None,
               port: Optional[int] = None, gpu_type: Optional[str] = None, gpu_model: Optional[str] = None,
               features: Sequence[str] = (), options: Sequence[Tuple[str, str]] = ()) -> Dict[str, Any]:
    """One node of a raw spec, in its YAML keys; a key without a value (None, no type, no
    features) is left out, as the spec's defaults then apply."""
    entry: Dict[str, Any] = {"name": name}
    for key, value in (("gpus", gpus), ("cpus", cpus), ("memory", memory), ("port", port)):
        if value is not None:
            entry[key] = value
    for key, value in (("gpuType", gpu_type), ("gpuModel", gpu_model), ("features", list(features)),
                       ("options", dict(options))):
        if value:
            entry[key] = value
    return entry


def sharing_keys(mig, shards: int, mps: int) -> Dict[str, Any]:
    """A node's GPU-sharing keys (mig, shards, mps) in YAML, those it has."""
    out: Dict[str, Any] = {}
    if mig:
        out["mig"] = ",".join(f"{p}:{c}" for p, c in mig)
    if shards:
        out["shards"] = shards
    if mps:
        out["mps"] = mps
    return out


def spec_yaml(spec: ClusterSpec, source: str) -> str:
    """A mirrored spec as a spec file (YAML keys, the defaults left out) to edit and `up --config`."""
    raw = {"apiVersion": API_VERSION, "kind": KIND, "name": spec.name}
    if spec.accounting:
        raw["accounting"] = True
    if spec.fake_gpus:
        raw["fakeGpus"] = True
    raw["nodes"] = [dict(node_entry(n.name, list(n.gpus) or None, n.cpus, n.memory, n.port, n.gpu_type, n.gpu_model,
                                    n.features, n.options), **sharing_keys(n.mig, n.shards, n.mps))
                    for n in spec.nodes]
    parts = []
    for p in spec.partitions:
        entry = {"name": p.name, "nodes": list(p.nodes), "default": p.default, "maxTime": p.max_time}
        if p.options:
            entry["options"] = dict(p.options)
        parts.append(entry)
    raw["partitions"] = parts
    if spec.slurm_conf_extra:
        raw["slurmConf"] = list(spec.slurm_conf_extra)
    if spec.health_check:
        hc = spec.health_check
        raw["healthCheck"] = {"interval": hc.interval, "nodeState": hc.node_state,
                              **({"program": hc.program} if hc.program else {})}
    if spec.accounts:
        raw["accounts"] = [{"name": a.name} for a in spec.accounts]
    if spec.qos:
        raw["qos"] = [{"name": q.name} for q in spec.qos]
    header = (f"# Mirrored from {source} by 'simcluster render --like' (like-report.txt says what was kept\n"
              "# and dropped). Edit it (QoS priorities and preemption, accounts' users) and\n"
              "#   simcluster up --config like-spec.yaml\n")
    return header + yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=100)
