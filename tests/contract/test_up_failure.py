"""`up` that fails during its steps deletes what it made, on every backend; --retain keeps it.

slurmctld exits at start-up on an unknown slurm.conf key, after the machines, configs,
munge and (docker) containers exist: the point where a half-made cluster could be left.
"""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import run_cli
from tests.contract.conftest import BACKENDS, leftovers, require_backend

pytestmark = pytest.mark.integration


def broken_spec(home, backend: str, name: str):
    path = home / f"{name}.yaml"
    path.write_text(f"apiVersion: simcluster/v1\nkind: Cluster\nname: {name}\nbackend: {backend}\nnodes: 2\n"
                    "slurmConf: ['NoSuchSlurmOption=1']\n")
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_failed_up_leaves_nothing_behind(backend, contract_home):
    require_backend(backend)
    name = f"f{backend[0]}{uuid.uuid4().hex[:5]}"
    proc = run_cli(["up", "--config", str(broken_spec(contract_home, backend, name)), "--wait", "20"],
                   contract_home, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: slurmctld exited during startup"), proc.stderr
    assert "NoSuchSlurmOption" in proc.stderr  # the log tail says why
    assert "Traceback" not in proc.stderr
    assert leftovers(contract_home, name) == []
    assert "no cluster named" in run_cli(["status", "--name", name], contract_home).stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_failed_up_with_retain_keeps_the_cluster_for_debugging(backend, contract_home, tmp_path):
    require_backend(backend)
    name = f"r{backend[0]}{uuid.uuid4().hex[:5]}"
    proc = run_cli(["up", "--config", str(broken_spec(contract_home, backend, name)), "--wait", "20", "--retain"],
                   contract_home, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "keeping the failed cluster for inspection (--retain)" in proc.stderr
    assert leftovers(contract_home, name), "--retain kept nothing"
    # What was kept is a cluster the commands know: its logs say why slurmctld died.
    bundle = tmp_path / "bundle"
    run_cli(["export-logs", str(bundle), "--name", name], contract_home, check=True, timeout=300)
    logs = "".join(p.read_text(errors="replace") for p in (bundle / "logs").glob("slurmctld.*"))
    assert "NoSuchSlurmOption" in logs
    run_cli(["down", "--name", name], contract_home, check=True, timeout=300)
    assert leftovers(contract_home, name) == []
