"""Run the docker CLI: one place for timeouts, error messages and the 'is docker there?' check."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Callable, List, Optional, Sequence

from provisioner.errors import PrerequisiteError, SimclusterError

LABEL_CLUSTER = "io.simcluster.cluster"
LABEL_ROLE = "io.simcluster.role"
LABEL_NODE = "io.simcluster.node"
LABEL_GPUS = "io.simcluster.gpus"
LABEL_FAKE = "io.simcluster.fake-gpus"
LABEL_STATE = "io.simcluster.state-dir"
LABEL_SPEC = "io.simcluster.spec"
LABEL_SPEC_JSON = "io.simcluster.spec-json"  # the whole spec, on the controller (verify reads it)


class DockerError(SimclusterError):
    """A docker command failed."""


def docker(args: Sequence[str], check: bool = True, timeout: float = 120,
           input: Optional[str] = None) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(["docker", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, input=input)
    except FileNotFoundError:
        raise PrerequisiteError("docker is not installed",
                                "install it (sudo apt-get install docker.io) and start dockerd") from None
    except subprocess.TimeoutExpired:
        raise DockerError(f"'docker {' '.join(args[:3])} ...' did not finish within {timeout:.0f}s") from None
    if check and proc.returncode != 0:
        err = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise DockerError(f"'docker {' '.join(args[:2])}' failed: {err[-1] if err else 'exit ' + str(proc.returncode)}")
    return proc


def docker_stream(args: Sequence[str], on_line: Callable[[str], None], timeout: float = 3600) -> int:
    """Run docker, passing each output line to ``on_line``; return the exit code."""
    proc = subprocess.Popen(["docker", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        on_line(line.rstrip("\n"))
    return proc.wait(timeout=timeout)


def require_engine() -> None:
    """Sanity check (as molecule's drivers do): is a docker engine reachable?"""
    if shutil.which("docker") is None:
        raise PrerequisiteError("docker is not installed",
                                "install it (sudo apt-get install docker.io) and start dockerd")
    proc = docker(["version", "--format", "{{.Server.Version}}"], check=False, timeout=20)
    if proc.returncode != 0:
        raise PrerequisiteError("no docker engine is running (docker version could not reach the daemon)",
                                "start it: sudo dockerd >/var/log/dockerd.log 2>&1 &  (or systemctl start docker)")


def image_exists(tag: str) -> bool:
    return docker(["image", "inspect", tag], check=False, timeout=20).returncode == 0


def containers(cluster: Optional[str] = None, all_states: bool = True) -> List[dict]:
    """Containers labelled as simcluster's (optionally of one cluster), with their labels."""
    label = f"{LABEL_CLUSTER}={cluster}" if cluster else LABEL_CLUSTER
    args = ["ps", "--filter", f"label={label}", "--format", "{{.ID}}"]
    if all_states:
        args.insert(1, "-a")
    ids = docker(args).stdout.split()
    if not ids:
        return []
    return json.loads(docker(["inspect", *ids]).stdout)


def labelled_spec(container: dict) -> dict:
    """The cluster spec (as a dict) a controller container carries in its labels; {} otherwise."""
    try:
        return json.loads(container["Config"]["Labels"].get(LABEL_SPEC_JSON, "{}"))
    except ValueError:
        return {}


def has_nvidia_runtime() -> bool:
    """Can `docker run --gpus` work here? Either the engine lists an nvidia runtime, or the
    NVIDIA container toolkit's hook (what `--gpus` calls) is installed on this host."""
    if shutil.which("nvidia-container-runtime-hook") or shutil.which("nvidia-container-toolkit"):
        return True
    proc = docker(["info", "--format", "{{json .Runtimes}}"], check=False, timeout=20)
    return proc.returncode == 0 and "nvidia" in proc.stdout
