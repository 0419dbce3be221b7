"""The status key contract: every backend's `status --json` has exactly these keys.

The reference is the model itself (provisioner/cluster/inspect/status.py), filled with
placeholders, so a field added to the model is expected everywhere at once.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any, Set

from provisioner.cluster.inspect.status import ClusterStatus, DaemonStatus, NodeStatus
from provisioner.cluster.services import accounting
from provisioner.cluster.services import metrics
from provisioner.cluster.services import rest


def key_paths(value: Any, prefix: str = "") -> Set[str]:
    """Every key path in ``value``: 'controller.port', 'nodes[].name', 'accounting.slurmdbd.alive'."""
    paths: Set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            paths.add(path)
            paths |= key_paths(v, path)
    elif isinstance(value, list):
        for item in value:
            paths |= key_paths(item, f"{prefix}[]")
    return paths


def _placeholder(cls):
    return cls(**{f.name: None for f in dataclasses.fields(cls)})


def reference_status_keys() -> Set[str]:
    """The key paths of ClusterStatus(...).to_dict() with one node and accounting off
    (accounting.health's keys are the same whether it is on or off)."""
    no_accounting = accounting.health(SimpleNamespace(spec=SimpleNamespace(accounting=False)), {})
    fields = {f.name: None for f in dataclasses.fields(ClusterStatus)}
    fields.update(controller=_placeholder(DaemonStatus), munged=_placeholder(DaemonStatus),
                  accounting=no_accounting, nodes=[_placeholder(NodeStatus)],
                  rest=rest.health(SimpleNamespace(spec=SimpleNamespace(rest=False)), {}),
                  metrics=metrics.health(SimpleNamespace(spec=SimpleNamespace(metrics=False)), {}))
    return key_paths(ClusterStatus(**fields).to_dict())
