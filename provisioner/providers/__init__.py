"""Providers of clusters, picked from one registry by name.

PROVIDERS maps every provider's name to its class ("module:class", imported on first
use: the docker SDK and paramiko load only for docker and ssh). BACKENDS are the ones
`up` can create clusters with (the spec's ``backend:`` values); "ssh" is a provider only:
it reads clusters made by `simcluster deploy` and never creates one.

Adding a backend: a package under provisioner/providers/ with a subclass of
provisioner.providers.base.Provider (its abstract core), one line in PROVIDERS and, if
`up` can create it, its name in BACKENDS (see docs/architecture.md, "Adding a backend").

This module imports nothing heavy: config/validate.py reads BACKENDS from it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Dict, List, Tuple

from provisioner.errors import UsageError

if TYPE_CHECKING:
    from provisioner.providers.base import Provider

# name -> "module:class".
PROVIDERS: Dict[str, str] = {
    "local": "provisioner.providers.local:LocalProvider",
    "docker": "provisioner.providers.docker:DockerProvider",
    "ssh": "provisioner.providers.ssh:SSHProvider",
}
# The providers `up` can create clusters with, and whose clusters live on this machine
# (state files, containers): list, down --all and the name lookups ask these.
BACKENDS: Tuple[str, ...] = ("local", "docker")
_instances: Dict[str, "Provider"] = {}


def provider_class(name: str) -> type:
    """The Provider subclass registered as ``name`` (imports its module)."""
    if name not in PROVIDERS:
        raise UsageError(f"unknown backend {name!r}", f"use one of: {', '.join(BACKENDS)}")
    module, _, cls = PROVIDERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def provider_named(name: str) -> "Provider":
    """The provider registered as ``name`` (one instance per process)."""
    if name not in _instances:
        _instances[name] = provider_class(name)()
    return _instances[name]


def registered_providers(available_only: bool = False) -> List["Provider"]:
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


def __getattr__(name: str):
    # lazy: `from provisioner.providers import Provider` keeps working without importing the
    # base (and with it the cluster model) when only the names above are needed.
    if name == "Provider":
        from provisioner.providers.base import Provider
        return Provider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BACKENDS", "PROVIDERS", "Provider", "provider_class", "provider_named", "registered_providers"]
