"""The pytest plugin, as a client project meets it: inner pytest sessions against real clusters.

Each inner session is a real `python -m pytest` process in a scratch project (the plugin
loads through its pytest11 entry point, as it does for anyone who installed simcluster):
a process of its own is what Ctrl-C, a killed session and crashing xdist workers need.
Every test ends by checking that the inner session left nothing: no daemon under the
test's SIMCLUSTER_HOME, no cluster directory, no ownership record.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List

import pytest

from tests.conftest import daemons_under, wait_for

pytestmark = pytest.mark.integration


def inner_pytest(project: Path, home: Path, files: Dict[str, str], *args: str, timeout: float = 300,
                 popen: bool = False):
    """Write ``files`` into ``project`` and run pytest there with SIMCLUSTER_HOME=home."""
    project.mkdir(parents=True, exist_ok=True)
    if not (project / "pyproject.toml").exists():
        (project / "pytest.ini").write_text("[pytest]\n")  # the scratch project is its own rootdir
    for rel, text in files.items():
        (project / rel).write_text(textwrap.dedent(text))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SLURM_"))}
    env["SIMCLUSTER_HOME"] = str(home)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args]
    if popen:
        # SIGINT as a terminal gives it (default: KeyboardInterrupt), even where this suite was
        # started in the background of a non-interactive shell, which ignores SIGINT for its
        # children; an ignored SIGINT is inherited, and Python keeps it ignored.
        return subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return subprocess.run(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def outcomes(output: str) -> Dict[str, int]:
    """{'passed': 3, 'failed': 1, ...} from pytest's last summary line."""
    last = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", line)]
    return {m.group(2): int(m.group(1)) for m in re.finditer(r"(\d+) (\w+)", last[-1])} if last else {}


def leftovers(home: Path) -> List[str]:
    """What an inner session left behind in ``home``: daemons, cluster directories, ownership records."""
    left = daemons_under(home)
    if home.is_dir():
        left += [f"cluster dir {p.name}" for p in home.iterdir() if p.is_dir() and p.name.startswith("pyt-")]
    owners = home / ".pytest-owners"
    if owners.is_dir():
        left += [f"ownership record {p.name}" for p in owners.iterdir()]
    return left


FIXTURES = '''
    import os, json, pytest
    from pathlib import Path

    NAMES = Path(os.environ["NAMES_FILE"])

    def note(key, cluster):
        NAMES.open("a").write(json.dumps([key, cluster.name, cluster.nodes]) + "\\n")

    def test_job(slurm_cluster):
        note("job", slurm_cluster)
        assert slurm_cluster.env["SLURM_CONF"].endswith("/etc/slurm.conf")
        assert slurm_cluster.run(["sinfo", "-h", "-o", "%D"]).stdout.split() == ["2"]
        job = slurm_cluster.sbatch("#SBATCH -N2\\nsrun -l hostname >/dev/null; srun bash -c 'echo on $SLURMD_NODENAME'")
        assert (job.state, job.exit_code) == ("COMPLETED", 0), job.output
        assert sorted(job.output.split()) == ["node1", "node2", "on", "on"]
        assert isinstance(job.id, int)

    def test_reused(slurm_cluster):
        note("reused", slurm_cluster)
        job = slurm_cluster.sbatch("exit 3")
        assert (job.state, job.exit_code) == ("FAILED", 3)

    @pytest.mark.slurm(nodes=3)
    def test_marker(slurm_cluster):
        note("marker", slurm_cluster)
        assert slurm_cluster.nodes == ["node1", "node2", "node3"]

    def test_factory(slurm_cluster_factory):
        one = slurm_cluster_factory(nodes=1)
        note("factory", one)
        assert one.run(["sinfo", "-h", "-o", "%N"]).stdout.strip() == "node1"

    def test_timeout(slurm_cluster):
        with pytest.raises(AssertionError) as err:
            slurm_cluster.sbatch("sleep 120", timeout=1)
        assert "did not reach a final state within 1s; last state seen:" in str(err.value)
        assert "cancelled" in str(err.value)

    def test_fails(slurm_cluster):
        note("fails", slurm_cluster)
        assert False, "this test fails on purpose"

    @pytest.mark.slurm(gpus="0,1")
    def test_no_gpus(slurm_cluster):
        pass

    @pytest.mark.slurm(colour="blue")
    def test_bad_marker(slurm_cluster):
        pass

    def test_fault_kill(slurm_cluster, slurm_faults):
        assert "killed node node2" in slurm_faults.kill("node2")
        slurm_faults.drain("node1", reason="testing")
        assert "drain" in slurm_cluster.run(["sinfo", "-h", "-n", "node1", "-o", "%T"]).stdout

    def test_healed_after_fault(slurm_cluster):
        note("healed", slurm_cluster)
        states = slurm_cluster.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.split()
        assert states == ["node1", "idle", "node2", "idle"]
        assert slurm_cluster.sbatch("#SBATCH -N2\\nsrun true").state == "COMPLETED"
'''


def test_fixtures_marker_factory_faults_bundle_and_nothing_left(sim_home, tmp_path):
    names_file = tmp_path / "names.jsonl"
    bundles = tmp_path / "bundles"
    os.environ["NAMES_FILE"] = str(names_file)
    try:
        proc = inner_pytest(tmp_path / "proj", sim_home, {"test_inner.py": FIXTURES},
                            f"--simcluster-logs-dir={bundles}")
    finally:
        del os.environ["NAMES_FILE"]
    out = proc.stdout
    assert outcomes(out) == {"passed": 7, "failed": 1, "skipped": 1, "error": 1}, out
    seen = {}
    for line in names_file.read_text().splitlines():
        key, name, nodes = json.loads(line)
        seen[key] = (name, nodes)
    # One session cluster, reused by the unmarked tests; the marker and the factory made their own.
    assert seen["job"] == seen["reused"] == seen["fails"] == seen["healed"], seen
    assert seen["job"][0].startswith("pyt-") and seen["job"][1] == ["node1", "node2"]
    assert seen["marker"][1] == ["node1", "node2", "node3"] and seen["marker"][0] != seen["job"][0]
    assert seen["factory"][1] == ["node1"] and seen["factory"][0] not in (seen["job"][0], seen["marker"][0])
    # The failed test's report names its bundle, which holds the daemons' logs.
    m = re.search(r"export-logs bundle of cluster '(pyt-[\w-]+)' \(local\): (\S+)", out)
    assert m, out
    bundle = Path(m.group(2))
    assert m.group(1) == seen["fails"][0] and bundle.parent.parent == bundles
    assert (bundle / "logs" / "slurmctld.log").stat().st_size > 0
    assert "node2" in (bundle / "scontrol-show-node.txt").read_text()
    # One clear reason for the skip and for the bad marker.
    assert re.search(r"SKIPPED .*this machine cannot run a simcluster cluster of 2 nodes, local, gpus 0,1: "
                     r"GPU 0 not found", out), out
    assert re.search(r"ERROR at setup of test_bad_marker _+\nunknown slurm marker key\(s\) colour \(allowed: nodes, "
                     r"gpus, [^\n]*\n=", out), out
    assert leftovers(sim_home) == []


XDIST = '''
    import os, pytest
    from pathlib import Path

    @pytest.mark.parametrize("n", range(4))
    def test_each_worker_its_cluster(slurm_cluster, n):
        Path(os.environ["NAMES_DIR"], f"{os.getpid()}-{n}").write_text(slurm_cluster.name)
        assert slurm_cluster.sbatch("true").state == "COMPLETED"

    def test_crash(slurm_cluster):
        Path(os.environ["NAMES_DIR"], "crashed").write_text(slurm_cluster.name)
        os.kill(os.getpid(), 9)  # the worker dies with its cluster up
'''


def test_xdist_workers_own_clusters_and_a_crashed_worker_leaves_nothing(sim_home, tmp_path):
    names = tmp_path / "names"
    names.mkdir()
    os.environ["NAMES_DIR"] = str(names)
    try:
        proc = inner_pytest(tmp_path / "proj", sim_home, {"test_inner.py": XDIST}, "-n", "2")
    finally:
        del os.environ["NAMES_DIR"]
    assert outcomes(proc.stdout).get("passed") == 4, proc.stdout
    assert "crashed" in proc.stdout  # xdist: "worker 'gwN' crashed while running 'test_inner.py::test_crash'"
    by_pid: Dict[str, set] = {}
    for f in names.iterdir():
        if f.name != "crashed":
            by_pid.setdefault(f.name.split("-")[0], set()).add(f.read_text())
    # Each worker process its own cluster, reused for all its tests.
    assert all(len(v) == 1 for v in by_pid.values()), by_pid
    assert len({n for v in by_pid.values() for n in v}) == len(by_pid)
    assert (names / "crashed").read_text().startswith("pyt-")
    assert leftovers(sim_home) == []


KILLED = '''
    import os, signal
    from pathlib import Path

    def test_killed(slurm_cluster):
        Path(os.environ["NAME_FILE"]).write_text(slurm_cluster.name)
        os.kill(os.getpid(), signal.SIGKILL)
'''

READY = '''
    import os, time
    from pathlib import Path

    def test_interrupted(slurm_cluster):
        slurm_cluster.sbatch("sleep 300", wait=False)
        Path(os.environ["NAME_FILE"]).write_text(slurm_cluster.name)
        time.sleep(120)
'''


def test_killed_session_is_swept_by_the_next_and_ctrl_c_leaves_nothing(sim_home, tmp_path):
    name_file = tmp_path / "name"
    os.environ["NAME_FILE"] = str(name_file)
    try:
        # A session killed outright leaves its cluster running ...
        proc = inner_pytest(tmp_path / "killed", sim_home, {"test_inner.py": KILLED})
        assert proc.returncode == -signal.SIGKILL, proc.stdout
        name = name_file.read_text()
        assert (sim_home / name / "state.json").exists() and daemons_under(sim_home / name)
        # ... and the next session takes it down as it starts, before any test runs.
        proc = inner_pytest(tmp_path / "next", sim_home, {"test_inner.py": "def test_nothing():\n    pass\n"})
        assert outcomes(proc.stdout) == {"passed": 1}, proc.stdout
        assert f"cluster '{name}' removed" in proc.stdout
        assert leftovers(sim_home) == []

        # Ctrl-C in the middle of a test, with a job running: the session still takes its cluster down.
        name_file.unlink()
        p = inner_pytest(tmp_path / "ctrl-c", sim_home, {"test_inner.py": READY}, popen=True)
        try:
            wait_for("the inner test to start", name_file.exists, timeout=120)
            os.killpg(p.pid, signal.SIGINT)
            out, _ = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        assert "KeyboardInterrupt" in out, out
        assert leftovers(sim_home) == []
    finally:
        del os.environ["NAME_FILE"]


def test_plugin_adds_nothing_to_a_session_that_does_not_ask(sim_home, tmp_path):
    proc = inner_pytest(tmp_path / "proj", sim_home, {"test_inner.py": "def test_plain():\n    pass\n"},
                        "--simcluster-nodes=3")
    assert outcomes(proc.stdout) == {"passed": 1}, proc.stdout
    assert not (sim_home / ".pytest-owners").exists() and leftovers(sim_home) == []
