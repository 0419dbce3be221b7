"""Read and check an Ansible inventory before anything runs.

The file is parsed by Ansible's own inventory plugins (ini, or yaml for .yml/.yaml), so it
means exactly what ansible-playbook will see. Then simcluster's rules: exactly one host in
[controller], at least one in [compute], host names usable as Slurm node names, and
slurm_cpus / slurm_memory / slurm_gpus values that parse. Every problem is reported at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

from provisioner.config.parse import parse_gpu_list, parse_memory_mb
from provisioner.errors import ConfigError, UsageError

CONTROLLER_GROUP = "controller"
COMPUTE_GROUP = "compute"
# Slurm node names: inventory hostnames, so no dots (Slurm would cut them) and no spaces.
HOST_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,39}$")


@dataclass
class Host:
    """One inventory host with its merged group and host variables."""

    name: str
    vars: Dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return str(self.vars.get("ansible_host", self.name))

    @property
    def port(self) -> int:
        return int(self.vars.get("ansible_port", 22))


@dataclass
class Inventory:
    path: Path
    controller: Host
    compute: List[Host]
    all_vars: Dict[str, Any]

    @property
    def hosts(self) -> List[Host]:
        """Every host once, controller first."""
        seen = {self.controller.name: self.controller}
        for h in self.compute:
            seen.setdefault(h.name, h)
        return list(seen.values())


def _ansible_parse(path: Path):
    try:
        # lazy: Ansible is an optional dependency (the deploy extra) and slow to import
        from ansible.errors import AnsibleError
        from ansible.inventory.data import InventoryData
        from ansible.parsing.dataloader import DataLoader
        from ansible.plugins.loader import inventory_loader
    except ImportError:
        from provisioner.errors import PrerequisiteError
        raise PrerequisiteError("simcluster deploy needs Ansible", "pip install 'simcluster[deploy]'") from None
    data = InventoryData()
    plugin = inventory_loader.get("yaml" if path.suffix in (".yml", ".yaml") else "ini")
    try:
        plugin.parse(data, DataLoader(), str(path), cache=False)
        data.reconcile_inventory()
    except AnsibleError as exc:
        first = str(getattr(exc, "message", exc)).strip().splitlines()[0]
        raise UsageError(f"invalid inventory: {first}", "see ansible/inventory.example.ini") from None
    return data


def _merged_vars(host) -> Dict[str, Any]:
    # lazy: Ansible is an optional dependency (the deploy extra) and slow to import
    from ansible.inventory.helpers import get_group_vars
    from ansible.utils.vars import combine_vars
    return dict(combine_vars(get_group_vars(host.get_groups()), host.get_vars()))


def check_host_vars(host: Host) -> List[str]:
    """Problems with one host's slurm_* variables."""
    problems = []
    v = host.vars
    if "slurm_cpus" in v:
        cpus = v["slurm_cpus"]
        if isinstance(cpus, bool) or not str(cpus).isdigit() or int(cpus) < 1:
            problems.append(f"{host.name}: slurm_cpus={cpus!r} is not a positive whole number")
    if "slurm_memory" in v:
        try:
            parse_memory_mb(int(v["slurm_memory"]) if str(v["slurm_memory"]).isdigit() else v["slurm_memory"])
        except ValueError as exc:
            problems.append(f"{host.name}: slurm_memory: {exc}")
    if "slurm_gpus" in v:
        try:
            parse_gpu_list(v["slurm_gpus"])
        except ValueError as exc:
            problems.append(f"{host.name}: slurm_gpus: {exc}")
    return problems


def load_inventory(path: str) -> Inventory:
    """Parse and check ``path``; raise UsageError/ConfigError (exit 2) listing every problem."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"inventory {path} does not exist", "pass an inventory file with -i, see ansible/inventory.example.ini")
    data = _ansible_parse(p)
    groups = data.groups
    problems: List[str] = []
    ctl_hosts = groups[CONTROLLER_GROUP].get_hosts() if CONTROLLER_GROUP in groups else []
    compute_hosts = groups[COMPUTE_GROUP].get_hosts() if COMPUTE_GROUP in groups else []
    if len(ctl_hosts) != 1:
        problems.append(f"[{CONTROLLER_GROUP}] must list exactly one host, it lists {len(ctl_hosts)}"
                        + (f" ({', '.join(h.name for h in ctl_hosts)})" if ctl_hosts else ""))
    if not compute_hosts:
        problems.append(f"[{COMPUTE_GROUP}] must list at least one host")
    hosts = {h.name: Host(h.name, _merged_vars(h)) for h in list(ctl_hosts) + list(compute_hosts)}
    for host in hosts.values():
        if not HOST_RE.match(host.name):
            problems.append(f"{host.name!r} cannot be a Slurm node name (letters, digits, '-', '_'; "
                            f"put an address in ansible_host=, e.g. node1 ansible_host={host.name})")
        problems.extend(check_host_vars(host))
    if problems:
        raise ConfigError(problems, source=f"inventory {path}")
    all_vars = dict(groups["all"].get_vars()) if "all" in groups else {}
    return Inventory(path=p.resolve(), controller=hosts[ctl_hosts[0].name],
                     compute=[hosts[h.name] for h in compute_hosts], all_vars=all_vars)
