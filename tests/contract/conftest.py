"""The contract suite: the same assertions on every backend that makes clusters here.

One cluster per backend per test module (module scope): `up --backend B --nodes 2
--fake-gpus 2` with its own name and SIMCLUSTER_HOME, removed at the end of the module
with a check that no process, container or network of it is left. Docker is skipped
only when no engine answers (in CI, where one must answer, that is a failure).

The backends are the spec's (provisioner.config.types.BACKENDS: those `up` creates);
adding one there runs this suite on it, with its bundle extras in test_cluster.py. The
ssh provider's read-only part runs against the Ansible rig (tests/ansible/test_contract_ssh.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import List

import pytest

from provisioner.config.types import BACKENDS as REGISTERED_BACKENDS
from tests.conftest import TEST_HOME_ROOT, Cluster, daemons_under, docker_clusters_under, run_cli

BACKENDS = list(REGISTERED_BACKENDS)
LABEL = "io.simcluster.cluster"
UP_TIMEOUT = {"local": 180, "docker": 900}  # docker: the first `up` may build the node image


def docker_engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=30).returncode == 0


def require_backend(backend: str) -> None:
    if backend == "docker" and not docker_engine_answers():
        if os.environ.get("CI"):
            pytest.fail("CI=true but no docker engine answers: the contract suite must run on docker in CI")
        pytest.skip("docker backend: no docker engine answers (start dockerd, or run 'make setup-docker')")


def leftovers(home: Path, name: str) -> List[str]:
    """Whatever of cluster ``name`` still exists: state dir, processes, containers, networks."""
    found = [f"process {p}" for p in daemons_under(home / name)]
    if (home / name).exists():
        found.append(f"directory {home / name}")
    if shutil.which("docker") is not None:
        for what, argv in (("container", ["docker", "ps", "-aq"]), ("network", ["docker", "network", "ls", "-q"])):
            ids = subprocess.run(argv + ["--filter", f"label={LABEL}={name}"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, timeout=60).stdout.split()
            found += [f"docker {what} {i}" for i in ids]
    return found


def new_home() -> Path:
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    home = TEST_HOME_ROOT / f"c{uuid.uuid4().hex[:7]}"
    home.mkdir()
    return home


def remove_home(home: Path) -> List[str]:
    """Take down every cluster of ``home`` (local by state file, docker by label); what survived."""
    names = {p.name for p in home.iterdir() if (p / "state.json").exists()} if home.exists() else set()
    names |= set(docker_clusters_under(home))
    for name in sorted(names):
        run_cli(["down", "--name", name], home, timeout=300)
    left = [x for name in sorted(names) for x in leftovers(home, name)] + daemons_under(home)
    shutil.rmtree(home, ignore_errors=True)
    return left


@pytest.fixture
def contract_home():
    """A fresh SIMCLUSTER_HOME for one test; everything in it is removed and must be gone."""
    home = new_home()
    yield home
    left = remove_home(home)
    assert not left, f"left behind: {left}"


class ContractCluster(Cluster):
    def __init__(self, home: Path, name: str, up_output, backend: str, up_args: List[str]):
        super().__init__(home, name, up_output)
        self.backend, self.up_args = backend, up_args

    def sim(self, *args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
        """`simcluster ARGS --name NAME` (for exec: `simcluster exec --name NAME -- ...`)."""
        if args and args[0] == "exec":
            return run_cli(["exec", "--name", self.name, *args[1:]], self.home, timeout=timeout, **kw)
        return run_cli([*args, "--name", self.name], self.home, timeout=timeout, **kw)


@pytest.fixture(scope="module", params=BACKENDS)
def cluster(request):
    """A running 2-node, 2-fake-GPU cluster on backend ``request.param``, shared by a module."""
    backend = request.param
    require_backend(backend)
    home = new_home()
    name = f"k{backend[0]}{uuid.uuid4().hex[:5]}"
    up_args = ["up", "--backend", backend, "--nodes", "2", "--fake-gpus", "2", "--name", name]
    try:
        proc = run_cli(up_args, home, check=True, timeout=UP_TIMEOUT.get(backend, 900))
        yield ContractCluster(home, name, proc, backend, up_args)
    finally:
        left = remove_home(home)
    assert not left, f"cluster {name} ({backend}) left behind: {left}"
