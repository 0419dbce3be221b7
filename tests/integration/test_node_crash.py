"""`fault kill` then `fault heal` of a node is a crashed host that rebooted, as Slurm sees one.

The soak's case: a 2-node `srun sleep` batch job runs on node[1-2]; node2 is killed a
second after the step started and healed at once. On a production host that crashed and
rebooted, (1) srun's connection to the step on the node was never closed (a crashed host
sends nothing) and the rebooted host resets it when srun tests it after slurmctld's "step
missing": srun aborts the step and the job ends; (2) slurmd reports a boot time later than
the node's last answer: with ReturnToService 0 or 1 slurmctld sets the node DOWN "Node
unexpectedly rebooted" and requeues (or ends) its job. Before, the killed stepd's
connection closed cleanly (FIN), srun took that for a step that closed its output, the
node kept the host's boot time, and the job sat RUNNING until its time limit.

Two clusters, as the soak's (--fast-failure): simcluster's own ReturnToService=2, and one
whose spec sets ReturnToService=1. No timed assertion: the deadlines are generous bounds.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.conftest import Cluster, module_cluster, run_cli, wait_for

pytestmark = pytest.mark.integration
# The job must leave RUNNING long before its time limit: slurmctld's "step missing" comes
# at node2's registration, srun's test at once (MessageTimeout=3 on --fast-failure).
LEAVES_RUNNING_WITHIN = 180


@pytest.fixture(scope="module")
def crash():
    with module_cluster("crashrb", "--nodes", "2", "--fast-failure") as c:
        yield c


def job_fields(c: Cluster, job: str) -> dict:
    out = c.run(["scontrol", "show", "job", "-o", job], check=False).stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def node_fields(c: Cluster, node: str) -> dict:
    out = c.run(["scontrol", "show", "node", "-o", node], check=False).stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def uptime_on(c: Cluster, node: str) -> float:
    return float(c.run(["srun", "-w", node, "-N1", "cat", "/proc/uptime"]).stdout.split()[0])


def kill_heal_under_a_running_step(c: Cluster, out_dir) -> tuple:
    """The soak's case: sbatch a 2-node `srun sleep 300`, `fault kill node2` once the step
    runs, `fault heal` at once; returns (job id, heal's output, the output file)."""
    out = out_dir / "crash-%j.out"
    job = c.run(["sbatch", "--parsable", "--requeue", "-N2", "-t", "10", "-o", str(out), "--wrap", "srun sleep 300"]
                ).stdout.strip()
    wait_for("the job's step to run", lambda: f"{job}.0" in c.run(["squeue", "-h", "-s", "-j", job], check=False)
             .stdout, timeout=120)
    time.sleep(1)
    killed = run_cli(["fault", "kill", "node2", "--name", c.name], c.home, check=True).stdout
    assert "cut off the network first" in killed, killed
    healed = run_cli(["fault", "heal", "--name", c.name], c.home, check=True).stdout
    return job, healed, out_dir / f"crash-{job}.out"


def test_a_killed_node_comes_back_rebooted_and_srun_aborts_its_lost_step(crash, tmp_path):
    host_boot = node_fields(crash, "node2")["BootTime"]
    # Each start of a node is a boot: uptime in a job counts from it, not from the host's.
    if os.path.exists("/proc/self/ns/time") and os.geteuid() == 0:
        with open("/proc/uptime") as f:
            assert uptime_on(crash, "node2") < float(f.read().split()[0])
    job, healed, out = kill_heal_under_a_running_step(crash, tmp_path)
    assert "slurmd:node2" in healed, healed
    wait_for("the job to leave RUNNING", lambda: job_fields(crash, job).get("JobState") not in ("RUNNING", None),
             timeout=LEAVES_RUNNING_WITHIN)
    # ReturnToService=2: slurmctld returns the rebooted node to service and tells srun the
    # step is missing there; srun's test of its connection is reset by the rebooted node, it
    # aborts the step, and the batch script (srun its last command) ends FAILED, as on a
    # production cluster with ReturnToService=2.
    fields = job_fields(crash, job)
    assert fields["JobState"] in ("FAILED", "NODE_FAIL", "PENDING", "REQUEUED"), fields
    text = out.read_text()
    assert "Connection reset by peer" in text and "missing step on node 1" in text, text
    if os.path.exists("/proc/self/ns/time") and os.geteuid() == 0:
        assert node_fields(crash, "node2")["BootTime"] != host_boot  # slurmctld knows it rebooted
    wait_for("node2 to take jobs again", lambda: crash.run(["sinfo", "-h", "-n", "node2", "-o", "%T"], check=False)
             .stdout.strip() == "idle", timeout=90)
    assert crash.run(["srun", "-N2", "true"]).returncode == 0


@pytest.mark.skipif(not os.path.exists("/proc/self/ns/time") or os.geteuid() != 0,
                    reason="needs time namespaces (Linux >= 5.6) and root: nodes keep the host's boot time")
def test_with_return_to_service_1_slurmctld_sees_the_reboot_and_requeues_the_job(tmp_path):
    spec = tmp_path / "rts1.yaml"
    spec.write_text("apiVersion: simcluster/v1\nkind: Cluster\nname: crashrts\nfailureDetection: fast\n"
                    "nodes:\n  - {name: node1}\n  - {name: node2}\nslurmConf:\n  - \"ReturnToService=1\"\n")
    with module_cluster("crashrts", "-c", str(spec)) as c:
        job, healed, out = kill_heal_under_a_running_step(c, tmp_path)
        wait_for("the job to leave RUNNING", lambda: job_fields(c, job).get("JobState") not in ("RUNNING", None),
                 timeout=LEAVES_RUNNING_WITHIN)
        # slurmctld: "Node node2 unexpectedly rebooted", the node DOWN, its --requeue job requeued.
        wait_for("the requeue", lambda: job_fields(c, job).get("Restarts") == "1", timeout=60)
        log = (c.root / "log" / "slurmctld.log").read_text()
        assert "Node node2 unexpectedly rebooted" in log and f"requeue job JobId={job}" in log, log[-2000:]
        assert "Node failure on node2" in out.read_text(), out.read_text()
        # The heal resumed the node slurmctld set DOWN for its reboot: it takes jobs again.
        assert c.run(["sinfo", "-h", "-n", "node2", "-o", "%T"]).stdout.strip() in ("idle", "mixed", "allocated")
        c.run(["scancel", job])


def test_fault_reboot_is_a_kill_then_a_heal_of_that_node(crash):
    # A local node has no host of its own to reboot: `fault reboot` kills it and heals it,
    # which starts it again as a rebooted host, and returns once it takes jobs.
    proc = run_cli(["fault", "reboot", "node2", "--name", crash.name], crash.home, check=True)
    assert proc.stdout.startswith("rebooted node2 (killed, then started again as a rebooted host): node2 idle after "), \
        proc.stdout
    assert "waiting for" in proc.stderr, proc.stderr
    assert crash.run(["sinfo", "-h", "-n", "node2", "-o", "%T"]).stdout.strip() == "idle"
    # Nothing is left in effect: the kill's record went with the heal.
    status = run_cli(["status", "--name", crash.name, "--json"], crash.home, check=True).stdout
    assert '"what": "kill"' not in status, status
    assert crash.run(["srun", "-N2", "true"]).returncode == 0
