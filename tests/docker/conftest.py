"""Docker backend fixtures: a reachable engine (required in CI, else the tests skip)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


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
