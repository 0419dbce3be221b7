"""The same assertions on a running cluster of every backend (local, docker).

One cluster per backend for the whole module (see conftest.py). Nothing here changes the
cluster: a refused `up` must leave it untouched, which the later tests then rely on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from provisioner.verify.suites import checks_for
from tests.conftest import not_passed, run_cli
from tests.contract.keys import key_paths, reference_status_keys

pytestmark = pytest.mark.integration

# export-logs: the bundle every backend writes ...
BUNDLE = {"config/slurm.conf", "config/gres.conf", "config/cgroup.conf",
          "logs/slurmctld.log", "logs/slurmd-node1.log", "logs/slurmd-node2.log", "logs/munged.log",
          "state.json", "scontrol-show-node.txt", "scontrol-show-job.txt", "scontrol-show-partition.txt",
          "scontrol-show-config.txt", "versions.txt"}
# ... and what a backend may add to it (patterns over relative paths).
EXTRAS = {
    "local": [r"config/hosts", r"config/task_prolog\.sh", r"config/openmpi-mca-params\.conf",
              r"config/node-mounts\.fstab", r"config/resolv\.conf", r"config/fake-gpus\.json",
              r"config/plugstack\.conf", r"config/epilog\.sh", r"config/oci\.conf", r"config/oci_runtime\.sh",
              r"logs/[\w.-]+\.out"],
    "docker": [r"config/hosts", r"config/fake-gpus\.json", r"config/plugstack\.conf", r"config/epilog\.sh",
               r"config/oci\.conf",
               r"config/oci_runtime\.sh", r"logs/[\w.-]+\.out", r"logs/munged-node\d+\.log", r"docker-inspect\.json",
               r"containers/simcluster-[\w-]+\.log"],
}
BASIC_CHECKS = [c.name for c in checks_for(["basic"])]


def test_status_json_has_the_models_keys_and_a_healthy_cluster(cluster):
    proc = cluster.sim("status", "--json", check=True)
    st = json.loads(proc.stdout)
    assert key_paths(st) == reference_status_keys()
    assert st["name"] == cluster.name and st["backend"] == cluster.backend
    assert st["healthy"] is True and st["phase"] == "running", st
    assert st["controller"]["alive"] and st["controller"]["responding"] and st["munged"]["alive"], st
    assert [n["name"] for n in st["nodes"]] == ["node1", "node2"]
    assert all(n["ready"] and n["state"] == "idle" and n["slurmd_alive"] for n in st["nodes"]), st["nodes"]
    assert st["fake_gpus"] is True and all(len(n["gpus"]) == 1 for n in st["nodes"])
    assert st["accounting"]["enabled"] is False


def test_export_logs_bundle_is_the_same_modulo_backend_extras(cluster, tmp_path):
    out = tmp_path / "bundle"
    cluster.sim("export-logs", str(out), check=True)
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert BUNDLE <= names, f"missing: {sorted(BUNDLE - names)}"
    unexpected = sorted(n for n in names - BUNDLE if not any(re.fullmatch(x, n) for x in EXTRAS[cluster.backend]))
    assert not unexpected, f"not in the common bundle nor a {cluster.backend} extra: {unexpected}"
    assert not [n for n in names if "munge.key" in n]
    key = (cluster.root / "etc" / "munge.key")
    if key.exists():  # the key's bytes are nowhere in the bundle either
        secret = key.read_bytes()
        assert not [n for n in names if secret in (out / n).read_bytes()]
    assert "NodeName=node2" in (out / "scontrol-show-node.txt").read_text()
    assert "slurmctld: slurm" in (out / "versions.txt").read_text()
    assert json.loads((out / "state.json").read_text())["name"] == cluster.name


def test_up_again_with_the_same_spec_does_nothing(cluster):
    again = cluster.sim(*cluster.up_args[:-2], timeout=300)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout


def test_up_with_a_different_spec_is_a_one_line_conflict_and_changes_nothing(cluster):
    args = list(cluster.up_args[:-2])
    args[args.index("--nodes") + 1] = "3"
    args[args.index("--fake-gpus") + 1] = "3"  # a spec that validates: the conflict is the only error
    other = cluster.sim(*args, timeout=300)
    # ClusterConflict: exit 2 (provisioner/errors.py), one line, no traceback.
    assert other.returncode == 2, other.stdout + other.stderr
    lines = [ln for ln in other.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "different spec" in lines[0], other.stderr
    st = json.loads(cluster.sim("status", "--json", check=True).stdout)
    assert st["healthy"] and [n["name"] for n in st["nodes"]] == ["node1", "node2"]


def test_env_and_exec_reach_the_cluster(cluster):
    env = cluster.sim("env", check=True).stdout
    assert f"export SIMCLUSTER_CLUSTER={cluster.name}" in env.splitlines(), env
    # What users do: eval the output, then run Slurm's commands as if the cluster were theirs.
    clean = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    evaluated = subprocess.run(["bash", "-c", 'eval "$1"; sinfo -h -o %D', "_", env], env=clean,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert evaluated.returncode == 0 and evaluated.stdout.strip() == "2", evaluated.stderr
    via_exec = cluster.sim("exec", "--", "sinfo", "-h", "-o", "%D", check=True)
    assert via_exec.stdout.strip() == "2"


def test_list_json_shows_it_running(cluster):
    listing = json.loads(run_cli(["list", "--json"], cluster.home, check=True).stdout)
    mine = [c for c in listing if c["name"] == cluster.name]
    assert len(mine) == 1, listing
    assert mine[0]["backend"] == cluster.backend and mine[0]["status"] == "running" and mine[0]["nodes"] == 2


def test_verify_basic_has_the_same_checks_and_all_pass(cluster):
    proc = cluster.sim("verify", "--suite", "basic", "--json", timeout=600)
    report = json.loads(proc.stdout)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    # What a backend cannot give here (an unprivileged docker cluster enforces no cgroup
    # limit) is a SKIP that names the reason status gives, never a silent difference.
    st = json.loads(cluster.sim("status", "--json", check=True).stdout)
    failed = not_passed(report["checks"], st["node_cgroups"])
    assert proc.returncode == 0 and not failed, f"{failed}\n{proc.stderr[-2000:]}"
    assert list(statuses) == BASIC_CHECKS
    assert report["passed"] is True and report["cluster"] == cluster.name
