"""Docker backend fixtures: a reachable engine (required in CI, else the tests skip)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from tests.conftest import run_cli

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
