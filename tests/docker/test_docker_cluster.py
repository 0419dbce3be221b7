"""The docker backend with a real dockerd: image from nothing, clusters of containers, cleanup."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.integration
LABEL = "io.simcluster.cluster"


def docker_ids(*filters: str) -> list:
    args = ["docker", "ps", "-aq"] + [a for f in filters for a in ("--filter", f)]
    return subprocess.run(args, stdout=subprocess.PIPE, text=True, check=True).stdout.split()


def networks(name: str) -> list:
    return subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label={LABEL}={name}"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.split()


@pytest.fixture
def docker_cluster(sim_home):
    """Factory for docker clusters that are always removed."""
    made = []

    def _make(*args: str) -> str:
        name = f"d{uuid.uuid4().hex[:6]}"
        made.append(name)
        run_cli(["up", "--backend", "docker", "--name", name, *args], sim_home, check=True, timeout=900)
        return name

    yield _make
    for name in made:
        run_cli(["down", "--name", name], sim_home)
        assert docker_ids(f"label={LABEL}={name}") == [], f"containers of {name} left behind"
        assert networks(name) == [], f"network of {name} left behind"


def test_image_build_is_cached(sim_home):
    first = run_cli(["image", "build"], sim_home, check=True, timeout=1200)
    tag = first.stdout.split()[1]
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], stdout=subprocess.PIPE,
                              text=True, check=True).stdout.strip()
    again = run_cli(["image", "build"], sim_home, check=True, timeout=600)
    assert "debootstrap" not in again.stderr  # the base is not rebuilt
    assert subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip() == image_id


def test_docker_cluster_runs_jobs_and_resolves_node_names(docker_cluster, sim_home):
    name = docker_cluster("--nodes", "2", "--fake-gpus", "2")
    ids = docker_ids(f"label={LABEL}={name}")
    assert len(ids) == 3  # controller + 2 nodes
    inspect = json.loads(subprocess.run(["docker", "inspect", *ids], stdout=subprocess.PIPE, text=True).stdout)
    assert sorted(c["Config"]["Hostname"] for c in inspect) == ["node1", "node2", "slurmctld"]
    assert not any(c["HostConfig"]["Privileged"] for c in inspect)

    out = run_cli(["exec", "--name", name, "--", "srun", "-N2", "--gres=gpu:1", "bash", "-c",
                   "echo $(hostname):$CUDA_VISIBLE_DEVICES"], sim_home, check=True)
    # Each container sees only its own GPU, so index 0 inside is that node's GPU.
    assert sorted(out.stdout.split()) == ["node1:0", "node2:0"]

    job = ("#!/bin/bash\n#SBATCH -N2 --output=/shared/rdzv-%j.out\n"
           "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
           "echo master=$MASTER_ADDR\n"
           "srun bash -c 'getent hosts $MASTER_ADDR >/dev/null && echo $(hostname) resolves $MASTER_ADDR'\n")
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

    listing = run_cli(["list"], sim_home, check=True).stdout
    assert name in listing and "docker" in listing

    bundle = sim_home / "bundle"
    run_cli(["export-logs", str(bundle), "--name", name], sim_home, check=True)
    assert (bundle / "docker-inspect.json").exists()
    assert (bundle / "containers" / f"simcluster-{name}-ctl.log").exists()
    assert "NodeName=node2" in (bundle / "scontrol-show-node.txt").read_text()


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


def test_docker_up_failure_cleans_up(sim_home):
    name = f"d{uuid.uuid4().hex[:6]}"
    spec = sim_home / "bad.yaml"
    spec.write_text(f"apiVersion: simcluster/v1\nkind: Cluster\nname: {name}\nbackend: docker\nnodes: 1\n"
                    "slurmConf: ['NoSuchSlurmOption=1']\n")
    proc = run_cli(["up", "--config", str(spec), "--wait", "20"], sim_home, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert docker_ids(f"label={LABEL}={name}") == [] and networks(name) == []
    assert not (sim_home / name).exists()
