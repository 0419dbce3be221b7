"""`simcluster deploy` on real hosts made here: three bare Debian containers running sshd.

deploy (with a spec: fake GPUs, a partition, an extra slurm.conf line; and --training;
the rig and the deploy are conftest.py's, shared with test_contract_ssh.py, which runs
verify --ssh basic,ddp and the other read-only contract tests) -> a second deploy
changes nothing -> status --ssh is healthy -> bad inputs give one clear line ->
everything is removed (fixture finalizer, even when a test fails).
"""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from tests.ansible.conftest import deploy
from tests.conftest import run_cli

pytestmark = pytest.mark.integration


def verify(setup, *args):
    return run_cli(["verify", "--ssh", setup["target"], *setup["ssh"], *args], setup["home"], timeout=900)


def test_deploy_turns_bare_hosts_into_an_idle_cluster(deployed, setup):
    assert f"cluster '{setup['name']}' deployed on 3 hosts" in deployed.stdout
    assert "changed" in deployed.stdout and "nothing changed" not in deployed.stdout
    # progress per task and host
    assert "munge : Install munge  changed: " in deployed.stderr
    assert "slurm_common : Render slurm.conf, gres.conf and cgroup.conf  changed:" in deployed.stderr
    key = setup["home"] / ".deploy" / setup["name"] / "munge.key"
    assert key.stat().st_size == 1024 and oct(key.stat().st_mode & 0o777) == "0o600"


def test_verify_over_ssh_refuses_a_bad_suite_before_connecting(setup):
    one_line_error(verify(setup, "--suite", "nope"), 2, "unknown suite nope")


def test_second_deploy_changes_nothing(deployed, setup):
    proc, seconds = deploy(setup, "--training")
    print(f"\nsecond deploy: {seconds:.1f}s: {proc.stdout.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("nothing changed"), proc.stdout
    assert "changed:" not in proc.stderr


def test_status_over_ssh_is_healthy(deployed, setup):
    proc = run_cli(["status", "--ssh", setup["target"], *setup["ssh"]], setup["home"])
    assert proc.returncode == 0, proc.stderr
    assert f"cluster {setup['name']} (ssh, Slurm 22.05." in proc.stdout and "): healthy" in proc.stdout
    st = json.loads(run_cli(["status", "--ssh", setup["target"], *setup["ssh"], "--json"], setup["home"],
                            check=True).stdout)
    assert st["healthy"] and st["controller"]["responding"] and st["munged"]["alive"]
    assert [(n["name"], n["state"], n["gpus"], n["cpus"], n["memory_mb"]) for n in st["nodes"]] == [
        ("node1", "idle", [0], 4, 4096), ("node2", "idle", [1], 4, 4096)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line_error(proc, code: int, *needles: str) -> None:
    """Exit ``code`` and exactly one 'error:' line (after any progress lines) saying ``needles``."""
    assert proc.returncode == code, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_unreachable_host_is_named_before_anything_runs(rig, setup):
    closed = free_port()
    inv = rig.inventory("ctl", ["node1", "node2"], cluster=setup["name"], path=rig.workdir / "unreachable.ini")
    text = inv.read_text()
    node2 = next(line for line in text.splitlines() if line.startswith("node2 "))
    inv.write_text(text.replace(node2, f"{node2}\nnode3 ansible_host=127.0.0.1 ansible_port={closed}"))
    proc = run_cli(["deploy", "-i", str(inv)], setup["home"])
    one_line_error(proc, 1, f"cannot reach host node3 (127.0.0.1:{closed}): connection refused")


def test_auth_failures_are_one_line(rig, setup, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    proc = run_cli(["status", "--ssh", setup["target"], "--ssh-key", str(other), "--known-hosts",
                    str(rig.known_hosts)], setup["home"])
    one_line_error(proc, 1, "authentication failed for root@127.0.0.1", f"tried key {other}")
    proc = run_cli(["verify", "--ssh", setup["target"], "--ssh-key", str(other), "--known-hosts",
                    str(rig.known_hosts), "--suite", "basic", "--json"], setup["home"])
    one_line_error(proc, 1, "authentication failed for root@127.0.0.1")
    # Ansible's side: the same wrong key in the inventory. Hosts named "localhost" here, so
    # that OpenSSH does not reuse the earlier deploys' authenticated master connections.
    known = tmp_path / "known_hosts"
    known.write_text(rig.known_hosts.read_text() + rig.known_hosts.read_text().replace("[127.0.0.1]", "[localhost]"))
    inv = rig.inventory("ctl", ["node1", "node2"], cluster=setup["name"], path=tmp_path / "wrongkey.ini")
    inv.write_text(inv.read_text().replace(str(rig.key), str(other)).replace(str(rig.known_hosts), str(known))
                   .replace("ansible_host=127.0.0.1", "ansible_host=localhost"))
    proc = run_cli(["deploy", "-i", str(inv)], setup["home"], timeout=300)
    one_line_error(proc, 1, "cannot reach", "Permission denied")
    # When Ansible loses ssh's message (pipelining: "Broken pipe"), deploy asks ssh itself.
    from provisioner.deploy.inventory import load_inventory
    from provisioner.deploy.preflight import ssh_reason
    reason = ssh_reason(load_inventory(str(inv)).controller)
    assert reason and "Permission denied" in reason, reason
    good = rig.inventory("ctl", ["node1", "node2"], cluster=setup["name"], path=tmp_path / "goodkey.ini")
    assert ssh_reason(load_inventory(str(good)).controller) is None


def test_host_key_checking_is_on_by_default(deployed, rig, setup, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    base = ["status", "--ssh", setup["target"], "--ssh-key", str(rig.key), "--known-hosts", str(empty)]
    one_line_error(run_cli(base, setup["home"]), 1, f"host key of 127.0.0.1:{rig.hosts['ctl']} is not known")
    one_line_error(run_cli(["verify", *base[1:], "--suite", "basic"], setup["home"]), 1,
                   f"host key of 127.0.0.1:{rig.hosts['ctl']} is not known")
    # Accepted: it connects and reads the (deployed, healthy) cluster; a refused key would be exit 1 too.
    proc = run_cli(base + ["--insecure-accept-host-key"], setup["home"])
    assert proc.returncode == 0 and "error:" not in proc.stderr, proc.stderr
    assert f"cluster {setup['name']} (ssh, Slurm 22.05." in proc.stdout and "): healthy" in proc.stdout


def test_bad_inventory_is_exit_2(setup, tmp_path):
    bad = tmp_path / "bad.ini"
    bad.write_text("[controller]\nctl\n[compute]\n")
    one_line_error(run_cli(["deploy", "-i", str(bad)], setup["home"]), 2, "[compute] must list at least one host")
