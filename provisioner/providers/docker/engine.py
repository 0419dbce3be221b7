"""The Docker engine, reached only through the Docker SDK for Python (docker.from_env()).

One client per process; engine errors become one-line SimclusterErrors. Every container
and network simcluster makes carries LABEL_CLUSTER=<cluster name>, so a cluster's machines
are found by label (containers_of), never by parsing names.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import docker
from docker.constants import MINIMUM_DOCKER_API_VERSION
from docker.errors import APIError, DockerException, NotFound

from provisioner.errors import PrerequisiteError, SimclusterError

LABEL_CLUSTER = "io.simcluster.cluster"
LABEL_ROLE = "io.simcluster.role"  # controller | node
LABEL_NODE = "io.simcluster.node"
LABEL_GPUS = "io.simcluster.gpus"
LABEL_FAKE = "io.simcluster.fake-gpus"
LABEL_STATE = "io.simcluster.state-dir"
LABEL_SPEC = "io.simcluster.spec"  # digest of the spec's identity
LABEL_SPEC_JSON = "io.simcluster.spec-json"  # the whole spec, on the controller

NO_ENGINE_HINT = "start it: sudo dockerd >/var/log/dockerd.log 2>&1 &  (or systemctl start docker; make setup-docker)"
NO_ENGINE_DOC = "docs/troubleshooting.md#no-docker-engine-answers"
# Exec and build requests last as long as their command: the commands bound themselves
# (runner.py wraps each in coreutils' timeout), so the HTTP timeout is only a backstop.
REQUEST_TIMEOUT = 3600


class DockerError(SimclusterError):
    """The engine refused or failed a request."""


def explain(exc: Exception, what: str) -> SimclusterError:
    """An SDK exception as a one-line error saying what simcluster was doing."""
    if isinstance(exc, APIError):
        detail = exc.explanation or str(exc)
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        return DockerError(f"{what} failed: {str(detail).strip().splitlines()[-1] if detail else exc}")
    if isinstance(exc, DockerException):
        return PrerequisiteError(f"no docker engine is running ({what}: {str(exc).splitlines()[0][:200]})",
                                 NO_ENGINE_HINT, doc=NO_ENGINE_DOC)
    return DockerError(f"{what} failed: {exc}")


@functools.lru_cache(maxsize=None)
def client() -> docker.DockerClient:
    """The process's SDK client (DOCKER_HOST and friends apply, as for the docker CLI).
    It speaks the API version the engine said in engine_version() where that was asked
    (the SDK would otherwise ask the engine again: one round trip per command less)."""
    try:
        return docker.from_env(timeout=REQUEST_TIMEOUT, version=_engine().get("ApiVersion") or "auto")
    except DockerException as exc:
        check_socket_access()
        raise PrerequisiteError("no docker engine is running (the Docker SDK could not connect)",
                                NO_ENGINE_HINT, doc=NO_ENGINE_DOC) from exc


@functools.lru_cache(maxsize=None)
def _engine() -> Dict[str, str]:
    """The engine's GET /version answer ({} when none answers), asked once per process, 5 s
    at most: one request, unversioned (a client made with the oldest API version the SDK
    speaks asks nothing before it)."""
    try:
        probe = docker.from_env(timeout=5, version=MINIMUM_DOCKER_API_VERSION)
        try:
            return probe.api.version(api_version=False) or {}
        finally:
            probe.close()
    except (DockerException, OSError, ValueError):
        return {}


def engine_version() -> Optional[str]:
    """The engine's version, or None when none answers (asked once per process, 5 s at most)."""
    info = _engine()
    return info.get("Version", "?") if info else None


def check_socket_access() -> None:
    """Raise a PrerequisiteError when the engine's unix socket exists but this user may not
    use it (not root, not in the docker group): the SDK only says the connection failed."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        return
    sock = host[len("unix://"):]
    if os.path.exists(sock) and not os.access(sock, os.R_OK | os.W_OK):
        raise PrerequisiteError(f"permission denied on the docker engine's socket {sock}",
                                "run as root, or join the docker group: sudo usermod -aG docker $USER, then log in "
                                "again", doc="docs/troubleshooting.md#docker-permission-denied")


def require_engine() -> None:
    """Sanity check (as molecule's drivers do): does a docker engine answer?"""
    if engine_version() is None:
        check_socket_access()
        raise PrerequisiteError("no docker engine is running (the Docker SDK got no answer)", NO_ENGINE_HINT,
                                doc=NO_ENGINE_DOC)


def has_nvidia_runtime() -> bool:
    """Can a container get GPUs? Either the engine lists an nvidia runtime, or the NVIDIA
    container toolkit's hook (what a GPU device request calls) is installed on this host."""
    if shutil.which("nvidia-container-runtime-hook") or shutil.which("nvidia-container-toolkit"):
        return True
    try:
        return "nvidia" in (client().info().get("Runtimes") or {})
    except DockerException:
        return False


def host_facts() -> Dict[str, Optional[str]]:
    """What the engine says of the machine its containers run on: {"cgroup_version": "1" or
    "2" (None: an engine too old to say), "cpus": its CPU count as text (None: not said),
    "security": the security modules it confines containers with ("apparmor,seccomp"),
    "engine": the engine's own ID, kernel and security options (what a probe's answer
    depends on: probe_cached)}."""
    try:
        info = client().info()
    except DockerException as exc:
        raise explain(exc, "asking the engine about its host") from None
    version, cpus = info.get("CgroupVersion"), info.get("NCPU")
    # "name=apparmor", "name=seccomp,profile=default" ...: the security modules it applies.
    security = [o.split(",")[0].partition("=")[2] for o in info.get("SecurityOptions") or []]
    return {"cgroup_version": str(version) if version else None, "cpus": str(cpus) if cpus else None,
            "security": ",".join(security),
            "engine": "|".join(str(x) for x in (info.get("ID"), info.get("KernelVersion"), info.get("ServerVersion"),
                                                *(info.get("SecurityOptions") or [])))}


def label_filter(cluster: Optional[str] = None) -> Dict[str, str]:
    return {"label": f"{LABEL_CLUSTER}={cluster}" if cluster else LABEL_CLUSTER}


def containers_of(cluster: Optional[str] = None) -> List["docker.models.containers.Container"]:
    """Containers labelled as simcluster's (of one cluster, or of all), in any state."""
    try:
        return client().containers.list(all=True, filters=label_filter(cluster))
    except DockerException as exc:
        raise explain(exc, "listing containers") from None


def networks_of(cluster: Optional[str] = None) -> List["docker.models.networks.Network"]:
    try:
        return client().networks.list(filters=label_filter(cluster))
    except DockerException as exc:
        raise explain(exc, "listing networks") from None


def is_running(container_name: str) -> bool:
    """Does container ``container_name`` exist and run?"""
    try:
        return client().api.inspect_container(container_name)["State"]["Running"]
    except NotFound:
        return False
    except DockerException as exc:
        raise explain(exc, f"inspecting container {container_name}") from None


def probe_cache() -> Path:
    """Where the answers of probes that passed are kept (one JSON object, key -> true)."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "simcluster" / "docker-probes.json"


def probe_cached(key: str, probe: Callable[[], Tuple[bool, str]]) -> Tuple[bool, str]:
    """``probe()``'s (ok, error output), asked once per ``key``: a probe that passed is not
    asked again (each is a docker exec on `up`'s critical path). ``key`` must name all that
    the answer depends on (the engine, its kernel and security options, the image, the
    container's privileges); a failed probe is always asked again, so a fixed engine is seen."""
    path = probe_cache()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and known.get(key) is True:
        return True, ""
    ok, err = probe()
    if ok:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fresh = {**(known if isinstance(known, dict) else {}), key: True}
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(fresh, sort_keys=True) + "\n")
            os.replace(tmp, path)  # whole or not at all, whoever else writes it
        except OSError:
            pass  # not remembered: asked again next time
    return ok, err

