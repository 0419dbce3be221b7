"""Docker backend (being rebuilt on the Docker SDK): placeholder that reports itself unavailable."""

from provisioner.providers.base import Provider


class DockerProvider(Provider):
    name = "docker"

    def available(self) -> bool:
        return False
