"""`simcluster verify` and `simcluster test` on docker clusters, training suites included.

The training image (`image build --train`) carries the host's CPU torch wheel, DeepSpeed and
megatron-core; every suite must PASS in containers (not SKIP, but for the cgroup limits an
unprivileged container cannot enforce, which status names).
"""

from __future__ import annotations

import json
import uuid
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import not_passed, run_cli
from tests.docker.conftest import LABEL, docker_ids, networks

pytestmark = pytest.mark.integration

ALL_CHECKS = {"basic.controller", "basic.nodes", "basic.srun-env", "basic.gpus", "basic.sbatch-output",
              "basic.array", "basic.dependency", "signals.time-limit", "basic.requeue",
              "basic.mpi", "basic.container", "basic.cpus-per-task", "basic.gpus-per-task", "basic.isolation",
              "basic.limits", "rest.api", "ddp.train", "fsdp.train", "deepspeed.zero3", "megatron.tp2"}


@pytest.fixture(scope="module")
def train_image(tmp_path_factory):
    home = tmp_path_factory.mktemp("train-image")
    proc = run_cli(["image", "build", "--train"], home, check=True, timeout=1800)
    tag = proc.stdout.split()[1]
    assert tag.endswith("-train"), proc.stdout
    return tag


def test_verify_all_passes_on_a_docker_cluster(train_image, docker_cluster, sim_home, tmp_path):
    # --rest: verify all then runs rest.api too (slurmrestd of 22.05 in the controller container).
    name = docker_cluster("--nodes", "2", "--fake-gpus", "2", "--image", train_image, "--rest")
    junit = tmp_path / "verify.xml"
    proc = run_cli(["verify", "--name", name, "--suite", "all", "--json", "--junit", str(junit)], sim_home,
                   timeout=900)
    report = json.loads(proc.stdout)
    by_name = {c["name"]: c for c in report["checks"]}
    # Unprivileged containers enforce no cgroup limit: those checks SKIP with status's reason.
    st = json.loads(run_cli(["status", "--name", name, "--json"], sim_home, check=True).stdout)
    bad = not_passed(report["checks"], st["node_cgroups"])
    assert proc.returncode == 0 and not bad, f"{bad}\nstderr:\n{proc.stderr[-3000:]}"
    assert set(by_name) == ALL_CHECKS
    assert "verifying docker cluster" in proc.stderr
    # In containers each node holds only its own GPU, numbered from 0.
    assert "node1=0 node2=0" in by_name["basic.gpus"]["message"]
    for check in ("ddp.train", "fsdp.train", "deepspeed.zero3", "megatron.tp2"):
        placement = by_name[check]["data"]["placement"]
        assert sorted(p["node"] for p in placement) == ["node1", "node2"], placement
    # Job files went to the shared directory, where the host can read them.
    assert by_name["ddp.train"]["output"].startswith(str(sim_home / name / "shared" / "verify"))
    suites = ET.parse(junit).getroot()
    assert int(suites.get("tests")) == len(ALL_CHECKS) and int(suites.get("failures")) == 0

    # A training job that crashes in a container is a FAIL with the failing rank's error.
    broken = run_cli(["verify", "--name", name, "--suite", "ddp", "--json"], sim_home, timeout=600,
                     env={"SIMCLUSTER_VERIFY_BREAK": "ddp:crash"})
    assert broken.returncode == 1, broken.stderr
    ddp = {c["name"]: c for c in json.loads(broken.stdout)["checks"]}["ddp.train"]
    assert ddp["status"] == "FAIL" and "RuntimeError" in ddp["first_error"], ddp


def test_simcluster_test_on_the_docker_backend_leaves_nothing(train_image, sim_home):
    name = f"t{uuid.uuid4().hex[:6]}"
    proc = run_cli(["test", "--backend", "docker", "--image", train_image, "--name", name, "--nodes", "2",
                    "--suite", "ddp"], sim_home, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ddp.train" in proc.stdout and "PASS" in proc.stdout
    assert "simcluster test: passed" in proc.stdout
    assert docker_ids(f"label={LABEL}={name}") == [] and networks(name) == []
    assert not (sim_home / name).exists()
