"""Docker backend fixtures: a reachable engine (required in CI, else the tests skip)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from typing import Iterator

import pytest

from tests.conftest import TEST_HOME_ROOT, run_cli

LABEL = "io.simcluster.cluster"


def engine_available() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=30).returncode == 0


@pytest.fixture(scope="session", autouse=True)
def docker_engine():
    if not engine_available():
        if os.environ.get("CI"):
            pytest.fail("CI=true but no docker engine answers: .ci/run should have started dockerd")
        pytest.skip("no docker engine (start dockerd, or run 'make setup-docker')")


def docker_ids(*filters: str) -> list:
    args = ["docker", "ps", "-aq"] + [a for f in filters for a in ("--filter", f)]
    return subprocess.run(args, stdout=subprocess.PIPE, text=True, check=True).stdout.split()


def networks(name: str) -> list:
    return subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label={LABEL}={name}"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.split()


def daemon_counts(container: str) -> dict:
    """{program: how many run} of the cluster's daemons in ``container`` (a daemon started
    twice, by the container's boot and by a step, shows as 2)."""
    out = subprocess.run(["docker", "exec", container, "ps", "-eo", "comm"], stdout=subprocess.PIPE, text=True,
                         check=True).stdout.split()
    return {d: out.count(d) for d in ("munged", "slurmctld", "slurmd") if d in out}


@pytest.fixture
def docker_cluster(sim_home):
    """Factory for docker clusters that are always removed."""
    made = []

    def _make(*args: str) -> str:
        name = f"d{uuid.uuid4().hex[:6]}"
        made.append(name)
        run_cli(["up", "--backend", "docker", "--name", name, *args], sim_home, check=True, timeout=900)
        return name

    yield _make
    for name in made:
        run_cli(["down", "--name", name], sim_home)
        assert docker_ids(f"label={LABEL}={name}") == [], f"containers of {name} left behind"
        assert networks(name) == [], f"network of {name} left behind"


class DockerCluster:
    """A docker cluster of a test module: its simcluster commands and its Slurm clients."""

    def __init__(self, home, name):
        self.home, self.name = home, name

    def cli(self, *args, check=True, timeout=300):
        return run_cli([*args, "--name", self.name], self.home, check=check, timeout=timeout)

    def slurm(self, *argv, check=True):
        return run_cli(["exec", "--name", self.name, "--", *argv], self.home, check=check)

    def status(self) -> dict:
        return json.loads(self.cli("status", "--json", check=False).stdout)

    def job(self, job: str, key: str) -> str:
        out = self.slurm("scontrol", "show", "job", "-o", job, check=False).stdout
        return next((f.split("=", 1)[1] for f in out.split() if f.startswith(key + "=")), "")

    def sinfo(self) -> dict:
        out = self.slurm("sinfo", "-h", "-N", "-o", "%N %t").stdout
        return dict(line.split() for line in out.splitlines())

    def containers(self) -> list:
        return sorted(docker_ids(f"label={LABEL}={self.name}", "label=io.simcluster.node"))


@contextlib.contextmanager
def docker_module_cluster(*up_args: str) -> Iterator[DockerCluster]:
    """A docker cluster for a test module, in a home of its own: down whatever happens, and
    no container or network of it left afterwards."""
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    home = TEST_HOME_ROOT / uuid.uuid4().hex[:8]
    home.mkdir()
    name = f"d{uuid.uuid4().hex[:6]}"
    try:
        run_cli(["up", "--name", name, *up_args], home, check=True, timeout=900)
        yield DockerCluster(home, name)
    finally:
        run_cli(["down", "--name", name], home)
        shutil.rmtree(home, ignore_errors=True)
    assert docker_ids(f"label={LABEL}={name}") == [], "containers left behind"
    assert networks(name) == [], "network left behind"
