"""A mirrored spec written out as a spec file: what `render --like` leaves to edit and `up --config`."""

from __future__ import annotations

import yaml

from provisioner.config.types import API_VERSION, KIND, ClusterSpec


def spec_yaml(spec: ClusterSpec, source: str) -> str:
    """A mirrored spec as a spec file (YAML keys, the defaults left out) to edit and `up --config`."""
    raw = {"apiVersion": API_VERSION, "kind": KIND, "name": spec.name}
    if spec.accounting:
        raw["accounting"] = True
    if spec.fake_gpus:
        raw["fakeGpus"] = True
    nodes = []
    for n in spec.nodes:
        entry = {"name": n.name}
        if n.gpus:
            entry["gpus"] = list(n.gpus)
        entry.update(cpus=n.cpus, memory=n.memory)
        if n.port is not None:
            entry["port"] = n.port
        if n.gpu_type:
            entry["gpuType"] = n.gpu_type
        if n.gpu_model:
            entry["gpuModel"] = n.gpu_model
        if n.features:
            entry["features"] = list(n.features)
        if n.options:
            entry["options"] = dict(n.options)
        nodes.append(entry)
    raw["nodes"] = nodes
    parts = []
    for p in spec.partitions:
        entry = {"name": p.name, "nodes": list(p.nodes), "default": p.default, "maxTime": p.max_time}
        if p.options:
            entry["options"] = dict(p.options)
        parts.append(entry)
    raw["partitions"] = parts
    if spec.slurm_conf_extra:
        raw["slurmConf"] = list(spec.slurm_conf_extra)
    if spec.accounts:
        raw["accounts"] = [{"name": a.name} for a in spec.accounts]
    if spec.qos:
        raw["qos"] = [{"name": q.name} for q in spec.qos]
    header = (f"# Mirrored from {source} by 'simcluster render --like' (like-report.txt says what was kept\n"
              "# and dropped). Edit it (QoS priorities and preemption, accounts' users) and\n"
              "#   simcluster up --config like-spec.yaml\n")
    return header + yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=100)
