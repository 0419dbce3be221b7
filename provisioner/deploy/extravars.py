"""Turn a cluster spec (--config) and an inventory into the playbook's extra variables.

The inventory decides which hosts are nodes (every [compute] host, named by its inventory
name). A spec file adds what it says -- name, partitions, slurmConf lines, fake GPUs,
ports, per-node cpus/memory/gpus, accounting with its QoS and accounts, rest -- and nothing else: whatever it leaves out the roles
take from the inventory's slurm_* variables or the hosts' facts, exactly as a plain
ansible-playbook run would. A value set in both places must agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from provisioner.cluster.services.accounting import spec_commands, tres_limit_commands
from provisioner.config.load import read_yaml
from provisioner.config.parse import parse_gpu_list, parse_memory_mb
from provisioner.config.types import ClusterSpec
from provisioner.config.validate import validate
from provisioner.deploy.inventory import Inventory
from provisioner.errors import ConfigError
from provisioner.paths import simcluster_home
from provisioner.render import TIMEOUTS

# Keys of a spec that only mean something on one machine; deploy ignores them.
LOCAL_ONLY_KEYS = ("backend", "image", "privileged", "nodePrefix")
# spec key -> (inventory host var, parser for comparing the two)
SHAPE_VARS = {"cpus": ("slurm_cpus", int), "memory": ("slurm_memory", parse_memory_mb),
              "gpus": ("slurm_gpus", parse_gpu_list)}


def deploy_dir(name: str) -> Path:
    """Where deploy keeps a cluster's munge key and run artifacts (not a cluster name: dot)."""
    return simcluster_home() / ".deploy" / name


def cluster_name(raw: Dict[str, Any], inventory: Inventory) -> str:
    return str(raw.get("name") or inventory.all_vars.get("slurm_cluster_name") or "default")


def _spec_nodes(raw: Dict[str, Any], inventory: Inventory, problems: List[str]) -> Dict[str, Dict]:
    """The spec's own entries per compute host ({} for hosts it does not list)."""
    names = [h.name for h in inventory.compute]
    given = raw.get("nodes")
    if isinstance(given, list):
        entries = {n.get("name"): n for n in given if isinstance(n, dict)}
        for n in given:
            if not isinstance(n, dict) or n.get("name") not in names:
                label = n.get("name") if isinstance(n, dict) else n
                problems.append(f"nodes: {label!r} is not a host in the inventory's [compute] group "
                                f"({', '.join(names)})")
        return {h: dict(entries.get(h, {}), name=h) for h in names}
    if isinstance(given, int) and not isinstance(given, bool) and given != len(names):
        problems.append(f"nodes: the spec asks for {given} nodes but the inventory has {len(names)} "
                        "compute hosts (drop 'nodes' from the spec, or list the hosts by name)")
    return {h: {"name": h} for h in names}


def build_extravars(config_path: Optional[str], inventory: Inventory) -> Dict[str, Any]:
    """Extra vars for ansible/site.yml; raise ConfigError listing every problem."""
    raw = read_yaml(config_path) if config_path else {}
    name = cluster_name(raw, inventory)
    extra: Dict[str, Any] = {"slurm_cluster_name": name,
                             "munge_key_file": str(deploy_dir(name) / "munge.key")}
    if not raw:
        return extra
    problems: List[str] = []
    entries = _spec_nodes(raw, inventory, problems)
    resolved = {k: v for k, v in raw.items() if k not in LOCAL_ONLY_KEYS}
    resolved["nodes"] = list(entries.values())
    resolved["name"] = name  # the inventory's slurm_cluster_name where the spec names none (sacctmgr's Cluster=)
    try:
        # Host shapes are unknown here (facts come from the hosts): placeholders, and only
        # values the spec really sets are passed on below.
        spec = validate(resolved, host_cpus=1, host_memory_mb=1, source=str(config_path))
    except ConfigError as exc:
        problems.extend(exc.problems)
        spec = None
    if problems or spec is None:
        raise ConfigError(problems, source=str(config_path))

    overrides: Dict[str, Dict[str, Any]] = {}
    for host in inventory.compute:
        node, entry = spec.node(host.name), entries[host.name]
        explicit = {
            "cpus": node.cpus if ("cpus" in entry or "cpus" in raw) else None,
            "memory": node.memory if ("memory" in entry or "memory" in raw) else None,
            "gpus": list(node.gpus) if ("gpus" in entry or raw.get("gpus") is not None
                                        or not isinstance(raw.get("fakeGpus", False), bool)) else None,
            "port": node.port,
            # What the spec says of the node beyond its shape (typed GPUs, features, options).
            "gpu_type": node.gpu_type,
            "features": list(node.features) or None,
            "options": [list(o) for o in node.options] or None,
        }
        for key, (var, parse) in SHAPE_VARS.items():
            if explicit[key] is None or var not in host.vars:
                continue
            try:
                inv_value = parse(int(host.vars[var]) if str(host.vars[var]).isdigit() and key != "gpus"
                                  else host.vars[var])
            except ValueError:
                continue  # already reported by load_inventory
            if inv_value != explicit[key]:
                problems.append(f"{host.name}: {key} is {explicit[key]} in {config_path} but "
                                f"{var}={host.vars[var]} in the inventory (set it in one place)")
        overrides[host.name] = {k: v for k, v in explicit.items() if v is not None}
    if problems:
        raise ConfigError(problems, source=str(config_path))

    extra["slurm_node_overrides"] = {h: o for h, o in overrides.items() if o}
    if "partitions" in raw:
        extra["slurm_partitions"] = [{"name": p.name, "nodes": list(p.nodes), "default": p.default,
                                      "max_time": p.max_time, "options": [list(o) for o in p.options]}
                                     for p in spec.partitions]
    if "slurmConf" in raw:
        extra["slurm_extra_lines"] = list(spec.slurm_conf_extra)
    if "failureDetection" in raw:
        extra["slurm_timeouts"] = dict(TIMEOUTS[spec.failure_detection])
    if "fakeGpus" in raw:
        extra["slurm_fake_gpus"] = spec.fake_gpus
    if spec.controller_port:
        extra["slurm_controller_port"] = spec.controller_port
    if "wait" in raw:
        extra["slurm_wait_timeout"] = int(spec.wait)
    if spec.accounting:
        extra.update(accounting_vars(spec, name))
    if raw.get("rest"):
        # The HS256 key is made on the first run beside the munge key (ansible/roles/slurm_rest).
        extra.update(slurm_rest=True, slurm_jwt_key_file=str(deploy_dir(name) / "jwt_hs256.key"))
    return extra


def accounting_vars(spec: ClusterSpec, name: str) -> Dict[str, Any]:
    """accounting: true -> the slurm_accounting role's variables: the spec's QoS and accounts
    as the sacctmgr commands `up` runs (cluster/services/accounting.py), for root, who deploys and
    verifies; the users the accounts list must exist on the controller (the role checks).
    The database password stays in a file beside the munge key: never an extra var (those
    are written into the runner's artifacts)."""
    users = sorted({u for a in spec.accounts for u in a.users} | set(spec.users))
    return {"slurm_accounting": True, "slurm_db_password_file": str(deploy_dir(name) / "db.password"),
            "slurm_accounting_commands": spec_commands(spec, "root", users),
            "slurm_accounting_tres_commands": tres_limit_commands(spec), "slurm_accounting_users": users}
