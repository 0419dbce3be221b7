"""`simcluster deploy` with accounting: true, on the rig conftest.py deployed (last module of
the package: it turns accounting on for the same hosts, the cheapest way to a second deploy).

The same spec plus accounting, a QoS with a TRES limit and an account -> MariaDB and
slurmdbd on the controller host, the cluster registered -> status --ssh shows them,
verify --ssh runs basic.accounting (a job sacct reports COMPLETED) and lists
faults.accounting-outage (SKIP: no faults over SSH) -> the database password is nowhere in
deploy's output, the runner's artifacts or the export-logs bundle.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.ansible.conftest import SPEC
from tests.ansible.rig import docker
from tests.conftest import run_cli

pytestmark = pytest.mark.integration

ACCOUNTING = """accounting: true
qos:
  - {name: high, priority: 100, limits: {MaxTRESPerUser: gres/gpu=2}}
accounts:
  - {name: ml, qos: [high]}
"""


@pytest.fixture(scope="module")
def with_accounting(deployed, setup):
    """The rig deployed again, with accounting (and the same shape: only accounting changes)."""
    spec = setup["spec"].parent / "cluster-accounting.yaml"
    spec.write_text(SPEC.format(name=setup["name"]) + ACCOUNTING)
    t0 = time.monotonic()
    proc = run_cli(["deploy", "-i", str(setup["inventory"]), "-c", str(spec)], setup["home"], timeout=900)
    print(f"\ndeploy with accounting: {time.monotonic() - t0:.1f}s: {proc.stdout.strip()}")
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    password = (setup["home"] / ".deploy" / setup["name"] / "db.password")
    return proc, password


def ssh(setup, *args, timeout=300):
    return run_cli([*args, "--ssh", setup["target"], *setup["ssh"]], setup["home"], timeout=timeout)


def test_deploy_puts_mariadb_and_slurmdbd_on_the_controller(with_accounting, rig, setup):
    proc, password = with_accounting
    lines = {line.split("  ")[0]: line for line in proc.stderr.splitlines() if line.startswith(" - ")}
    assert "changed: ctl" in lines[" - slurm_accounting : Create the accounting database (first run only)"]
    assert "ok: ctl" in lines[" - slurm_accounting : Wait until slurmctld has registered with slurmdbd"]
    assert oct(password.stat().st_mode & 0o777) == "0o600" and len(password.read_text()) == 32
    conf = docker("exec", rig.container("ctl"), "stat", "-c", "%a %U", "/etc/slurm/slurmdbd.conf").stdout.split()
    assert conf == ["600", "slurm"]
    # The spec's QoS, with its TRES limit set once slurmctld registered, and its account.
    qos = docker("exec", rig.container("ctl"), "sacctmgr", "-n", "-P", "show", "qos", "high",
                 "format=Name,Priority,MaxTRESPU").stdout.split()
    assert qos == ["high|100|gres/gpu=2"], qos
    assoc = docker("exec", rig.container("ctl"), "sacctmgr", "-n", "-P", "show", "assoc", "account=ml",
                   "format=Cluster,Account,User").stdout.split()
    assert f"{setup['name']}|ml|root" in assoc, assoc
    # MariaDB is private to slurmdbd: loopback only.
    listening = docker("exec", rig.container("ctl"), "cat", "/proc/net/tcp").stdout
    assert f"0100007F:{3306:04X}" in listening and f"00000000:{3306:04X}" not in listening


def test_status_over_ssh_shows_slurmdbd(with_accounting, setup):
    proc = ssh(setup, "status")
    assert proc.returncode == 0, proc.stderr
    assert "accounting healthy: slurmdbd alive on port 6819;  MariaDB alive on port 3306;  cluster registered" \
        in proc.stdout, proc.stdout
    st = json.loads(ssh(setup, "status", "--json").stdout)
    assert st["healthy"] and st["accounting"]["enabled"] and st["accounting"]["registered"], st["accounting"]


def test_verify_over_ssh_runs_the_accounting_checks(with_accounting, setup):
    proc = ssh(setup, "verify", "--suite", "basic,faults", "--json", timeout=600)
    result = json.loads(proc.stdout)
    by_name = {c["name"]: c for c in result["checks"]}
    assert by_name["basic.accounting"]["status"] == "PASS", by_name["basic.accounting"]
    assert "COMPLETED on node" in by_name["basic.accounting"]["message"]
    # Faults are not injected over SSH: listed (the cluster has accounting), skipped.
    assert by_name["faults.accounting-outage"]["status"] == "SKIP"


def test_the_password_is_in_no_output_artifact_or_bundle(with_accounting, setup, tmp_path):
    proc, password = with_accounting
    secret = password.read_text()
    assert secret not in proc.stdout + proc.stderr
    artifacts = setup["home"] / ".deploy" / setup["name"] / "runner"
    leaked = [str(p) for p in artifacts.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert not leaked, leaked
    out = tmp_path / "bundle"
    assert ssh(setup, "export-logs", str(out)).returncode == 0
    assert "StoragePass=<redacted>" in (out / "config" / "slurmdbd.conf").read_text()
    for name in ("logs/slurmdbd.log", "logs/mariadbd.log", "logs/sacctmgr-setup.log", "sacct.txt"):
        assert (out / name).is_file(), name
    assert "simcluster-acct-check" in (out / "sacct.txt").read_text() or "COMPLETED" in (out / "sacct.txt").read_text()
    leaked = [str(p) for p in out.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert not leaked, leaked
