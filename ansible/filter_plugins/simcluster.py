"""Jinja2 filters for the simcluster roles: GPU lists and memory sizes, parsed exactly as
cluster specs are, node lines grouped as the Python renderer groups them, and the accounting database's bootstrap SQL and registration commands,
exactly as `up` makes them (provisioner/config/parse.py, provisioner/config/nodelines.py and
provisioner/cluster/services/accounting_sql.py are loaded by path, so plain ansible-playbook runs need no simcluster installation)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ansible.errors import AnsibleFilterError

# In a checkout: ansible/filter_plugins/ -> provisioner/...; in an installed package (the
# build puts this tree at provisioner/data/ansible/): -> ../../../<the same path below provisioner>.
_HERE = Path(__file__).resolve()


def _path(*rel: str) -> Path:
    """A module of the package by its path below provisioner/, in a checkout or installed."""
    return next((p for p in (_HERE.parents[2].joinpath("provisioner", *rel), _HERE.parents[3].joinpath(*rel))
                 if p.is_file()), _HERE.parents[2].joinpath("provisioner", *rel))


def _load(name: str, path: Path):
    """A stdlib-only module of the package, loaded by its path."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_PARSE = _path("config", "parse.py")
_ACCOUNTING_SQL = _path("cluster", "services", "accounting_sql.py")
_NODELINES = _path("config", "nodelines.py")
_parse = _load("simcluster_parse", _PARSE)
_nodelines = _load("simcluster_nodelines", _NODELINES)
_accounting = _load("simcluster_accounting_sql", _ACCOUNTING_SQL)


def gpu_list(value):
    """'0-3', '6,7', 5 or [6, 7] -> [ints]."""
    try:
        return _parse.parse_gpu_list(value)
    except ValueError as exc:
        raise AnsibleFilterError(f"slurm_gpus: {exc}")


def memory_mb(value):
    """240000, '240000', '240G' -> megabytes."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    try:
        return _parse.parse_memory_mb(value)
    except ValueError as exc:
        raise AnsibleFilterError(f"slurm_memory: {exc}")


def accounting(_value=None):
    """The accounting database's names and MariaDB's options (any input: filters need one)."""
    return _accounting.constants()


def db_bootstrap_sql(system_tables, socket_user, password):
    """The SQL `mariadbd --bootstrap` is fed: the system tables' texts, then the slurm user."""
    return _accounting.bootstrap_sql(list(system_tables), str(socket_user), str(password))


def register_commands(cluster_name, user):
    """sacctmgr commands that add the cluster, the simcluster account and ``user``."""
    return _accounting.register_commands(str(cluster_name), str(user))


def sacctmgr_refused(output):
    """The first line in which sacctmgr refused a command ('' where none)."""
    return _accounting.refused(str(output or ""))


class FilterModule:
    def filters(self):
        return {"simcluster_gpu_list": gpu_list, "simcluster_memory_mb": memory_mb,
                "simcluster_accounting": accounting, "simcluster_db_bootstrap_sql": db_bootstrap_sql,
                "simcluster_register_commands": register_commands, "simcluster_sacctmgr_refused": sacctmgr_refused,
                # slurm.conf's and gres.conf's node lines, grouped as `up` groups them.
                "simcluster_node_lines": _nodelines.node_lines, "simcluster_host_list": _nodelines.host_list}
