"""Each node's NodeHostname is its own host name, so srun in a job hears from slurmctld.

slurmctld finds where to send an srun's step messages (a step's cancel, a node's failure)
by matching srun's host name among the nodes' NodeHostname. In namespaces each local node
has its own host name (node1, node2): an srun in a batch job runs there, so the nodes'
NodeHostname must be those names, not this machine's (with it, none matched and slurmctld
sent to 0.0.0.0; srun printed `Force Terminated` and never heard of a node failure).

One 2-node cluster for the module (--fast-failure: a dead node is DOWN in seconds), used
from a shell as a user does (`eval "$(simcluster env)"`). The node-failure test comes
last: it leaves node2 down.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.conftest import module_cluster, user_shell, wait_for

pytestmark = pytest.mark.integration
NAME = "hostn"


@pytest.fixture(scope="module")
def hc():
    with module_cluster(NAME, "--nodes", "2", "--fast-failure") as c:
        state = json.loads((c.root / "state.json").read_text())
        if state["provider_data"].get("resolver") != "mount-namespace":
            pytest.skip("the nodes have no namespaces here (libnss_wrapper): they share this host's name")
        yield c


def shell(c, script: str, **kw):
    res = user_shell(c.home, NAME, script, **kw)
    assert res.returncode == 0, f"exit {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    return res


def job_state(c, job: str) -> str:
    out = c.run(["scontrol", "show", "job", "-o", job], check=False).stdout
    return next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "")


def test_node_hostnames_are_the_node_names(hc):
    conf = hc.slurm_conf.read_text()
    assert any(line.startswith("NodeName=node[1-2] NodeHostname=node[1-2] NodeAddr=")
               for line in conf.splitlines()), conf
    out = shell(hc, "sinfo -h -N -o '%N %n'; srun -N2 hostname | sort").stdout.split()
    assert out == ["node1", "node1", "node2", "node2", "node1", "node2"], out


def test_cancelling_a_step_in_a_batch_job_reaches_its_srun(hc, tmp_path):
    """`scancel JOB.0` of an srun step in a batch script: slurmctld tells that srun, which
    says `Job step aborted` (deaf, it printed `Force Terminated` once its tasks died)."""
    script = tmp_path / "step.sh"
    script.write_text("#!/bin/bash\nsrun sleep 60 &\nwait\necho srun-ended\n")
    out = tmp_path / "step.out"
    job = shell(hc, f"sbatch --parsable -N2 -o {out} {script}").stdout.strip()
    # squeue -s lists the step as JOB.0 once slurmctld has it; then cancel just that step.
    wait_for("step 0", lambda: f"{job}.0" in hc.run(["squeue", "-h", "-s", "-j", job, "-o", "%i"],
                                                     check=False).stdout, timeout=60)
    shell(hc, f"scancel {job}.0")
    wait_for("the job to end", lambda: job_state(hc, job) in ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
    text = out.read_text()
    assert "srun: Job step aborted" in text, text
    assert "Force Terminated" not in text, text
    assert "srun-ended" in text, text


def test_cancelling_a_step_reaches_an_srun_on_this_host(hc, tmp_path):
    """An srun run from the user's shell on this host has a host name no node has: slurmctld
    falls back to 0.0.0.0, which the controller's namespace passes on to this host."""
    out = tmp_path / "host-srun.out"
    pid = shell(hc, f"srun -N2 sleep 60 > {out} 2>&1 & echo $!").stdout.strip()
    try:
        wait_for("the step", lambda: ".0" in hc.run(["squeue", "-h", "-s", "-o", "%i"], check=False).stdout,
                 timeout=60)
        job = hc.run(["squeue", "-h", "-o", "%i"]).stdout.split()[0]
        shell(hc, f"scancel {job}.0")
        wait_for("srun to end", lambda: not os.path.exists(f"/proc/{pid}"), timeout=60)
        text = out.read_text()
        assert "srun: Job step aborted" in text and "Force Terminated" not in text, text
    finally:
        if os.path.exists(f"/proc/{pid}"):
            os.kill(int(pid), signal.SIGKILL)


def test_node_name_in_srun_output_file_names(hc, tmp_path):
    """%N in srun's --output is the node's name (it is Slurm's host name for the node)."""
    script = tmp_path / "names.sh"
    script.write_text(f"#!/bin/bash\nsrun -N2 -o {tmp_path}/out-%N hostname\n")
    job = shell(hc, f"sbatch --parsable -N2 -o {tmp_path}/batch.out {script}").stdout.strip()
    wait_for("the job to end", lambda: job_state(hc, job) in ("COMPLETED", "FAILED", "CANCELLED"), timeout=90)
    assert job_state(hc, job) == "COMPLETED", (tmp_path / "batch.out").read_text()
    found = {p.name: p.read_text().strip() for p in tmp_path.glob("out-*")}
    assert found == {"out-node1": "node1", "out-node2": "node2"}, found


def test_a_killed_node_under_a_step_reaches_its_srun(hc, tmp_path):
    """`simcluster fault kill node2` under 2-node srun steps, one in a batch job and one run
    from the user's shell on this host: each srun reports the node's failure and ends when
    node2 is DOWN (the job not at its time limit, the shell's srun not waiting forever for
    node2's tasks)."""
    script = tmp_path / "long.sh"
    script.write_text("#!/bin/bash\nsrun -N2 sleep 600\n")
    out, host_out = tmp_path / "long.out", tmp_path / "host-long.out"
    job = shell(hc, f"sbatch --parsable --no-requeue -N2 -t 30 -o {out} {script}").stdout.strip()
    pid = shell(hc, f"srun -N2 -t 30 sleep 600 > {host_out} 2>&1 & echo $!").stdout.strip()
    try:
        wait_for("both steps to run", lambda: hc.run(["squeue", "-h", "-s", "-o", "%i"], check=False
                                                     ).stdout.count(".0") == 2, timeout=60)
        shell(hc, "simcluster fault kill node2 --name " + NAME)
        # --fast-failure: node2 is DOWN after ~12 s; the job ends then, not after 30 minutes.
        wait_for("the job to end", lambda: job_state(hc, job) not in ("", "RUNNING", "COMPLETING"), timeout=120)
        assert job_state(hc, job) == "NODE_FAIL"
        # The job's end kills the batch script too: srun's report is the output's last word.
        wait_for("srun to report the node's failure",
                 lambda: "srun: error: Node failure on node2" in out.read_text(), timeout=30)
        text = out.read_text()
        assert "Force Terminated" not in text, text
        wait_for("the shell's srun to end", lambda: not os.path.exists(f"/proc/{pid}"), timeout=60)
        assert "srun: error: Node failure on node2" in host_out.read_text(), host_out.read_text()
    finally:
        if os.path.exists(f"/proc/{pid}"):
            os.kill(int(pid), signal.SIGKILL)
