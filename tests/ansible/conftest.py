"""Deploy tests: Ansible must be importable (the `deploy` extra, installed by `make setup-deploy`);
the real-host tests also need a docker engine (required in CI, else they skip).

The rig (three sshd containers), its setup and the first deploy are fixtures of this
package, made once for test_deploy.py and test_contract_ssh.py together (a deploy takes
minutes) and removed at the end, also when a test fails."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.ansible.rig import Rig, build_image
from tests.conftest import run_cli


def deploy_extra_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("ansible", "ansible_runner", "paramiko"))


@pytest.fixture(scope="session", autouse=True)
def deploy_extra():
    if not deploy_extra_installed():
        if os.environ.get("CI"):
            pytest.fail("CI=true but the deploy extra is missing: make setup-deploy installs '.[deploy]'")
        pytest.skip("the deploy extra is not installed (make setup-deploy, or pip install -e '.[deploy]')")


SPEC = """apiVersion: simcluster/v1
kind: Cluster
name: {name}
fakeGpus: true
nodes:
  - {{name: node1, gpus: [0], cpus: 4, memory: 4G}}
  - {{name: node2, gpus: [1], cpus: 4, memory: 4G}}
partitions:
  - {{name: gpu, nodes: ALL, default: true}}
slurmConf:
  - "MaxJobCount=5000"
"""


def engine_available() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode == 0


@pytest.fixture(scope="package")
def rig():
    if not engine_available():
        if os.environ.get("CI"):
            pytest.fail("CI=true but no docker engine answers: make test starts dockerd")
        pytest.skip("no docker engine (start dockerd, or run 'make setup-docker')")
    build_image()
    run_id = uuid.uuid4().hex[:6]
    made = Rig(run_id, Path(tempfile.gettempdir()) / f"sc-deploytest-{run_id}")
    try:
        made.start(["ctl", "node1", "node2"])
        yield made
    finally:
        made.remove()
        assert made.leftovers() == [], "containers or network of the deploy test left behind"
        assert not made.workdir.exists()


@pytest.fixture(scope="package")
def setup(rig):
    """Inventory, spec and SIMCLUSTER_HOME of the rig (all inside its work dir)."""
    name = f"dt{rig.run_id}"
    spec = rig.workdir / "cluster.yaml"
    spec.write_text(SPEC.format(name=name))
    return {"name": name, "inventory": rig.inventory("ctl", ["node1", "node2"], cluster=name), "spec": spec,
            "home": rig.workdir / "home", "target": f"root@127.0.0.1:{rig.hosts['ctl']}",
            "ssh": ["--ssh-key", str(rig.key), "--known-hosts", str(rig.known_hosts)]}


def deploy(setup, *extra, timeout=1500):
    t0 = time.monotonic()
    proc = run_cli(["deploy", "-i", str(setup["inventory"]), "-c", str(setup["spec"]), *extra], setup["home"],
                   timeout=timeout)
    return proc, time.monotonic() - t0


@pytest.fixture(scope="package")
def deployed(setup):
    proc, seconds = deploy(setup, "--training")
    print(f"\nfirst deploy: {seconds:.1f}s: {proc.stdout.strip()}")
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc
