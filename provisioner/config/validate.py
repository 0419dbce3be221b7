"""Turn a raw spec (YAML keys, flags merged in) into a ClusterSpec, reporting every problem.

Pure logic: host facts (CPU count, memory) come in as arguments so tests can pin them.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from provisioner.config.features import gpu_sharing, validate_health_check, validate_metrics
from provisioner.config.parse import parse_gpu_list, parse_memory_mb, split_gpus
from provisioner.config.problems import (TOKEN_RE, Problems, int_in, mappings, parsed_value, slurm_options, tokens,
                                         unknown_keys, yes_no)
from provisioner.config.types import (API_VERSION, BACKENDS, KIND, READ_ONLY_BACKENDS, AccountSpec, ClusterSpec,
                                      NodeSpec, PartitionSpec, QosSpec)
from provisioner.config.versions import normalize as normalize_slurm
from provisioner.errors import ConfigError


NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
NODE_RE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
PARTITION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,29}$")
# Spec keys that only some backends read: {key: backends}.
BACKEND_KEYS = {"image": ("docker",), "privileged": ("docker",)}
MAX_NODES = 1024

TOP_KEYS = {"apiVersion", "kind", "name", "backend", "nodes", "nodePrefix", "gpus", "fakeGpus",
            "cpus", "memory", "controllerPort", "partitions", "slurmConf", "wait", "image",
            "privileged", "accounting", "failureDetection", "slurm", "gpuType", "gpuModel", "features",
            "accounts", "qos", "rest", "users", "metrics", "healthCheck", "mig", "shards", "mps"}
# normal: Slurm's test-cluster timeouts; fast: a dead node is DOWN in ~12 s (docs/faults.md).
FAILURE_DETECTION = ("normal", "fast")
NODE_KEYS = {"name", "gpus", "cpus", "memory", "port", "gpuType", "gpuModel", "features", "options", "mig", "shards",
             "mps"}
PARTITION_KEYS = {"name", "nodes", "default", "maxTime", "options"}
ACCOUNT_KEYS = {"name", "parent", "users", "fairshare", "qos", "defaultQos"}
QOS_KEYS = {"name", "priority", "preempt", "preemptMode", "graceTime", "flags", "limits"}
# Slurm's spelling of the further options a node or partition may carry (case-insensitive
# in the YAML): what jobs can see of a production cluster's nodes and partitions. Paths,
# hosts and ports are not among them: they belong to the machine (docs/config.md).
NODE_OPTIONS = ("Boards", "SocketsPerBoard", "Sockets", "CoresPerSocket", "ThreadsPerCore", "Weight",
                "TmpDisk")
PARTITION_OPTIONS = (
    "AllowAccounts", "AllowQos", "Alternate", "DefaultTime", "DefCpuPerGPU", "DefMemPerCPU",
    "DefMemPerGPU", "DefMemPerNode", "DenyAccounts", "DenyQos", "DisableRootJobs", "ExclusiveUser",
    "GraceTime", "Hidden", "LLN", "MaxCPUsPerNode", "MaxCPUsPerSocket", "MaxMemPerCPU", "MaxMemPerNode",
    "MaxNodes", "MinNodes", "OverSubscribe", "OverTimeLimit", "PreemptMode", "PriorityJobFactor",
    "PriorityTier", "QOS", "ReqResv", "RootOnly", "SelectTypeParameters", "State", "TRESBillingWeights")
PREEMPT_MODES = ("off", "cancel", "requeue", "suspend", "gang")
# A local user name as useradd takes it (Debian's default NAME_REGEX, and at most 32).
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,30}[a-z0-9_$-]?$")
SLURM_TIME_RE = re.compile(r"^(INFINITE|UNLIMITED|\d+(-\d+)?(:\d+){0,2})$")


def validate(raw: Dict[str, Any], host_cpus: int, host_memory_mb: int,
             source: str = "cluster spec") -> ClusterSpec:
    """Validate ``raw`` and resolve defaults; raise ConfigError listing every problem."""
    p = Problems()
    if not isinstance(raw, dict):
        raise ConfigError([f"expected a mapping at the top level, got {type(raw).__name__}"], source)
    unknown_keys(p, "", raw, TOP_KEYS)
    if raw.get("apiVersion", API_VERSION) != API_VERSION:
        p.add("apiVersion", f"must be '{API_VERSION}', got {raw.get('apiVersion')!r}")
    if raw.get("kind", KIND) != KIND:
        p.add("kind", f"must be '{KIND}', got {raw.get('kind')!r}")

    name = raw.get("name", "default")
    if not isinstance(name, str) or not NAME_RE.match(name):
        p.add("name", f"{name!r} is not a valid cluster name "
                      "(lowercase letters, digits and '-', starting with a letter, at most 31)")
    backend = raw.get("backend", "local")
    if backend in READ_ONLY_BACKENDS:  # ssh: a provider that only reads clusters
        p.add("backend", f"backend {backend!r} reads clusters made by 'simcluster deploy' (status/verify/"
                         f"export-logs --ssh); up creates: {', '.join(BACKENDS)}")
    elif backend not in BACKENDS:
        p.add("backend", f"unknown backend {backend!r} (available: {', '.join(BACKENDS)})")

    cpus = host_cpus
    if "cpus" in raw:
        cpus = int_in(p, "cpus", raw["cpus"], 1, 100000) or host_cpus
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
        controller_port = int_in(p, "controllerPort", raw["controllerPort"], 1024, 65535)

    nodes = _validate_nodes(p, raw, gpus, cpus, memory)
    nodes = gpu_sharing(p, raw, nodes, fake_gpus)
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
    privileged = yes_no(p, "privileged", raw, "privileged")
    for key, value in (("image", image), ("privileged", privileged)):
        if value and backend not in BACKEND_KEYS[key]:
            only = " or ".join(BACKEND_KEYS[key])
            p.add(key, f"only applies to the {only} backend (backend: {only})")
            break
    accounting = yes_no(p, "accounting", raw, "accounting")
    rest = yes_no(p, "rest", raw, "rest")
    metrics, metrics_port = validate_metrics(p, raw.get("metrics", False))

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

    qos = _validate_qos(p, raw.get("qos"))
    accounts = _validate_accounts(p, raw.get("accounts"), {q.name for q in qos})
    if (accounts or qos) and not accounting:
        p.add("accounts" if accounts else "qos", "accounts and QoS live in the accounting database: "
                                                "set 'accounting: true' (or pass --accounting)")
    users = _validate_users(p, raw.get("users"), backend)
    health_check = validate_health_check(p, raw.get("healthCheck"))
    _check_partition_names(p, raw.get("partitions"), partitions, accounting, accounts, qos, users)

    if p.items:
        raise ConfigError(p.items, source)
    return ClusterSpec(name=name, backend=backend, nodes=tuple(nodes), partitions=tuple(partitions),
                       fake_gpus=fake_gpus, controller_port=controller_port,
                       slurm_conf_extra=tuple(extra), wait=float(wait), image=image, privileged=privileged,
                       accounting=accounting, failure_detection=failure_detection, slurm=slurm,
                       accounts=tuple(accounts), qos=tuple(qos), rest=rest, users=users,
                       metrics=metrics, metrics_port=metrics_port, health_check=health_check)


def _validate_nodes(p: Problems, raw: Dict, gpus: List[int], cpus: int, memory: int) -> List[NodeSpec]:
    spec_nodes = raw.get("nodes", 2)
    prefix = raw.get("nodePrefix", "node")
    if not isinstance(prefix, str) or not NODE_RE.match(prefix + "1"):
        p.add("nodePrefix", f"{prefix!r} is not a valid node name prefix (lowercase letters, digits, '-')")
        prefix = "node"
    if isinstance(spec_nodes, bool) or not isinstance(spec_nodes, (int, list)):
        p.add("nodes", f"expected a node count or a list of nodes, got {spec_nodes!r}")
        return []
    if isinstance(spec_nodes, int):
        count = int_in(p, "nodes", spec_nodes, 1, MAX_NODES)
        if count is None:
            return []
        try:
            shares = split_gpus(gpus, count)
        except ValueError as exc:
            p.add("gpus", str(exc))
            shares = [[] for _ in range(count)]
        gpu_type, gpu_model, features = _node_extras(p, "", raw, (None, None, ()))
        return [NodeSpec(name=f"{prefix}{i + 1}", gpus=tuple(shares[i]), cpus=cpus, memory=memory,
                         gpu_type=gpu_type if shares[i] else None, gpu_model=gpu_model if shares[i] else None,
                         features=features)
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
    defaults = _node_extras(p, "", raw, (None, None, ()))
    result: List[NodeSpec] = []
    seen: Dict[str, int] = {}
    for i, where, n in mappings(p, spec_nodes, "nodes", "'name'", NODE_KEYS):
        nname = n.get("name")
        if not isinstance(nname, str) or not NODE_RE.match(nname):
            p.add(f"{where}.name", f"{nname!r} is not a valid node name "
                                   "(lowercase letters, digits and '-', starting with a letter)")
            nname = f"invalid{i}"
        elif nname in seen:
            p.add(f"{where}.name", f"node '{nname}' is listed twice")
        seen[nname] = i
        node_gpus = parsed_value(p, where, n, "gpus", parse_gpu_list, shares[i])
        ncpus = int_in(p, f"{where}.cpus", n["cpus"], 1, 100000) if "cpus" in n else cpus
        nmem = parsed_value(p, where, n, "memory", parse_memory_mb, memory)
        port = int_in(p, f"{where}.port", n["port"], 1024, 65535) if "port" in n else None
        gpu_type, gpu_model, features = _node_extras(p, f"{where}.", n, defaults)
        if not node_gpus:
            for key in ("gpuType", "gpuModel"):
                if key in n:
                    p.add(f"{where}.{key}", "the node has no GPUs (give it 'gpus', or fakeGpus at the top)")
            gpu_type = gpu_model = None
        options = slurm_options(p, f"{where}.options", n.get("options"), NODE_OPTIONS)
        result.append(NodeSpec(name=nname, gpus=tuple(node_gpus), cpus=ncpus or cpus,
                               memory=nmem, port=port, gpu_type=gpu_type, gpu_model=gpu_model,
                               features=features, options=options))
    all_ids = [g for n in result for g in n.gpus]
    for g in sorted({g for g in all_ids if all_ids.count(g) > 1}):
        p.add("gpus", f"GPU {g} is given to more than one node")
    return result


def _validate_partitions(p: Problems, raw_parts: Any, node_names: List[str]) -> List[PartitionSpec]:
    if raw_parts is None:
        return [PartitionSpec(name="main", nodes=tuple(node_names), default=True)]
    if not isinstance(raw_parts, list) or not raw_parts:
        p.add("partitions", "expected a non-empty list of partitions")
        return []
    result: List[PartitionSpec] = []
    names: List[str] = []
    for i, where, part in mappings(p, raw_parts, "partitions", "'name' and 'nodes'", PARTITION_KEYS):
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
        default = yes_no(p, f"{where}.default", part, "default")
        max_time = str(part.get("maxTime", "INFINITE"))
        if not SLURM_TIME_RE.match(max_time):
            p.add(f"{where}.maxTime", f"{max_time!r} is not a Slurm time (e.g. 60, 1-00:00:00, INFINITE)")
        options = slurm_options(p, f"{where}.options", part.get("options"), PARTITION_OPTIONS)
        for key, value in options:
            if key in ("DefaultTime",) and not SLURM_TIME_RE.match(value):
                p.add(f"{where}.options.{key}", f"{value!r} is not a Slurm time (e.g. 60, 1-00:00:00)")
            elif key == "PreemptMode" and not all(m.lower() in PREEMPT_MODES + ("within",) for m in value.split(",")):
                p.add(f"{where}.options.{key}", f"{value!r}: expected {', '.join(m.upper() for m in PREEMPT_MODES)}")
        result.append(PartitionSpec(name=pname, nodes=members_t, default=default, max_time=max_time,
                                    options=options))
    if result and sum(1 for r in result if r.default) > 1:
        p.add("partitions", "more than one partition has default: true")
    elif result and not any(r.default for r in result):
        first = result[0]
        result[0] = PartitionSpec(first.name, first.nodes, True, first.max_time, first.options)
    return result


def _node_extras(p: Problems, where: str, raw: Dict, defaults: Tuple) -> Tuple[Optional[str], Optional[str], Tuple[str, ...]]:
    """(gpuType, gpuModel, features) of a node entry (or of the top level), else ``defaults``."""
    gpu_type, gpu_model, features = defaults
    if raw.get("gpuType") is not None:
        gpu_type = str(raw["gpuType"])
        if not TOKEN_RE.match(gpu_type):
            p.add(f"{where}gpuType", f"{gpu_type!r} is not a GPU type like 'h100' or 'a100'")
    if raw.get("gpuModel") is not None:
        gpu_model = raw["gpuModel"]
        if not isinstance(gpu_model, str) or not gpu_model.strip() or "\n" in gpu_model or len(gpu_model) > 96:
            p.add(f"{where}gpuModel", f"expected a model name like 'NVIDIA H100 80GB HBM3', got {gpu_model!r}")
            gpu_model = None
    if raw.get("features") is not None:
        features = tokens(p, f"{where}features", raw["features"], "features")
    return gpu_type, gpu_model, features


def _validate_qos(p: Problems, raw: Any) -> List[QosSpec]:
    result: List[QosSpec] = []
    for i, where, q in mappings(p, raw, "qos", "'name'", QOS_KEYS, "QoS (name, priority, preempt ...)"):
        name = str(q.get("name", "")).lower()
        if not TOKEN_RE.match(name):
            p.add(f"{where}.name", f"{q.get('name')!r} is not a valid QoS name")
        elif name in [r.name for r in result]:
            p.add(f"{where}.name", f"QoS '{name}' is listed twice")
        priority = int_in(p, f"{where}.priority", q["priority"], 0, 2 ** 31) if "priority" in q else None
        grace = int_in(p, f"{where}.graceTime", q["graceTime"], 0, 10 ** 7) if "graceTime" in q else None
        mode = q.get("preemptMode")
        if mode is not None and str(mode).lower() not in ("off", "cancel", "requeue", "suspend"):
            p.add(f"{where}.preemptMode", f"{mode!r}: expected off, cancel, requeue or suspend")
            mode = None
        preempt = tuple(x.lower() for x in tokens(p, f"{where}.preempt", q.get("preempt", []), "QoS names"))
        flags = tokens(p, f"{where}.flags", q.get("flags", []), "flags")
        limits = slurm_options(p, f"{where}.limits", q.get("limits"), QOS_LIMITS)
        result.append(QosSpec(name=name, priority=priority, preempt=preempt,
                              preempt_mode=str(mode).lower() if mode is not None else None, grace_time=grace,
                              flags=flags, limits=limits))
    known = {r.name for r in result} | {"normal"}
    for i, q in enumerate(result):
        for other in q.preempt:
            if other not in known:
                p.add(f"qos[{i}].preempt", f"unknown QoS '{other}' (defined: {', '.join(sorted(known))})")
    return result


# sacctmgr's QoS options a spec may set under `limits` (Slurm's spelling).
QOS_LIMITS = ("Description", "GrpJobs", "GrpSubmitJobs", "GrpTRES", "GrpTRESMins", "GrpTRESRunMins", "GrpWall",
              "MaxJobsPerAccount", "MaxJobsPerUser", "MaxSubmitJobsPerAccount", "MaxSubmitJobsPerUser",
              "MaxTRESMinsPerJob", "MaxTRESPerAccount", "MaxTRESPerJob", "MaxTRESPerNode", "MaxTRESPerUser",
              "MaxTRESRunMinsPerUser", "MaxWall", "MinPrioThreshold", "MinTRESPerJob", "UsageFactor",
              "UsageThreshold")


def _validate_accounts(p: Problems, raw: Any, qos_names: set) -> List[AccountSpec]:
    result: List[AccountSpec] = []
    allowed_qos = qos_names | {"normal"}
    for i, where, a in mappings(p, raw, "accounts", "'name'", ACCOUNT_KEYS, "accounts (name, users, fairshare ...)"):
        # Slurm keeps account names in lower case (sacctmgr lowers them), and so do we.
        name = str(a.get("name", "")).lower()
        if not TOKEN_RE.match(name) or name == "root":
            p.add(f"{where}.name", f"{a.get('name')!r} is not a valid account name")
        elif name in [r.name for r in result]:
            p.add(f"{where}.name", f"account '{name}' is listed twice")
        parent = a.get("parent")
        parent = str(parent).lower() if parent is not None else None
        users = tokens(p, f"{where}.users", a.get("users", []), "user names")
        fairshare = int_in(p, f"{where}.fairshare", a["fairshare"], 0, 2 ** 31) if "fairshare" in a else None
        qos = tuple(x.lower() for x in tokens(p, f"{where}.qos", a.get("qos", []), "QoS names"))
        for x in qos:
            if x not in allowed_qos:
                p.add(f"{where}.qos", f"unknown QoS '{x}' (defined: {', '.join(sorted(allowed_qos))})")
        default_qos = a.get("defaultQos")
        default_qos = str(default_qos).lower() if default_qos is not None else None
        if default_qos is not None and default_qos not in (qos or allowed_qos):
            p.add(f"{where}.defaultQos", f"'{default_qos}' is not among the account's QoS")
        result.append(AccountSpec(name=name, parent=None if parent in (None, "root") else parent, users=users,
                                  fairshare=fairshare, qos=qos, default_qos=default_qos))
    names = [r.name for r in result]
    for i, acc in enumerate(result):
        if acc.parent is not None and acc.parent not in names:
            p.add(f"accounts[{i}].parent", f"unknown account '{acc.parent}' (give it its own entry, or leave "
                                           "'parent' out for root)")
        elif acc.parent is not None and names.index(acc.parent) > i:
            p.add(f"accounts[{i}].parent", f"account '{acc.parent}' must come before '{acc.name}'")
    return result


def _validate_users(p: Problems, raw: Any, backend: Any) -> Tuple[str, ...]:
    """``users``: local user names (a list, or one comma-separated string as --users gives
    it). Whether each exists is a fact of the host `up` runs on: the local provider's
    preflight checks it, not this pure validation."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [u.strip() for u in raw.split(",") if u.strip()]
    if not isinstance(raw, list) or not all(isinstance(u, str) for u in raw):
        p.add("users", f"expected a list of local user names (users: [alice, bob], or --users alice,bob), got {raw!r}")
        return ()
    for u in raw:
        if not USER_RE.match(u):
            p.add("users", f"{u!r} is not a local user name (lowercase letters, digits, '_' and '-', "
                           "starting with a letter or '_', at most 32)")
        elif u == "root":
            p.add("users", "'root' uses every cluster already (and 'root' is the accounting tree's top "
                           "account): leave it out")
    for u in sorted({u for u in raw if raw.count(u) > 1}):
        p.add("users", f"user '{u}' is listed twice")
    if raw and backend not in ("local", None):
        p.add("users", "only applies to the local backend: jobs in containers run as the container's root")
    return tuple(dict.fromkeys(raw))


def _check_partition_names(p: Problems, raw_parts: Any, partitions: List[PartitionSpec], accounting: bool,
                           accounts: List[AccountSpec], qos: List[QosSpec], users: Tuple[str, ...] = ()) -> None:
    """A partition's QOS= must exist (slurmctld refuses the partition otherwise), and the
    accounts and QoS it allows should: Slurm keeps them in the accounting database."""
    if raw_parts is None:
        return
    known_qos = {q.name for q in qos} | {"normal"}
    # With accounting, each of the spec's users has an account of their own name.
    known_accounts = {a.name for a in accounts} | {"simcluster", "root"} | set(users)
    for i, part in enumerate(partitions):
        for key in ("QOS", "AllowQos", "DenyQos", "AllowAccounts", "DenyAccounts"):
            value = part.option(key)
            if value is None:
                continue
            if not accounting and key in ("QOS", "AllowQos", "DenyQos"):
                p.add(f"partitions[{i}].options.{key}", "QoS live in the accounting database: set 'accounting: true' "
                                                         "and list them under 'qos'")
                continue
            if not accounting:
                continue
            known = known_qos if "qos" in key.lower() else known_accounts
            for name in value.split(","):
                if name.upper() != "ALL" and name.lower() not in known:
                    what = "qos" if "qos" in key.lower() else "accounts"
                    p.add(f"partitions[{i}].options.{key}", f"'{name}' is not in the spec's {what} (add it there)")
