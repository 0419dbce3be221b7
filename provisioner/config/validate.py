"""Turn a raw spec (YAML keys, flags merged in) into a ClusterSpec, reporting every problem.

Pure logic: host facts (CPU count, memory) come in as arguments so tests can pin them.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

from provisioner.config.parse import parse_gpu_list, parse_memory_mb, split_gpus
from provisioner.config.types import API_VERSION, KIND, ClusterSpec, NodeSpec, PartitionSpec
from provisioner.config.versions import normalize as normalize_slurm
from provisioner.errors import ConfigError
from provisioner.providers import BACKENDS, PROVIDERS  # the registry's names only: nothing heavy is imported

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
NODE_RE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
PARTITION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,29}$")
# Spec keys that only some backends read: {key: backends}.
BACKEND_KEYS = {"image": ("docker",), "privileged": ("docker",)}
MAX_NODES = 1024

TOP_KEYS = {"apiVersion", "kind", "name", "backend", "nodes", "nodePrefix", "gpus", "fakeGpus",
            "cpus", "memory", "controllerPort", "partitions", "slurmConf", "wait", "image",
            "privileged", "accounting", "failureDetection", "slurm"}
# normal: Slurm's test-cluster timeouts; fast: a dead node is DOWN in ~12 s (docs/faults.md).
FAILURE_DETECTION = ("normal", "fast")
NODE_KEYS = {"name", "gpus", "cpus", "memory", "port"}
PARTITION_KEYS = {"name", "nodes", "default", "maxTime"}


class _Problems:
    def __init__(self) -> None:
        self.items: List[str] = []

    def add(self, where: str, what: str) -> None:
        self.items.append(f"{where}: {what}" if where else what)


def _int_in(p: _Problems, where: str, value: Any, lo: int, hi: int) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdecimal():
            value = int(value)
        else:
            p.add(where, f"expected a whole number, got {value!r}")
            return None
    if not lo <= value <= hi:
        p.add(where, f"{value} is out of range {lo}-{hi}")
        return None
    return value


def _unknown_keys(p: _Problems, where: str, d: Dict, allowed: set) -> None:
    for key in sorted(set(d) - allowed, key=str):  # YAML keys need not be strings
        close = [a for a in sorted(allowed) if a.lower() == str(key).lower().replace("_", "")]
        hint = f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(sorted(allowed))})"
        p.add(where, f"unknown key '{key}'{hint}")


def validate(raw: Dict[str, Any], host_cpus: int, host_memory_mb: int,
             source: str = "cluster spec") -> ClusterSpec:
    """Validate ``raw`` and resolve defaults; raise ConfigError listing every problem."""
    p = _Problems()
    if not isinstance(raw, dict):
        raise ConfigError([f"expected a mapping at the top level, got {type(raw).__name__}"], source)
    _unknown_keys(p, "", raw, TOP_KEYS)
    if raw.get("apiVersion", API_VERSION) != API_VERSION:
        p.add("apiVersion", f"must be '{API_VERSION}', got {raw.get('apiVersion')!r}")
    if raw.get("kind", KIND) != KIND:
        p.add("kind", f"must be '{KIND}', got {raw.get('kind')!r}")

    name = raw.get("name", "default")
    if not isinstance(name, str) or not NAME_RE.match(name):
        p.add("name", f"{name!r} is not a valid cluster name "
                      "(lowercase letters, digits and '-', starting with a letter, at most 31)")
    backend = raw.get("backend", "local")
    if backend in PROVIDERS and backend not in BACKENDS:  # ssh: a provider that only reads clusters
        p.add("backend", f"backend {backend!r} reads clusters made by 'simcluster deploy' (status/verify/"
                         f"export-logs --ssh); up creates: {', '.join(BACKENDS)}")
    elif backend not in BACKENDS:
        p.add("backend", f"unknown backend {backend!r} (available: {', '.join(BACKENDS)})")

    cpus = host_cpus
    if "cpus" in raw:
        cpus = _int_in(p, "cpus", raw["cpus"], 1, 100000) or host_cpus
    memory = host_memory_mb
    if "memory" in raw:
        try:
            memory = parse_memory_mb(raw["memory"])
        except ValueError as exc:
            p.add("memory", str(exc))

    gpus: List[int] = []
    if raw.get("gpus") is not None:
        try:
            gpus = parse_gpu_list(raw["gpus"])
        except ValueError as exc:
            p.add("gpus", str(exc))
    fake = raw.get("fakeGpus", False)
    fake_gpus = False
    if isinstance(fake, bool):
        fake_gpus = fake
    elif isinstance(fake, int) and fake > 0:
        if gpus:
            p.add("fakeGpus", "give either a count of fake GPUs or a 'gpus' list with fakeGpus: true, not both")
        elif fake > 256:
            p.add("fakeGpus", f"{fake} is out of range 1-256")
        else:
            gpus = list(range(fake))
        fake_gpus = True
    else:
        p.add("fakeGpus", f"expected true/false or a GPU count, got {fake!r}")

    controller_port = None
    if raw.get("controllerPort") is not None:
        controller_port = _int_in(p, "controllerPort", raw["controllerPort"], 1024, 65535)

    nodes = _validate_nodes(p, raw, gpus, cpus, memory)
    node_names = [n.name for n in nodes]
    ports = [n.port for n in nodes if n.port is not None] + ([controller_port] if controller_port else [])
    for port in sorted({x for x in ports if ports.count(x) > 1}):
        p.add("ports", f"port {port} is used twice")

    partitions = _validate_partitions(p, raw.get("partitions"), node_names)

    extra = raw.get("slurmConf", [])
    if not isinstance(extra, list) or not all(isinstance(x, str) for x in extra):
        p.add("slurmConf", "expected a list of 'Key=Value' lines")
        extra = []
    for i, line in enumerate(extra):
        if "\n" in line or not re.match(r"^\s*[A-Za-z][A-Za-z0-9]*\s*=", line):
            p.add(f"slurmConf[{i}]", f"{line!r} is not a single 'Key=Value' line")

    wait = raw.get("wait", 60)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 < wait <= 3600:
        p.add("wait", f"expected seconds, more than 0 and at most 3600, got {wait!r}")
        wait = 60

    image = raw.get("image")
    if image is not None and (not isinstance(image, str) or not re.match(r"^[\w][\w./:@-]*$", image)):
        p.add("image", f"{image!r} is not a docker image reference")
        image = None
    privileged = raw.get("privileged", False)
    if not isinstance(privileged, bool):
        p.add("privileged", f"expected true or false, got {privileged!r}")
        privileged = False
    for key, value in (("image", image), ("privileged", privileged)):
        if value and backend not in BACKEND_KEYS[key]:
            only = " or ".join(BACKEND_KEYS[key])
            p.add(key, f"only applies to the {only} backend (backend: {only})")
            break
    accounting = raw.get("accounting", False)
    if not isinstance(accounting, bool):
        p.add("accounting", f"expected true or false, got {accounting!r}")
        accounting = False

    failure_detection = raw.get("failureDetection", "normal")
    if failure_detection not in FAILURE_DETECTION:
        p.add("failureDetection", f"expected one of {', '.join(FAILURE_DETECTION)}, got {failure_detection!r}")
        failure_detection = "normal"

    slurm = None
    if raw.get("slurm") is not None:
        try:
            slurm = normalize_slurm(raw["slurm"])
        except ValueError as exc:
            p.add("slurm", str(exc))

    if p.items:
        raise ConfigError(p.items, source)
    return ClusterSpec(name=name, backend=backend, nodes=tuple(nodes), partitions=tuple(partitions),
                       fake_gpus=fake_gpus, controller_port=controller_port,
                       slurm_conf_extra=tuple(extra), wait=float(wait), image=image, privileged=privileged,
                       accounting=accounting, failure_detection=failure_detection, slurm=slurm)


def _validate_nodes(p: _Problems, raw: Dict, gpus: List[int], cpus: int, memory: int) -> List[NodeSpec]:
    spec_nodes = raw.get("nodes", 2)
    prefix = raw.get("nodePrefix", "node")
    if not isinstance(prefix, str) or not NODE_RE.match(prefix + "1"):
        p.add("nodePrefix", f"{prefix!r} is not a valid node name prefix (lowercase letters, digits, '-')")
        prefix = "node"
    if isinstance(spec_nodes, bool) or not isinstance(spec_nodes, (int, list)):
        p.add("nodes", f"expected a node count or a list of nodes, got {spec_nodes!r}")
        return []
    if isinstance(spec_nodes, int):
        count = _int_in(p, "nodes", spec_nodes, 1, MAX_NODES)
        if count is None:
            return []
        try:
            shares = split_gpus(gpus, count)
        except ValueError as exc:
            p.add("gpus", str(exc))
            shares = [[] for _ in range(count)]
        return [NodeSpec(name=f"{prefix}{i + 1}", gpus=tuple(shares[i]), cpus=cpus, memory=memory)
                for i in range(count)]

    if not spec_nodes:
        p.add("nodes", "the node list is empty")
        return []
    if len(spec_nodes) > MAX_NODES:
        p.add("nodes", f"{len(spec_nodes)} nodes is more than the limit of {MAX_NODES}")
        return []
    explicit_gpus = any(isinstance(n, dict) and "gpus" in n for n in spec_nodes)
    shares: List[List[int]] = [[] for _ in spec_nodes]
    if gpus and explicit_gpus:
        p.add("gpus", "give GPUs either at the top level or per node, not both")
    elif gpus:
        try:
            shares = split_gpus(gpus, len(spec_nodes))
        except ValueError as exc:
            p.add("gpus", str(exc))
    result: List[NodeSpec] = []
    seen: Dict[str, int] = {}
    for i, where, n in _mappings(p, spec_nodes, "nodes", "'name'", NODE_KEYS):
        nname = n.get("name")
        if not isinstance(nname, str) or not NODE_RE.match(nname):
            p.add(f"{where}.name", f"{nname!r} is not a valid node name "
                                   "(lowercase letters, digits and '-', starting with a letter)")
            nname = f"invalid{i}"
        elif nname in seen:
            p.add(f"{where}.name", f"node '{nname}' is listed twice")
        seen[nname] = i
        node_gpus = _parsed(p, where, n, "gpus", parse_gpu_list, shares[i])
        ncpus = _int_in(p, f"{where}.cpus", n["cpus"], 1, 100000) if "cpus" in n else cpus
        nmem = _parsed(p, where, n, "memory", parse_memory_mb, memory)
        port = _int_in(p, f"{where}.port", n["port"], 1024, 65535) if "port" in n else None
        result.append(NodeSpec(name=nname, gpus=tuple(node_gpus), cpus=ncpus or cpus,
                               memory=nmem, port=port))
    all_ids = [g for n in result for g in n.gpus]
    for g in sorted({g for g in all_ids if all_ids.count(g) > 1}):
        p.add("gpus", f"GPU {g} is given to more than one node")
    return result


def _parsed(p: "_Problems", where: str, raw: Dict, key: str, parse, default):
    """parse(raw[key]), or ``default`` when the key is absent or its value is bad (reported)."""
    if key not in raw:
        return default
    try:
        return parse(raw[key])
    except ValueError as exc:
        p.add(f"{where}.{key}", str(exc))
        return default


def _mappings(p: "_Problems", items: List[Any], prefix: str, expect: str, keys) -> Iterator[Tuple[int, str, Dict]]:
    """(index, "prefix[i]", entry) for each entry of a YAML list that is a mapping; entries
    that are not, and unknown keys, are reported."""
    for i, entry in enumerate(items):
        where = f"{prefix}[{i}]"
        if not isinstance(entry, dict):
            p.add(where, f"expected a mapping with {expect}, got {entry!r}")
            continue
        _unknown_keys(p, where, entry, keys)
        yield i, where, entry


def _validate_partitions(p: _Problems, raw_parts: Any, node_names: List[str]) -> List[PartitionSpec]:
    if raw_parts is None:
        return [PartitionSpec(name="main", nodes=tuple(node_names), default=True)]
    if not isinstance(raw_parts, list) or not raw_parts:
        p.add("partitions", "expected a non-empty list of partitions")
        return []
    result: List[PartitionSpec] = []
    names: List[str] = []
    for i, where, part in _mappings(p, raw_parts, "partitions", "'name' and 'nodes'", PARTITION_KEYS):
        pname = part.get("name")
        if not isinstance(pname, str) or not PARTITION_RE.match(pname):
            p.add(f"{where}.name", f"{pname!r} is not a valid partition name")
            pname = f"invalid{i}"
        elif pname in names:
            p.add(f"{where}.name", f"partition '{pname}' is listed twice")
        names.append(pname)
        members = part.get("nodes", "ALL")
        if isinstance(members, str) and members.upper() == "ALL":
            members_t: Tuple[str, ...] = tuple(node_names)
        elif isinstance(members, list) and members and all(isinstance(m, str) for m in members):
            for m in members:
                if m not in node_names:
                    p.add(f"{where}.nodes", f"unknown node '{m}' (nodes are: {', '.join(node_names[:8])}"
                                            f"{', ...' if len(node_names) > 8 else ''})")
            members_t = tuple(members)
        else:
            p.add(f"{where}.nodes", f"expected 'ALL' or a list of node names, got {members!r}")
            members_t = ()
        default = part.get("default", False)
        if not isinstance(default, bool):
            p.add(f"{where}.default", f"expected true or false, got {default!r}")
            default = False
        max_time = str(part.get("maxTime", "INFINITE"))
        if not re.match(r"^(INFINITE|UNLIMITED|\d+(-\d+)?(:\d+){0,2})$", max_time):
            p.add(f"{where}.maxTime", f"{max_time!r} is not a Slurm time (e.g. 60, 1-00:00:00, INFINITE)")
        result.append(PartitionSpec(name=pname, nodes=members_t, default=default, max_time=max_time))
    if result and sum(1 for r in result if r.default) > 1:
        p.add("partitions", "more than one partition has default: true")
    elif result and not any(r.default for r in result):
        first = result[0]
        result[0] = PartitionSpec(first.name, first.nodes, True, first.max_time)
    return result
