"""Providers of clusters, picked from one registry by name.

PROVIDERS maps every provider's name to its class ("module:class", imported on first
use: the docker SDK and paramiko load only for docker and ssh). The names are the spec's
(provisioner/config/types.py): BACKENDS, those `up` can create clusters with (the spec's
``backend:`` values), and READ_ONLY_BACKENDS ("ssh": it reads clusters made by
`simcluster deploy` and never creates one).

Adding a backend: a package under provisioner/providers/ with a subclass of
provisioner.cluster.model.provider.Provider (the contract: its abstract core and the
capabilities), one line in PROVIDERS and its name in BACKENDS (see docs/architecture.md,
"Adding a backend").
"""

from __future__ import annotations

import importlib
from typing import Dict, List

from provisioner.cluster.model.provider import Provider
from provisioner.config.types import BACKENDS
from provisioner.errors import UsageError

# name -> "module:class".
PROVIDERS: Dict[str, str] = {
    "local": "provisioner.providers.local:LocalProvider",
    "docker": "provisioner.providers.docker:DockerProvider",
    "ssh": "provisioner.providers.ssh:SSHProvider",
}
# BACKENDS (the providers `up` can create clusters with) are those whose clusters live on
# this machine (state files, containers): list, down --all and the name lookups ask these.
_instances: Dict[str, Provider] = {}


def provider_class(name: str) -> type:
    """The Provider subclass registered as ``name`` (imports its module)."""
    if name not in PROVIDERS:
        raise UsageError(f"unknown backend {name!r}", f"use one of: {', '.join(BACKENDS)}")
    module, _, cls = PROVIDERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def provider_named(name: str) -> Provider:
    """The provider registered as ``name`` (one instance per process)."""
    if name not in _instances:
        _instances[name] = provider_class(name)()
    return _instances[name]


def registered_providers(available_only: bool = False) -> List[Provider]:
    """Every backend (BACKENDS); with ``available_only`` those that can answer here (docker: an engine runs)."""
    providers = []
    for n in BACKENDS:
        try:
            providers.append(provider_named(n))
        except ImportError:
            # A backend whose library is missing or broken here (docker: the Docker SDK)
            # has no cluster to find: lookups skip it; asked for by name, it still fails.
            if not available_only:
                raise
    return [p for p in providers if not available_only or p.available()]


__all__ = ["PROVIDERS", "provider_class", "provider_named", "registered_providers"]
