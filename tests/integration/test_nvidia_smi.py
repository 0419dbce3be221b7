"""nvidia-smi on a local fake-GPU cluster with real Slurm daemons: jobs find simcluster's
shim on PATH (the TaskProlog puts it there: the test's own PATH does not have it) and see
their step's GPUs with the model name of the spec's gpuType."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from provisioner.cluster.services import fakegpus
from tests.conftest import run_cli
from tests.integration.test_local_cluster import wait_job

pytestmark = pytest.mark.integration

SPEC = """\
apiVersion: simcluster/v1
kind: Cluster
nodes: 2
fakeGpus: 4
gpuType: h100
"""
UUID_RE = r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def sbatch(cluster, path: Path, body: str) -> str:
    """Run a batch script to its end; return its output."""
    out = path.with_suffix(".out")
    path.write_text(f"#!/bin/bash\n#SBATCH --output={out}\n" + textwrap.dedent(body).lstrip())
    job_id = cluster.run(["sbatch", "--parsable", str(path)]).stdout.strip()
    assert wait_job(cluster, job_id) == "COMPLETED", out.read_text() if out.exists() else job_id
    return out.read_text()


@pytest.fixture
def h100_cluster(make_cluster, tmp_path):
    spec = tmp_path / "h100.yaml"
    spec.write_text(SPEC)
    return make_cluster("--config", str(spec))


def test_jobs_see_their_gpus_in_nvidia_smi(h100_cluster, tmp_path):
    c = h100_cluster
    text = sbatch(c, tmp_path / "gpus.sh", """
        #SBATCH --nodes=2 --gres=gpu:2
        echo "which=$(command -v nvidia-smi)"
        nvidia-smi -L | sed 's/^/L: /'
        nvidia-smi --query-gpu=index,name --format=csv,noheader | sed 's/^/Q: /'
        nvidia-smi | grep "NVIDIA H100" | sed 's/^/T: /'
        nvidia-smi dmon -c 1 | sed 's/^/D: /'
        srun --ntasks-per-node=1 --label nvidia-smi -L | sed 's/^/S: /'
        srun --nodes=1 --gres=gpu:1 nvidia-smi --query-gpu=index,uuid --format=csv,noheader | sed 's/^/ONE: /'
    """)
    lines = text.splitlines()

    def tagged(tag: str):
        return [line[len(tag) + 2:] for line in lines if line.startswith(tag + ": ")]
    # Found through the TaskProlog: this test's PATH has no nvidia-smi of the cluster's.
    assert f"which={fakegpus.shim_path(c.root / 'etc')}" in lines, text
    assert [re.sub(UUID_RE, "U", line) for line in tagged("L")] == [
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: U)", "GPU 1: NVIDIA H100 80GB HBM3 (UUID: U)"], text
    assert tagged("Q") == ["0, NVIDIA H100 80GB HBM3", "1, NVIDIA H100 80GB HBM3"], text
    assert len(tagged("T")) == 2 and all("00000000:" in row for row in tagged("T")), text
    dmon = tagged("D")
    assert dmon[0].startswith("# gpu   pwr gtemp") and [row.split()[0] for row in dmon[2:]] == ["0", "1"], text
    # Each node's GPUs are its own: four different UUIDs over the two nodes.
    per_node = tagged("S")
    assert len(per_node) == 4 and len({re.search(UUID_RE, row).group(0) for row in per_node}) == 4, text
    assert {row.split(":")[0] for row in per_node} == {"0", "1"}  # srun --label: both tasks
    # A step given one of the job's GPUs sees that one only.
    assert len(tagged("ONE")) == 1, text


def test_a_job_without_gpus_finds_none_and_the_login_side_has_the_shim(h100_cluster, tmp_path):
    c = h100_cluster
    text = sbatch(c, tmp_path / "cpu.sh", """
        #SBATCH --nodes=1
        nvidia-smi -L; echo "rc=$?"
        nvidia-smi --query-gpu=name --format=csv; echo "rc=$?"
    """)
    assert text.splitlines() == ["No devices were found", "rc=6", "No devices were found", "rc=6"], text

    # `eval "$(simcluster env)"`: nvidia-smi on the login side too; a node's GPUs on request.
    env_out = run_cli(["env", "--name", c.name], c.home, check=True).stdout
    shim_dir = fakegpus.shim_dir(c.root / "etc")
    assert f'export PATH={shim_dir}:"$PATH"' in env_out
    node = c.run(["env", "SLURMD_NODENAME=node2", str(shim_dir / "nvidia-smi"), "-L"])
    assert len(node.stdout.splitlines()) == 2 and "NVIDIA H100 80GB HBM3" in node.stdout
