"""Jinja2 filters for the simcluster roles: GPU lists and memory sizes, parsed exactly as
cluster specs are (provisioner/config/parse.py is loaded by path, so plain ansible-playbook
runs need no simcluster installation)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ansible.errors import AnsibleFilterError

# In a checkout: ansible/filter_plugins/ -> provisioner/config/parse.py; in an installed
# package (the build puts this tree at provisioner/data/ansible/): -> ../../../config/parse.py.
_HERE = Path(__file__).resolve()
_PARSE = next((p for p in (_HERE.parents[2] / "provisioner" / "config" / "parse.py",
                           _HERE.parents[3] / "config" / "parse.py") if p.is_file()),
              _HERE.parents[2] / "provisioner" / "config" / "parse.py")
_spec = importlib.util.spec_from_file_location("simcluster_parse", _PARSE)
_parse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_parse)


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


class FilterModule:
    def filters(self):
        return {"simcluster_gpu_list": gpu_list, "simcluster_memory_mb": memory_mb}
