"""Docker backend, on the Docker SDK for Python: containers as a cluster's machines.

engine.py talks to the engine (client, labels, typed errors), runner.py runs commands in a
container (DockerExecRunner), image.py builds the node image, provider.py provisions,
places and removes clusters (DockerProvider).
"""

from provisioner.providers.docker.provider import DockerProvider

__all__ = ["DockerProvider"]
