"""The docker backend with a real dockerd: image from nothing, clusters of containers, cleanup.

What every backend must do the same is in tests/contract; here: what is particular to docker.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid

import pytest

from tests.conftest import run_cli
from tests.docker.conftest import LABEL, daemon_counts, docker_ids, networks

pytestmark = pytest.mark.integration


def test_image_build_is_cached(sim_home):
    first = run_cli(["image", "build"], sim_home, check=True, timeout=1200)
    tag = first.stdout.split()[1]
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], stdout=subprocess.PIPE,
                              text=True, check=True).stdout.strip()
    again = run_cli(["image", "build"], sim_home, check=True, timeout=600)
    assert "debootstrap" not in again.stderr  # the base is not rebuilt
    assert subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip() == image_id


def test_up_rebuilds_a_default_image_built_from_other_docker_files(sim_home):
    # An image built by an older simcluster has another entrypoint: `up` must not use it
    # with this version's configs. Relabel the default image as such an image.
    from provisioner.providers.docker.image import LABEL_CONTEXT, default_image, image_is_current
    tag = default_image()
    run_cli(["image", "build", *(["--train"] if tag.endswith("-train") else [])], sim_home, check=True, timeout=1200)
    stale = subprocess.run(["docker", "build", "-q", "-t", tag, "--label", f"{LABEL_CONTEXT}=older", "-"],
                           input=f"FROM {tag}\n", stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    name = f"d{uuid.uuid4().hex[:6]}"
    try:
        assert not image_is_current(tag)
        proc = run_cli(["up", "--backend", "docker", "--name", name, "--nodes", "1"], sim_home, timeout=900)
        assert proc.returncode == 0, proc.stderr
        assert "built from older build files: rebuilding it" in proc.stderr
        assert image_is_current(tag)
        ctl = subprocess.run(["docker", "inspect", "-f", "{{.Image}}", f"simcluster-{name}-ctl"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
        assert ctl != stale
    finally:
        run_cli(["down", "--name", name], sim_home)
        subprocess.run(["docker", "rmi", stale], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert docker_ids(f"label={LABEL}={name}") == []


def test_docker_cluster_runs_jobs_and_resolves_node_names(docker_cluster, sim_home):
    name = docker_cluster("--nodes", "2", "--fake-gpus", "2")
    ids = docker_ids(f"label={LABEL}={name}")
    assert len(ids) == 3  # controller + 2 nodes
    inspect = json.loads(subprocess.run(["docker", "inspect", *ids], stdout=subprocess.PIPE, text=True).stdout)
    assert sorted(c["Config"]["Hostname"] for c in inspect) == ["node1", "node2", "slurmctld"]
    assert not any(c["HostConfig"]["Privileged"] for c in inspect)
    # Each container started its own daemons at its first start (docs/docker.md: its boot),
    # and `up` adopted them: each daemon runs once, with the pid the state records.
    assert daemon_counts(f"simcluster-{name}-ctl") == {"munged": 1, "slurmctld": 1}
    for node in ("node1", "node2"):
        assert daemon_counts(f"simcluster-{name}-{node}") == {"munged": 1, "slurmd": 1}
    pids = json.loads((sim_home / name / "state.json").read_text())["pids"]
    booted = subprocess.run(["docker", "exec", f"simcluster-{name}-ctl", "sh", "-c",
                             "cat /run/simcluster-boot/*.pid"], stdout=subprocess.PIPE, text=True).stdout.split()
    assert sorted(booted) == sorted([str(pids["munged"]), str(pids["slurmctld"])])

    out = run_cli(["exec", "--name", name, "--", "srun", "-N2", "--gres=gpu:1", "bash", "-c",
                   "echo $(hostname):$CUDA_VISIBLE_DEVICES"], sim_home, check=True)
    # Each container sees only its own GPU, so index 0 inside is that node's GPU.
    assert sorted(out.stdout.split()) == ["node1:0", "node2:0"]
    # ... and simcluster's nvidia-smi shows it: one GPU per node, two different UUIDs.
    smi = run_cli(["exec", "--name", name, "--", "srun", "-N2", "--gres=gpu:1", "nvidia-smi", "-L"], sim_home,
                  check=True)
    assert smi.stdout.count("GPU 0: NVIDIA Simulated GPU (UUID: GPU-") == 2, smi.stdout
    assert len(set(re.findall(r"GPU-[0-9a-f-]{36}", smi.stdout))) == 2, smi.stdout

    job = ("#!/bin/bash\n#SBATCH -N2 --output=/shared/rdzv-%j.out\n"
           "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
           "echo master=$MASTER_ADDR\n"
           "srun bash -c 'getent hosts $MASTER_ADDR >/dev/null && echo $(hostname) resolves $MASTER_ADDR'\n"
           # Without SLURM_CONF, Slurm's commands find the cluster's config at /etc/slurm, as on a
           # production node (tools that clear the job's Slurm variables rely on that).
           "env -u SLURM_CONF srun -n1 hostname | sed 's/^/no-SLURM_CONF srun on /'\n"
           "env -u SLURM_CONF scontrol show config | grep ClusterName\n")
    status = json.loads(run_cli(["status", "--name", name, "--json"], sim_home, check=True).stdout)
    assert status["healthy"] and status["backend"] == "docker"
    shared = sim_home / name / "shared"
    assert status["shared_dir"] == str(shared)
    (shared / "job.sh").write_text(job)
    sub = run_cli(["exec", "--name", name, "--", "sbatch", "--wait", "--parsable", "job.sh"], sim_home, check=True)
    job_id = sub.stdout.strip().split(";")[0]
    text = (shared / f"rdzv-{job_id}.out").read_text()
    assert "master=node1" in text
    assert "node1 resolves node1" in text and "node2 resolves node1" in text
    assert "no-SLURM_CONF srun on node1" in text, text
    assert re.search(rf"^ClusterName\s*=\s*{name}$", text, re.M), text
    assert status["node_etc_slurm"].startswith("the cluster's config"), status

    bundle = sim_home / "bundle"
    run_cli(["export-logs", str(bundle), "--name", name], sim_home, check=True)
    assert (bundle / "docker-inspect.json").exists()
    assert (bundle / "containers" / f"simcluster-{name}-ctl.log").exists()
    # Each container runs its own munged: its log is in the bundle too (the rest: tests/contract).
    assert (bundle / "logs" / "munged-node2.log").is_file()


def test_two_docker_clusters_side_by_side_and_down_removes_only_its_own(docker_cluster, sim_home):
    a = docker_cluster("--nodes", "2")
    b = docker_cluster("--nodes", "2")
    bystander = subprocess.run(["docker", "create", "--label", "purpose=simcluster-test-bystander",
                                "simcluster/node:0.1.0", "node"], stdout=subprocess.PIPE, text=True,
                               check=True).stdout.strip()
    try:
        run_cli(["down", "--name", a], sim_home, check=True)
        assert docker_ids(f"label={LABEL}={a}") == [] and networks(a) == []
        assert len(docker_ids(f"label={LABEL}={b}")) == 3
        assert docker_ids("label=purpose=simcluster-test-bystander") == [bystander[:12]]
        out = run_cli(["exec", "--name", b, "--", "srun", "-N2", "hostname"], sim_home, check=True)
        assert sorted(out.stdout.split()) == ["node1", "node2"]
    finally:
        subprocess.run(["docker", "rm", "-f", bystander], stdout=subprocess.DEVNULL)


def _sacct_rows(name: str, sim_home, job_ids) -> dict:
    """{job id: (state, exit code)} for the jobs' allocations, once sacct has all of them."""
    rows = {}
    for _ in range(120):  # records can trail a job's end by a second or so
        out = run_cli(["exec", "--name", name, "--", "sacct", "-n", "-P", "-X", "-j", ",".join(job_ids),
                       "--format=JobID,State,ExitCode"], sim_home, check=True).stdout
        rows = {f[0]: (f[1], f[2]) for f in (line.split("|") for line in out.splitlines()) if len(f) == 3}
        if all(j in rows and rows[j][0] in ("COMPLETED", "FAILED") for j in job_ids):
            break
        time.sleep(0.5)
    return rows


def test_docker_cluster_with_accounting(docker_cluster, sim_home, tmp_path):
    """slurmdbd + MariaDB in the controller container: sacct knows every job's end, verify's
    basic.accounting passes, status and export-logs report it."""
    name = docker_cluster("--nodes", "2", "--accounting")
    status = json.loads(run_cli(["status", "--name", name, "--json"], sim_home, check=True).stdout)
    assert status["healthy"] and status["accounting"]["enabled"], status
    assert status["accounting"]["registered"] and status["accounting"]["slurmdbd"]["alive"]

    ok = run_cli(["exec", "--name", name, "--", "sbatch", "--wait", "--parsable", "-N2", "--wrap", "srun true"],
                 sim_home, check=True).stdout.strip()
    bad = run_cli(["exec", "--name", name, "--", "sbatch", "--wait", "--parsable", "--wrap", "exit 3"], sim_home)
    assert bad.returncode == 3, bad.stderr  # sbatch --wait exits with the job's exit code
    bad_id = bad.stdout.strip()
    rows = _sacct_rows(name, sim_home, [ok, bad_id])
    assert rows.get(ok) == ("COMPLETED", "0:0") and rows.get(bad_id) == ("FAILED", "3:0"), rows
    assoc = run_cli(["exec", "--name", name, "--", "sacctmgr", "-n", "-P", "show", "assoc", "format=Cluster,Account,User"],
                    sim_home, check=True).stdout
    assert f"{name}|simcluster|root" in assoc

    report = run_cli(["verify", "--name", name, "--suite", "basic", "--json"], sim_home, timeout=600)
    checks = {c["name"]: c for c in json.loads(report.stdout)["checks"]}
    assert checks["basic.accounting"]["status"] == "PASS", checks["basic.accounting"]
    failed = {n: (c["message"], c["first_error"], c["tail"][-800:]) for n, c in checks.items() if c["status"] == "FAIL"}
    assert report.returncode == 0, f"{failed}\n{report.stderr[-2000:]}"

    bundle = tmp_path / "bundle"
    run_cli(["export-logs", str(bundle), "--name", name], sim_home, check=True)
    for log in ("slurmdbd.log", "mariadbd.log", "slurmctld.log", "slurmd-node1.log", "munged.log", "munged-node1.log"):
        assert (bundle / "logs" / log).is_file(), log
    assert name in (bundle / "sacctmgr-show-cluster.txt").read_text()
    # The database password stays out of the bug report.
    assert "StoragePass=<redacted>" in (bundle / "config" / "slurmdbd.conf").read_text()
    password = [ln.split("=", 1)[1] for ln in (sim_home / name / "etc" / "slurmdbd.conf").read_text().splitlines()
                if ln.startswith("StoragePass=")][0]
    assert not [p for p in bundle.rglob("*") if p.is_file() and password in p.read_text(errors="replace")]
