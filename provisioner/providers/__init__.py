"""Backends that run a cluster: local processes now; docker and ssh hosts later."""

from provisioner.providers.base import Provider
from provisioner.providers.local import LocalProvider


def get_provider(backend: str) -> Provider:
    if backend == "local":
        return LocalProvider()
    from provisioner.errors import UsageError
    raise UsageError(f"unknown backend {backend!r}", "use --backend local")


__all__ = ["Provider", "LocalProvider", "get_provider"]
