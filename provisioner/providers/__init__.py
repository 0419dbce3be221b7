"""Backends that run a cluster, picked from one registry by name.

Adding a backend is one package under provisioner/providers/ with a Provider subclass and
one line in BACKENDS (see docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import Dict, List

from provisioner.errors import UsageError
from provisioner.providers.base import Provider

# name -> "module:class", imported on first use (the docker SDK loads only for docker).
BACKENDS: Dict[str, str] = {
    "local": "provisioner.providers.local:LocalProvider",
    "docker": "provisioner.providers.docker:DockerProvider",
}
_instances: Dict[str, Provider] = {}


def provider_named(name: str) -> Provider:
    """The provider of backend ``name`` (one instance per process)."""
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}", f"use one of: {', '.join(BACKENDS)}")
    if name not in _instances:
        module, _, cls = BACKENDS[name].partition(":")
        _instances[name] = getattr(importlib.import_module(module), cls)()
    return _instances[name]


def registered_providers(available_only: bool = False) -> List[Provider]:
    """Every backend; with ``available_only`` those that can answer here (docker: an engine runs)."""
    providers = [provider_named(n) for n in BACKENDS]
    return [p for p in providers if not available_only or p.available()]


__all__ = ["BACKENDS", "Provider", "provider_named", "registered_providers"]
