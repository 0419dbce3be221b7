"""Deploy tests: Ansible must be importable (the `deploy` extra, installed by `make setup`);
the real-host tests also need a docker engine (required in CI, else they skip)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def deploy_extra_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("ansible", "ansible_runner", "paramiko"))


@pytest.fixture(scope="session", autouse=True)
def deploy_extra():
    if not deploy_extra_installed():
        if os.environ.get("CI"):
            pytest.fail("CI=true but the deploy extra is missing: make setup installs '.[deploy]'")
        pytest.skip("the deploy extra is not installed (pip install -e '.[deploy]')")
