"""`up --like` on real daemons: every conf of the corpus (tests/data/like/) comes up as the
mirror its expect.yaml says, runs the job headers its partitions take, and refuses the ones
production would refuse, with Slurm's own reason.

One cluster per conf, shared by all of its headers (the accounting ones take a few seconds
more to come up). The accepted headers run as real batch jobs with an srun step each,
submitted together and waited for together.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from typing import Dict, List

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration

CORPUS = REPO / "tests" / "data" / "like"
CONFS = sorted(p.parent.name for p in CORPUS.glob("*/expect.yaml"))
JOB_TIMEOUT = 120


def expect(name: str) -> Dict:
    return yaml.safe_load((CORPUS / name / "expect.yaml").read_text())


def node_partitions(cluster) -> Dict[str, List[str]]:
    """{partition: its nodes} as slurmctld has them."""
    out = cluster.run(["sinfo", "-h", "-N", "-o", "%R %N"]).stdout
    parts: Dict[str, List[str]] = {}
    for line in out.splitlines():
        part, node = line.split()
        parts.setdefault(part, []).append(node)
    return parts


def job_state(cluster, job_id: str) -> Dict[str, str]:
    """JobState, ExitCode and Reason of a job as slurmctld has it (finished jobs stay MinJobAge)."""
    out = cluster.run(["scontrol", "show", "job", "-o", job_id]).stdout
    return dict(re.findall(r"(JobState|ExitCode|Reason)=(\S+)", out))


def run_accepted(cluster, headers: List[str], tmp_path) -> None:
    """Submit every header as a batch job with an srun step, all at once; each must complete
    with exit 0 and its step's output."""
    jobs = []
    for i, header in enumerate(headers):
        out = tmp_path / f"job{i}.out"
        proc = cluster.run(["sbatch", "--parsable", "-o", str(out), *shlex.split(header), "--wrap",
                            "srun hostname && echo STEP-OK"], check=False, cwd=str(tmp_path))
        assert proc.returncode == 0, f"{header}: refused: {proc.stderr}"
        jobs.append((header, out, proc.stdout.strip()))
    deadline = time.monotonic() + JOB_TIMEOUT
    states: Dict[str, Dict[str, str]] = {}
    while time.monotonic() < deadline:
        states = {job_id: job_state(cluster, job_id) for _, _, job_id in jobs}
        if all(s.get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", None)
               for s in states.values()):
            break
        time.sleep(0.2)
    failures = []
    for header, out, job_id in jobs:
        text = out.read_text() if out.exists() else ""
        if states[job_id].get("JobState") != "COMPLETED" or "STEP-OK" not in text:
            failures.append(f"{header}: {states[job_id]}\n{text}")
    assert not failures, "\n".join(failures)


def assert_held(cluster, job_id: str, reason: str) -> None:
    """The job is pending with ``reason`` (slurmctld writes it at its first scheduling pass)."""
    seen = ""
    for _ in range(100):
        seen = cluster.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"]).stdout.strip()
        if reason in seen:
            assert seen.startswith("PENDING"), seen
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} is not held for '{reason}': squeue says '{seen}'")


@pytest.mark.parametrize("name", CONFS)
def test_a_production_conf_comes_up_and_takes_its_headers(make_cluster, tmp_path, name):
    want = expect(name)
    conf = f"tests/data/like/{name}/slurm.conf"  # as a user types it (up runs in the checkout)
    args = ["--like", conf]
    if want["maxNodes"]:
        args += ["--max-nodes", str(want["maxNodes"])]
    t0 = time.monotonic()
    cluster = make_cluster(*args)
    up_seconds = time.monotonic() - t0
    assert cluster.up_output.stdout.startswith(f"like {conf}: kept "), cluster.up_output.stdout

    parts = node_partitions(cluster)
    assert set(parts) == set(want["partitions"])
    assert sorted({n for nodes in parts.values() for n in nodes}) == sorted(want["nodes"])
    default = cluster.run(["scontrol", "show", "partition", want["default"]]).stdout
    assert "Default=YES" in default

    run_accepted(cluster, want["accepted"], tmp_path)
    for case in want["refused"]:
        proc = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", *shlex.split(case["args"]), "--wrap", "true"],
                           check=False, cwd=str(tmp_path))
        if case.get("held"):
            assert proc.returncode == 0, proc.stderr
            assert_held(cluster, proc.stdout.strip(), case["says"])
            continue
        assert proc.returncode != 0, f"{case['args']} was accepted: {proc.stdout}"
        assert case["says"] in proc.stderr, proc.stderr
    print(f"{name}: up in {up_seconds:.1f} s, {len(want['accepted'])} headers run, "
          f"{len(want['refused'])} refused, {time.monotonic() - t0:.1f} s in all")


def test_the_seed_fragment_is_the_seed_cluster(make_cluster):
    cluster = make_cluster("--like", str(CORPUS / "seed" / "slurm.conf"))
    conf = cluster.slurm_conf.read_text()
    # One line for both, as the fragment writes two alike nodes (config/nodelines.py).
    assert "NodeName=node[6-7] NodeHostname=" in conf and " Port=[17016-17017] CPUs=112 RealMemory=240000 " in conf
    for node, port, gpu in (("node6", 17016, 6), ("node7", 17017, 7)):
        assert f"Port={port} " in cluster.run(["scontrol", "show", "node", node]).stdout
        assert f"NodeName={node} Name=gpu File=" in (cluster.root / "etc" / "gres.conf").read_text()
        assert f"/nvidia{gpu}" in (cluster.root / "etc" / "gres.conf").read_text()
    out = cluster.run(["sinfo", "-h", "-N", "-o", "%N %c %m %G %P"]).stdout.split("\n")
    assert out[:2] == ["node6 112 240000 gpu:1 gpu*", "node7 112 240000 gpu:1 gpu*"]


def test_a_conf_in_slurms_own_syntax_runs_as_slurm_reads_it(make_cluster, tmp_path):
    """Continuations joined with nothing between, includes relative to their file with %c,
    DEFAULT records, lower-case keys, quoted lists: the mirror's slurmctld has each kept node
    as Slurm's own parser reads the original conf (CPUs, RealMemory, Gres, features) and each
    partition with the original's nodes that were kept."""
    conf = CORPUS / "slurm-syntax" / "slurm.conf"
    top = tmp_path / "top.conf"  # the reference reads the conf through a top file, as in the unit test
    top.write_text(f"ClusterName=reference\nSlurmctldHost=localhost\ninclude {conf}\n")
    proc = subprocess.run([sys.executable, "-m", "tests.unit.like.slurm_reference", str(top)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=True)
    ref = json.loads(proc.stdout)
    cluster = make_cluster("--like", str(conf), "--max-nodes", "3")
    kept = sorted(set(cluster.run(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split()))
    assert kept == ["cpu01", "cpu02", "gpu1"]
    for record in ref["nodes"]:
        for name in set(record["names"]) & set(kept):
            shown = dict(re.findall(r"(\w+)=(\S*)", cluster.run(["scontrol", "show", "node", name]).stdout))
            assert int(shown["CPUTot"]) == record["cpus"], (name, shown)
            assert int(shown["RealMemory"]) == record["memory"], (name, shown)
            assert shown["Gres"] == (record["gres"] or "(null)"), (name, shown)
            assert shown["AvailableFeatures"].split(",") == [f.strip() for f in record["features"].split(",")]
    for part in ref["partitions"]:
        shown = cluster.run(["sinfo", "-h", "-N", "-p", part["name"], "-o", "%N"]).stdout.split()
        original = kept if part["names"] == ["ALL"] else [n for n in part["names"] if n in kept]
        assert sorted(set(shown)) == sorted(original), part
        default = "Default=YES" in cluster.run(["scontrol", "show", "partition", part["name"]]).stdout
        assert default is part["default"], part
