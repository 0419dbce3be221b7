"""`simcluster scale` on real local clusters: nodes join while a job runs and the job
completes, the new nodes run jobs and are nodes like any other (status, stop/start),
removal refuses running jobs unless --force, bad input is one line; and an elastic
torchrun job grows from 1 to 3 nodes (examples/elastic)."""

from __future__ import annotations

import getpass
import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, module_cluster, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def scl():
    with module_cluster("scl", "--nodes", "2", "--fake-gpus", "2") as c:
        yield c


def _sinfo(c) -> dict:
    out = c.run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout
    return dict(line.split() for line in out.splitlines())


def _one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_grow_while_a_job_runs(scl, tmp_path):
    out = tmp_path / "job.out"
    os.chmod(tmp_path, 0o777)
    job = scl.run(["sbatch", "--parsable", "-N2", "-o", str(out), "--wrap",
                   "srun -N2 bash -c 'sleep 4; echo done $SLURMD_NODENAME'"]).stdout.strip()
    wait_for("the job to run", lambda: scl.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "RUNNING")
    proc = scl.cli(["scale", "--add", "2"])
    assert proc.returncode == 0, proc.stderr
    assert "node3, node4 joined" in proc.stdout and "GPUs 2,3 (fake)" in proc.stdout
    states = _sinfo(scl)
    assert states["node3"] == "idle" and states["node4"] == "idle", states
    # The job that ran while slurmctld restarted completes on its nodes.
    wait_for("the job to end", lambda: not scl.run(["squeue", "-h", "-j", job], check=False).stdout.strip())
    assert sorted(out.read_text().split()) == ["done", "done", "node1", "node2"]
    # The new nodes run jobs with their GPUs; their names resolve in jobs like the others'.
    res = scl.run(["srun", "-w", "node3,node4", "-N2", "--gpus-per-node=1", "bash", "-c",
                   "echo $SLURMD_NODENAME $(nvidia-smi -L | wc -l) $(getent hosts node1 node4 | wc -l)"])
    assert sorted(res.stdout.split("\n")[:2]) == ["node3 1 2", "node4 1 2"], _step_report(scl, res)


def _step_report(c, res) -> str:
    """What a step that printed the wrong thing left: its streams and the new nodes' slurmd logs."""
    logs = "".join(f"\n--- {p.name} (tail)\n" + "\n".join(p.read_text(errors="replace").splitlines()[-25:])
                   for p in sorted((c.root / "log").glob("slurmd*node[34]*")))
    return f"rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}{logs}"


def test_new_nodes_are_nodes_like_the_others(scl):
    status = json.loads(scl.cli(["status", "--json"], check=True).stdout)
    assert "node4" in json.dumps(status)
    state = json.loads((scl.root / "state.json").read_text())
    assert [n["name"] for n in state["spec"]["nodes"]] == ["node1", "node2", "node3", "node4"]
    assert "slurmd:node4" in state["pids"]
    scl.cli(["stop"], check=True)
    scl.cli(["start"], check=True)
    wait_for("4 idle nodes", lambda: set(_sinfo(scl).values()) == {"idle"} and len(_sinfo(scl)) == 4)
    assert scl.run(["srun", "-N4", "true"]).returncode == 0
    # Repair: a joined node's dead slurmd comes back with `up --name X` (the stored spec).
    scl.cli(["fault", "kill", "node4"], check=True)
    repaired = scl.cli(["up"], check=True)
    assert "different spec" not in repaired.stderr
    assert json.loads(scl.cli(["status", "--json"], check=True).stdout)["healthy"] is True


def test_remove_refuses_running_jobs_unless_force(scl):
    job = scl.run(["sbatch", "--parsable", "-w", "node4", "-o", "/dev/null", "--wrap", "sleep 300"]).stdout.strip()
    wait_for("the job to run", lambda: scl.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "RUNNING")
    line = _one_line_error(scl.cli(["scale", "--remove", "node4"]))
    assert job in line and "--force" in line
    assert "node4" in _sinfo(scl)
    proc = scl.cli(["scale", "--remove", "node4", "--force"])
    assert proc.returncode == 0, proc.stderr
    assert f"cancelled job(s) {job}" in proc.stdout  # it asked for node4 by name: it could never run again
    assert set(_sinfo(scl)) == {"node1", "node2", "node3"}
    # --nodes shrinks by the newest node; nothing runs there, so no flag is needed.
    proc = scl.cli(["scale", "--nodes", "2"])
    assert proc.returncode == 0 and "node3 left" in proc.stdout, proc.stderr
    assert set(_sinfo(scl)) == {"node1", "node2"}
    assert scl.run(["srun", "-N2", "true"]).returncode == 0


def test_bad_input_is_one_line(scl):
    assert "exactly one of" in _one_line_error(scl.cli(["scale"]))
    assert "no node nosuch" in _one_line_error(scl.cli(["scale", "--remove", "nosuch"]))
    assert "without nodes" in _one_line_error(scl.cli(["scale", "--remove", "node1,node2"]))
    assert "not both" in _one_line_error(scl.cli(["scale", "--remove", "node2", "--drain", "--force"]))
    assert "already belongs" in _one_line_error(scl.cli(["scale", "--add", "1", "--gpus", "0"]))


@pytest.fixture(scope="module")
def elastic():
    with module_cluster("sce", "--nodes", "1") as c:
        yield c


def test_elastic_torchrun_grows_from_one_to_three_nodes(elastic, tmp_path, monkeypatch):
    """The elastic example grows from one node to three: a second job of two nodes joins the
    first one's rendezvous, torchrun restarts the workers with world 3, and they resume
    from the checkpoint. The run is long (ELASTIC_STEPS) so that the second job's start,
    however slow the host, falls inside it; once the world of 3 has trained a few steps
    both jobs are cancelled."""
    pytest.importorskip("torch")
    os.chmod(tmp_path, 0o777)
    example = REPO / "examples" / "elastic"
    env = {"ELASTIC_EXAMPLE_DIR": str(example), "ELASTIC_DIR": str(tmp_path), "ELASTIC_STEPS": "100000",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    exports = "--export=ALL," + ",".join(f"{k}={v}" for k, v in env.items() if k != "PATH")
    monkeypatch.setenv("PATH", env["PATH"])  # torchrun on the jobs' PATH (sbatch passes the submitter's)
    progress = tmp_path / "progress.log"

    def steps():
        lines = progress.read_text().splitlines() if progress.exists() else []
        return [(int(line.split()[1]), line.split()[3]) for line in lines]

    first = elastic.run(["sbatch", "--parsable", "-N1", exports, str(example / "elastic.sbatch")],
                        cwd=tmp_path).stdout.strip()
    try:
        wait_for("training on one node", lambda: (3, "1") in steps(), timeout=90)
        assert elastic.cli(["scale", "--add", "2"]).returncode == 0
        second = elastic.run(["sbatch", "--parsable", "-N2", exports + ",RDZV_HOST=node1",
                              str(example / "elastic.sbatch")], cwd=tmp_path).stdout.strip()
        wait_for("three steps in a world of 3", lambda: [w for _, w in steps()].count("3") >= 3, timeout=240)
        for job in (first, second):
            state = elastic.run(["scontrol", "show", "job", job]).stdout
            assert "JobState=RUNNING" in state, state  # neither job failed on the way
    finally:
        elastic.run(["scancel", "--user", getpass.getuser()], check=False)  # both jobs: the cluster is the test's
        wait_for("the jobs to end", lambda: not elastic.run(["squeue", "-h"], check=False).stdout.strip(), timeout=60)
    done = steps()
    worlds = [w for _, w in done]
    assert worlds[0] == "1" and set(worlds) <= {"1", "2", "3"}, worlds
    numbers = [n for n, _ in done]
    # Each restart resumes from the checkpoint of the step before: the count never starts over.
    assert all(b >= a for a, b in zip(numbers, numbers[1:])), numbers
    assert next(n for n, w in done if w == "3") > 3, done
