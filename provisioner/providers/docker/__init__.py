"""Docker backend, on the Docker SDK for Python: containers as a cluster's machines.

engine.py talks to the engine (client, labels, typed errors), exec_runner.py runs commands in
a container (DockerExecRunner), image.py builds the node image, images.py unpacks the host
engine's images for container jobs, node_containers.py is what a container is made of (names,
mounts, paths inside, the SDK's run() arguments), boot.py the script with which a container
starts its daemons, node_features.py what the nodes can do with their image and engine
(which image, cgroup limits, container jobs), and provider.py provisions, places and removes
clusters (DockerProvider).
"""

import os
import sys

# The Docker SDK imports paramiko (when installed: the deploy extra) for ssh:// engines only,
# at its own import: ~35-45 ms of every docker command's start. Where DOCKER_HOST names no
# ssh:// engine, the SDK is imported with paramiko hidden (it supports paramiko's absence);
# paramiko stays importable afterwards for the SSH backend.
if not os.environ.get("DOCKER_HOST", "").startswith("ssh://") and "paramiko" not in sys.modules:
    sys.modules["paramiko"] = None  # type: ignore[assignment]
    try:
        import docker  # noqa: F401
    finally:
        del sys.modules["paramiko"]

from provisioner.providers.docker.provider import DockerProvider  # noqa: E402

__all__ = ["DockerProvider"]
