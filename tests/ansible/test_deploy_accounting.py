"""`simcluster deploy` with accounting: true and rest: true, on the rig conftest.py deployed
(last module of the package: it turns both on for the same hosts, the cheapest way to a
second deploy).

The same spec plus accounting, a QoS with a TRES limit, an account and rest -> MariaDB,
slurmdbd and slurmrestd on the controller host, the cluster registered -> status --ssh
shows them, verify --ssh runs basic.accounting (a job sacct reports COMPLETED) and rest.api
(a 2-node job over REST, read back from slurmdbd, no or a bad token refused) and lists
faults.accounting-outage (SKIP: no faults over SSH) -> the database password is nowhere in
deploy's output, the runner's artifacts or the export-logs bundle, nor the JWT key in the bundle.
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
rest: true
"""


@pytest.fixture(scope="module")
def with_accounting(deployed, setup):
    """The rig deployed again, with accounting and REST (the same shape: only they change)."""
    spec = setup["spec"].parent / "cluster-accounting.yaml"
    spec.write_text(SPEC.format(name=setup["name"]) + ACCOUNTING)
    t0 = time.monotonic()
    proc = run_cli(["deploy", "-i", str(setup["inventory"]), "-c", str(spec)], setup["home"], timeout=900)
    print(f"\ndeploy with accounting and rest: {time.monotonic() - t0:.1f}s: {proc.stdout.strip()}")
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


def test_slurmrestd_runs_as_its_own_user_on_the_cluster_address_only(with_accounting, rig):
    ctl = rig.container("ctl")
    key = docker("exec", ctl, "stat", "-c", "%a %U", "/var/lib/slurm/jwt_hs256.key").stdout.split()
    assert key == ["400", "slurm"]
    user = docker("exec", ctl, "sh", "-c", "stat -c %U /proc/$(cat /run/slurm/slurmrestd.pid)").stdout.strip()
    assert user == "slurmrestd"
    addr = docker("exec", ctl, "getent", "ahostsv4", "ctl").stdout.split()[0]
    listening = docker("exec", ctl, "cat", "/proc/net/tcp").stdout
    hex_addr = "".join(f"{int(x):02X}" for x in reversed(addr.split(".")))
    assert f"{hex_addr}:{6820:04X}" in listening and f"00000000:{6820:04X}" not in listening


def test_status_over_ssh_shows_slurmdbd_and_slurmrestd(with_accounting, setup):
    proc = ssh(setup, "status")
    assert proc.returncode == 0, proc.stderr
    assert "accounting healthy: slurmdbd alive on port 6819;  MariaDB alive on port 3306;  cluster registered" \
        in proc.stdout, proc.stdout
    assert "REST API healthy: slurmrestd alive at http://" in proc.stdout and "v0.0.38" in proc.stdout, proc.stdout
    st = json.loads(ssh(setup, "status", "--json").stdout)
    assert st["healthy"] and st["accounting"]["enabled"] and st["accounting"]["registered"], st["accounting"]
    assert st["rest"]["alive"] and st["rest"]["url"].endswith(":6820"), st["rest"]


def test_verify_over_ssh_runs_the_accounting_and_rest_checks(with_accounting, setup):
    # A generous per-check limit: once, on a machine at load 16, basic.accounting failed at the default 60 s.
    proc = ssh(setup, "verify", "--suite", "basic,rest,faults", "--json", "--timeout", "180", timeout=900)
    result = json.loads(proc.stdout)
    by_name = {c["name"]: c for c in result["checks"]}
    assert by_name["basic.accounting"]["status"] == "PASS", by_name["basic.accounting"]["message"]
    assert "COMPLETED on node" in by_name["basic.accounting"]["message"]
    assert by_name["rest.api"]["status"] == "PASS", by_name["rest.api"]["message"]
    assert "and in slurmdbd" in by_name["rest.api"]["message"] and "bad token refused" in by_name["rest.api"]["message"]
    # Faults are not injected over SSH: listed (the cluster has accounting), skipped.
    assert by_name["faults.accounting-outage"]["status"] == "SKIP"


def test_no_password_in_output_artifacts_or_bundle_nor_the_jwt_key(with_accounting, setup, tmp_path):
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
    jwt_key = (setup["home"] / ".deploy" / setup["name"] / "jwt_hs256.key").read_bytes()
    assert len(jwt_key) == 32
    leaked = [str(p) for p in out.rglob("*") if p.is_file() and (secret.encode() in p.read_bytes()
                                                                  or jwt_key in p.read_bytes())]
    assert not leaked, leaked
    assert (out / "logs" / "slurmrestd.log").is_file()
