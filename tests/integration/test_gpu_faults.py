"""`fault gpu` on a real 2-node local cluster with fake GPUs and the cluster's own health
check (healthCheck: {interval: 5}): Xid 79 on node1's gpu0 kills the step that holds it,
nvidia-smi on node1 shows ERR!, the health check drains node1 with the Xid in the reason,
and `fault heal node1` clears it and node1 is idle again. The fault -> drain and
heal -> idle times are printed (no timed assertion: the machine is shared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import TEST_HOME_ROOT, module_cluster, run_cli, wait_for

pytestmark = pytest.mark.integration
INTERVAL = 5
SPEC = f"""apiVersion: simcluster/v1
kind: Cluster
fakeGpus: true
nodes:
  - {{name: node1, gpus: [0, 1]}}
  - {{name: node2, gpus: [2, 3]}}
healthCheck: {{interval: {INTERVAL}}}
"""


@pytest.fixture(scope="module")
def gc():
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    spec = TEST_HOME_ROOT / f"gpuf1-{os.getpid()}.yaml"
    spec.write_text(SPEC)
    try:
        with module_cluster("gpuf1", "--config", str(spec)) as c:
            yield c
    finally:
        spec.unlink(missing_ok=True)


def node(c, name: str):
    """(state, reason) of a node as sinfo says."""
    out = c.run(["sinfo", "-h", "-N", "-n", name, "-o", "%T|%E"], check=False).stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def on_node(c, name: str, *args: str) -> subprocess.CompletedProcess:
    """nvidia-smi as a shell on the node runs it (outside a job: every GPU of the node)."""
    env = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin", "SLURMD_NODENAME": name}
    return subprocess.run([str(c.root / "etc" / "bin" / "nvidia-smi"), *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=30)


def test_xid_79_drains_the_node_and_heal_resumes_it(gc, tmp_path):
    assert "HealthCheckProgram=" in gc.slurm_conf.read_text()
    out = tmp_path / "job.out"
    job = gc.run(["sbatch", "--parsable", "-w", "node1", "--gres=gpu:1", "-o", str(out), "--wrap",
                  "srun sleep 300; echo srun exited $?"]).stdout.strip()
    wait_for("the GPU job to run", lambda: "RUNNING" in gc.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout)
    wait_for("its step to start", lambda: f"{job}.0" in gc.run(["squeue", "-h", "-s", "-j", job]).stdout)

    t0 = time.monotonic()
    fault = run_cli(["fault", "gpu", "node1", "--xid", "79", "--name", gc.name], gc.home, check=True).stdout
    assert "node node1 gpu0: Xid 79 (GPU has fallen off the bus)" in fault and "killed" in fault
    wait_for("node1 drained by the health check", lambda: "drain" in node(gc, "node1")[0], timeout=6 * INTERVAL + 30,
             poll=0.2)
    to_drain = time.monotonic() - t0
    state, reason = node(gc, "node1")
    assert reason.startswith("gpu0: Xid 79"), reason
    assert node(gc, "node2")[0] == "idle"  # the other node keeps working
    reasons = gc.run(["sinfo", "-R"]).stdout
    assert "gpu0: Xid 79" in reasons

    # What production gives the job: its step killed, the batch script goes on.
    wait_for("the job to end", lambda: not gc.run(["squeue", "-h", "-j", job]).stdout.strip(), timeout=60)
    assert "srun exited 137" in out.read_text(), out.read_text()

    table = on_node(gc, "node1")
    assert table.returncode == 0 and "ERR!" in table.stdout and "00000000:18:00.0" in table.stdout
    assert "ERR!" not in on_node(gc, "node2").stdout
    faults = json.loads((gc.root / "etc" / "gpu-faults.json").read_text())
    assert faults["node1"]["0"]["xid"] == 79 and faults["node1"]["0"]["lost"] is False
    kmsg = (gc.root / "etc" / "kmsg" / "node1").read_text()
    assert "NVRM: Xid (PCI:0000:18:00): 79, pid=" in kmsg

    t1 = time.monotonic()
    healed = run_cli(["fault", "heal", "node1", "--name", gc.name], gc.home, check=True).stdout
    assert "undrained node1" in healed
    wait_for("node1 idle again", lambda: node(gc, "node1")[0] == "idle", timeout=60, poll=0.2)
    to_idle = time.monotonic() - t1
    assert json.loads((gc.root / "etc" / "gpu-faults.json").read_text()) == {}
    assert "ERR!" not in on_node(gc, "node1").stdout
    print(f"\nsinfo -R while drained:\n{reasons}\nnvidia-smi on node1 with the fault:\n{table.stdout}\n"
          f"fault -> drain {to_drain:.2f} s (HealthCheckInterval={INTERVAL}); heal -> idle {to_idle:.2f} s")


def test_lost_gpu_and_an_admins_drain_stays_after_heal(gc):
    gc.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=maintenance"])
    run_cli(["fault", "gpu", "node2", "--gpu", "1", "--lost", "--name", gc.name], gc.home, check=True)
    listed = on_node(gc, "node2", "-L")
    assert len(listed.stdout.splitlines()) == 1 and listed.stdout.startswith("GPU 0:")
    lost = on_node(gc, "node2")
    assert lost.returncode == 15 and "GPU is lost" in lost.stdout
    time.sleep(INTERVAL + 2)  # a round of the health check: the admin's reason must stay
    assert node(gc, "node2")[1] == "maintenance"
    run_cli(["fault", "heal", "node2", "--name", gc.name], gc.home, check=True)
    assert node(gc, "node2") == ("drained", "maintenance")
    gc.run(["scontrol", "update", "nodename=node2", "state=resume"])
    bad = run_cli(["fault", "gpu", "node1", "--gpu", "7", "--xid", "79", "--name", gc.name], gc.home)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_verify_faults_suite_runs_the_gpu_fault_check(gc):
    """verify's faults.gpu-faults on this cluster (fake GPUs, a health check): it injects Xid
    79, sees the drain with the Xid in the reason, heals, and sees the node idle again. (The
    suite's other checks need `up --fast-failure`: on this cluster they SKIP.)"""
    wait_for("both nodes idle", lambda: (node(gc, "node1")[0], node(gc, "node2")[0]) == ("idle", "idle"))
    proc = run_cli(["verify", "--name", gc.name, "--suite", "faults", "--json"], gc.home, timeout=600)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    gpu = checks["faults.gpu-faults"]
    assert gpu["status"] == "PASS" and "79" in gpu["message"], \
        (gpu["status"], gpu["message"], checks.get("basic.nodes", {}).get("message"))
    assert not [n for n, c in checks.items() if c["status"] == "FAIL"], checks
    assert node(gc, "node1")[0] == "idle" and json.loads((gc.root / "etc" / "gpu-faults.json").read_text()) == {}
