"""Docker backend, on the Docker SDK for Python: containers as a cluster's machines.

engine.py talks to the engine (client, labels, typed errors), runner.py runs commands in a
container (DockerExecRunner), image.py builds the node image, provider.py provisions,
places and removes clusters (DockerProvider).
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
