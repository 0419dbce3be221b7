"""The local backend: every daemon is a process on this host, one slurmd per virtual node."""

from provisioner.providers.local.provider import LocalProvider

__all__ = ["LocalProvider"]
