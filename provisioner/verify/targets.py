"""Where verify's jobs run: a local cluster (this host) or a docker cluster (its containers).

A target answers the few questions the checks need that differ by backend: how to run
a Slurm command, where job files go on this host and what path the cluster sees for
them, which python the jobs use, whether that python has a training stack, and which
GPU ids a node's jobs should see. Everything else (the checks, the jobs, the report) is
the same for both.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Dict, List, Optional

from provisioner.config.types import ClusterSpec
from provisioner.errors import ClusterNotFound, UsageError
from provisioner.state import ClusterState
from provisioner.verify.context import python_bin_dir
from provisioner.verify.jobs import DockerSlurmClient, SlurmClient

# Importable by the jobs' python, else the training suite is SKIP (probe run once per module).
_PROBE = ("import importlib.util, json, sys\n"
          "def ok(m):\n"
          "    try:\n"
          "        return importlib.util.find_spec(m) is not None\n"
          "    except (ImportError, ValueError):\n"
          "        return False\n"
          "print(json.dumps({m: ok(m) for m in sys.argv[1:]}))\n")


class VerifyTarget:
    """What the checks need to know about the cluster they run on."""

    backend = "?"
    spec: ClusterSpec
    client: SlurmClient
    state: Optional[ClusterState] = None  # local clusters only (accounting check, log paths)
    install_hint = ""

    def __init__(self) -> None:
        self._modules: Dict[str, bool] = {}

    # Job files: written on this host under runs_root, seen by the cluster at cluster_path().
    runs_root: Path

    def cluster_path(self, host_path: Path) -> str:
        return str(host_path)

    @property
    def python_bin(self) -> str:
        """The bin directory holding the python and torchrun the training jobs run."""
        raise NotImplementedError

    def missing_module(self, modules: List[str]) -> Optional[str]:
        """The first of ``modules`` the jobs' python cannot import (None: all there)."""
        unknown = [m for m in modules if m not in self._modules]
        if unknown:
            self._modules.update(self._probe(unknown))
        return next((m for m in modules if not self._modules.get(m)), None)

    def _probe(self, modules: List[str]) -> Dict[str, bool]:
        raise NotImplementedError

    def visible_gpus(self, node: str, count: Optional[int] = None) -> str:
        """CUDA_VISIBLE_DEVICES a job step on ``node`` must see with ``count`` (default all) GPUs."""
        raise NotImplementedError

    def log_hint(self, daemon: str) -> str:
        raise NotImplementedError


class LocalTarget(VerifyTarget):
    """Daemons on this host: client commands run here with the cluster's SLURM_CONF."""

    backend = "local"
    install_hint = "pip install -e '.[train]' (or make setup)"

    def __init__(self, state: ClusterState):
        super().__init__()
        self.state = state
        self.spec = state.cluster_spec
        self.client = SlurmClient(state.layout.slurm_conf)
        self.runs_root = Path(state.root)

    @property
    def python_bin(self) -> str:
        # Jobs run on this same host: the python running verify (its venv) has the stack.
        return str(python_bin_dir())

    def _probe(self, modules: List[str]) -> Dict[str, bool]:
        # The jobs' python is the one running verify: ask importlib here, no subprocess.
        found = {}
        for mod in modules:
            try:
                found[mod] = importlib.util.find_spec(mod) is not None
            except (ImportError, ValueError):
                found[mod] = False
        return found

    def visible_gpus(self, node: str, count: Optional[int] = None) -> str:
        return physical_gpu_ids(self.spec, node, count)

    def log_hint(self, daemon: str) -> str:
        return f"see {self.state.layout.daemon_log(daemon) if daemon != 'slurmd' else self.state.layout.log}"


class DockerTarget(VerifyTarget):
    """A docker cluster: client commands run in the controller container; job files live in
    the cluster's shared directory, mounted at /shared in every container."""

    backend = "docker"

    def __init__(self, name: str):
        from provisioner.providers.docker import SHARED_MOUNT, cluster_record, container_name
        super().__init__()
        record = cluster_record(name)
        self.name = name
        self.spec = record.spec
        self.image = record.image
        self.container = container_name(name)
        self.client = DockerSlurmClient(self.container)
        self.runs_root = record.shared_dir
        self.shared_mount = SHARED_MOUNT
        self.install_hint = (f"the cluster runs image {self.image}, which has no training stack: "
                             f"'simcluster image build --train', then 'simcluster down --name {name}' and up again")

    def cluster_path(self, host_path: Path) -> str:
        try:
            rel = Path(host_path).relative_to(self.runs_root)
        except ValueError:
            raise UsageError(f"{host_path} is not in the cluster's shared directory {self.runs_root}") from None
        return f"{self.shared_mount}/{rel.as_posix()}" if str(rel) != "." else self.shared_mount

    @property
    def python_bin(self) -> str:
        from provisioner.image import IMAGE_VENV
        return f"{IMAGE_VENV}/bin"

    def _probe(self, modules: List[str]) -> Dict[str, bool]:
        proc = self.client.run([f"{self.python_bin}/python", "-c", _PROBE, *modules], timeout=120)
        return _parse_probe(proc.stdout, modules)

    def visible_gpus(self, node: str, count: Optional[int] = None) -> str:
        return container_gpu_ids(self.spec, node, count)

    def log_hint(self, daemon: str) -> str:
        return f"see 'simcluster export-logs DIR --name {self.name}' (docker logs of every container)"


def physical_gpu_ids(spec: ClusterSpec, node: str, count: Optional[int] = None) -> str:
    """Local backend: nodes share the host's GPUs, so each must see its own *physical* ids
    (the TaskProlog's job; Slurm alone gives the node-local index, 0 on every node)."""
    gpus = spec.node(node).gpus
    return ",".join(str(g) for g in gpus[:len(gpus) if count is None else count])


def container_gpu_ids(spec: ClusterSpec, node: str, count: Optional[int] = None) -> str:
    """Docker backend: each container holds only its own GPUs (device requests, or fake
    device files), so inside it they are numbered from 0, as on a machine of its own."""
    n = len(spec.node(node).gpus)
    return ",".join(str(i) for i in range(n if count is None else min(count, n)))


def _parse_probe(stdout: str, modules: List[str]) -> Dict[str, bool]:
    try:
        found = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {m: False for m in modules}
    return {m: bool(found.get(m)) for m in modules}


def target_for(name: str) -> VerifyTarget:
    """The verify target for cluster ``name``, whichever backend made it."""
    from provisioner.providers import provider_for
    from provisioner.providers.local import load_state
    provider = provider_for(name)
    if provider.name == "docker":
        return DockerTarget(name)
    if provider.name == "local":
        return LocalTarget(load_state(name))
    raise ClusterNotFound(f"verify cannot run on a {provider.name} cluster")
