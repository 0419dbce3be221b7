"""Backends that run a cluster: local processes, or docker containers."""

from __future__ import annotations

from typing import List

from provisioner.errors import ClusterNotFound, UsageError
from provisioner.paths import ClusterLayout
from provisioner.providers.base import Provider
from provisioner.providers.local import LocalProvider
from provisioner.state import ClusterState

BACKENDS = ("local", "docker")


def get_provider(backend: str, **options) -> Provider:
    if backend == "local":
        return LocalProvider()
    if backend == "docker":
        from provisioner.providers.docker import DockerProvider
        return DockerProvider(**options)
    raise UsageError(f"unknown backend {backend!r}", f"use one of: {', '.join(BACKENDS)}")


def provider_for_spec(spec) -> Provider:
    """The provider that brings ``spec`` (a ClusterSpec) up, with the spec's backend options."""
    if spec.backend == "docker":
        return get_provider("docker", image=spec.image, privileged=spec.privileged)
    return get_provider(spec.backend)


def _docker_has(name: str) -> bool:
    import shutil
    if shutil.which("docker") is None:
        return False
    from provisioner.dockercmd import containers, docker
    if docker(["version"], check=False, timeout=20).returncode != 0:
        return False
    return bool(containers(name))


def provider_for(name: str) -> Provider:
    """The backend that runs cluster ``name``: a local state file, else docker labels."""
    if ClusterState.load(ClusterLayout.for_name(name)) is not None:
        return LocalProvider()
    if _docker_has(name):
        return get_provider("docker")
    raise ClusterNotFound(f"no cluster named '{name}'", "see 'simcluster list', or create it with 'simcluster up'")


def all_providers() -> List[Provider]:
    """Local always; docker when an engine answers (so `list` works without docker)."""
    providers: List[Provider] = [LocalProvider()]
    import shutil
    if shutil.which("docker"):
        from provisioner.dockercmd import docker
        if docker(["version"], check=False, timeout=20).returncode == 0:
            providers.append(get_provider("docker"))
    return providers


__all__ = ["Provider", "LocalProvider", "get_provider", "provider_for", "provider_for_spec", "all_providers", "BACKENDS"]
