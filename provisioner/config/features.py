"""The spec's optional features, checked apart from the cluster's shape (validate.py calls
these): GPU sharing on fake GPUs (MIG layouts, shards, MPS), the health check, and the
metrics exporter. Pure logic, reporting every problem into the caller's Problems."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

from provisioner.config.gpus import model_of
from provisioner.config.mig import parse_layout as parse_mig_layout
from provisioner.config.mig import place as place_mig
from provisioner.config.problems import Problems, int_in, unknown_keys
from provisioner.config.types import HealthCheckSpec, NodeSpec


def validate_metrics(p: Problems, raw) -> Tuple[bool, Optional[int]]:
    """metrics: true | false | {port: N} -> (on, its port or None: one picked free). Every
    backend `up` makes has it: the exporter runs on this host (docs/metrics.md)."""
    on, port = raw, None
    if isinstance(raw, dict):
        unknown_keys(p, "metrics", raw, {"port"})
        on, port = True, raw.get("port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535):
            p.add("metrics.port", f"expected a TCP port from 1024 to 65535, got {port!r}")
            port = None
    elif not isinstance(raw, bool):
        p.add("metrics", f"expected true, false or {{port: N}}, got {raw!r}")
        return False, None
    return on, port


# HealthCheckNodeState's words (slurm.conf(5)); several may be given, comma-separated.
HEALTH_CHECK_STATES = ("ALLOC", "ANY", "CYCLE", "IDLE", "MIXED", "NONDRAINED_IDLE")
HEALTH_CHECK_KEYS = {"interval", "nodeState", "program"}


def validate_health_check(p: Problems, raw: Any) -> Optional[HealthCheckSpec]:
    """healthCheck: true (the defaults), false or absent (none), or {interval, nodeState, program}."""
    if raw is None or raw is False:
        return None
    if raw is True:
        return HealthCheckSpec()
    if not isinstance(raw, dict):
        p.add("healthCheck", f"expected true, false or a mapping of {', '.join(sorted(HEALTH_CHECK_KEYS))}, "
                             f"got {raw!r}")
        return None
    unknown_keys(p, "healthCheck", raw, HEALTH_CHECK_KEYS)
    default = HealthCheckSpec()
    interval = int_in(p, "healthCheck.interval", raw.get("interval", default.interval), 1, 86400)
    state = raw.get("nodeState", default.node_state)
    words = str(state).upper().split(",") if isinstance(state, str) else []
    if not words or any(w not in HEALTH_CHECK_STATES for w in words):
        p.add("healthCheck.nodeState", f"expected one or more of {', '.join(HEALTH_CHECK_STATES)} "
                                       f"(comma-separated), got {state!r}")
    program = raw.get("program")
    if program is not None and (not isinstance(program, str) or not program.startswith("/") or "\n" in program):
        p.add("healthCheck.program", f"expected an absolute path, got {program!r}")
        program = None
    return HealthCheckSpec(interval=interval or default.interval, node_state=",".join(words) or default.node_state,
                           program=program)


# Most shards or MPS share one GPU may be cut into (Slurm's Count= is 32-bit; sites use up to
# a few hundred).
MAX_SHARE = 10000


def _sharing_keys(p: Problems, where: str, raw: Dict, defaults: Tuple) -> Tuple:
    """(mig layout, shards, mps) of a node entry (or of the top level), else ``defaults``."""
    mig, shards, mps = defaults
    if raw.get("mig") is not None:
        try:
            mig = parse_mig_layout(raw["mig"])
        except ValueError as exc:
            p.add(f"{where}mig", str(exc))
    for key in ("shards", "mps"):
        if raw.get(key) is not None:
            value = int_in(p, f"{where}{key}", raw[key], 1, MAX_SHARE)
            if value is not None:
                shards, mps = (value, mps) if key == "shards" else (shards, value)
    return mig, shards, mps


def gpu_sharing(p: Problems, raw: Dict, nodes: List[NodeSpec], fake_gpus: bool) -> List[NodeSpec]:
    """The nodes with their MIG layout, shards and MPS (top-level keys for every node with
    GPUs, a node's own over them), each checked against the node's GPU model."""
    top = _sharing_keys(p, "", raw, ((), 0, 0))
    listed = raw.get("nodes") if isinstance(raw.get("nodes"), list) else []
    entries = {n.get("name"): (i, n) for i, n in enumerate(listed) if isinstance(n, dict)}
    out: List[NodeSpec] = []
    seen: set = set()

    def add(where: str, what: str) -> None:  # the top-level keys' problems once, not once per node
        if (where, what) not in seen:
            seen.add((where, what))
            p.add(where, what)

    for node in nodes:
        index, own = entries.get(node.name, (None, {}))
        where = f"nodes[{index}]." if any(k in own for k in ("mig", "shards", "mps")) else ""
        mig, shards, mps = _sharing_keys(p, where, own, top) if own else top
        key = where + ("mig" if mig else "shards" if shards else "mps")
        if not (mig or shards or mps):
            out.append(node)
            continue
        if not node.gpus:
            if where:
                add(key, "the node has no GPUs (give it 'gpus', or fakeGpus at the top)")
            out.append(node)
            continue
        if not fake_gpus:
            add(key, "MIG, shards and MPS are simulated on fake GPUs only (add fakeGpus: true or --fake-gpus); "
                     "real GPUs get theirs from the driver")
            out.append(node)
            continue
        if mig and (shards or mps):
            add(key, "a node's GPUs are cut into MIG instances or shared as shards/MPS, not both "
                     "(Slurm shares no MIG instance): give such nodes their own 'mig' or 'shards'/'mps'")
        if mig:
            model = model_of(node.gpu_type, node.gpu_model)
            try:
                place_mig(mig, model.mig, model.name)
            except ValueError as exc:
                add(key, str(exc))
        out.append(replace(node, mig=mig, shards=shards, mps=mps))
    if any(n.shards for n in out) and any(n.mps for n in out):
        # Checked on Slurm 22.05: with shard and mps both in GresTypes an MPS job's
        # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is computed from the shard counts (0, or 1250 for
        # mps:50 of 100), wherever the shards are.
        add("mps", "shards and MPS in one cluster: Slurm then gives MPS jobs a wrong "
                   "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (computed from the shard counts); use one of them per cluster")
    return out
