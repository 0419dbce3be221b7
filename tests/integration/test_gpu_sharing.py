"""MIG, shards and MPS on a local fake-GPU cluster with real Slurm daemons: Slurm schedules
the typed MIG GPUs, shards and MPS shares of the spec's mig/shards/mps keys as it does in
production, and jobs see what production jobs see (CUDA_VISIBLE_DEVICES with MIG UUIDs,
SLURM_SHARDS_ON_NODE, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, their MIG device in nvidia-smi).

A cluster of two nodes: one cut into MIG instances, one with shards; and a one-node cluster
with MPS (Slurm shares no MIG instance, and Slurm 22.05 computes an MPS job's percentage from
the shard counts when a cluster has both: docs/gpus.md#mig-shards-and-mps)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import module_cluster
from tests.integration.test_local_cluster import wait_job

pytestmark = pytest.mark.integration

SPEC = """\
apiVersion: simcluster/v1
kind: Cluster
fakeGpus: true
gpuType: h100
nodes:
  - {name: node1, gpus: [0, 1], mig: "3g.40gb:1,2g.20gb:1,1g.10gb:2"}
  - {name: node2, gpus: [2], shards: 4}
"""
MPS_SPEC = """\
apiVersion: simcluster/v1
kind: Cluster
fakeGpus: true
gpuType: h100
nodes:
  - {name: node1, gpus: [0], mps: 100}
"""
# MIG alone in a cluster: gres.conf's MIG lines take MultipleFiles= (parent GPU + nvidia-caps).
MIG_ONLY_SPEC = """\
apiVersion: simcluster/v1
kind: Cluster
fakeGpus: 1
mig: "3g.40gb:2"
nodes: 1
"""
MIG_UUID = r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _spec_cluster(tmp_path_factory, name: str, spec_text: str):
    """A module cluster made from ``spec_text`` (a spec file of its own), named ``name``."""
    spec = tmp_path_factory.mktemp(name) / f"{name}.yaml"
    spec.write_text(spec_text)
    return module_cluster(name, "--config", str(spec))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with _spec_cluster(tmp_path_factory, "mig1", SPEC) as c:
        yield c


@pytest.fixture(scope="module")
def mps_cluster(tmp_path_factory):
    with _spec_cluster(tmp_path_factory, "mig1mps", MPS_SPEC) as c:
        yield c


@pytest.fixture(scope="module")
def mig_only_cluster(tmp_path_factory):
    with _spec_cluster(tmp_path_factory, "mig1only", MIG_ONLY_SPEC) as c:
        yield c


def submit(cluster, path: Path, body: str) -> str:
    out = path.with_suffix(".out")
    path.write_text(f"#!/bin/bash\n#SBATCH --output={out}\n" + textwrap.dedent(body).lstrip())
    return cluster.run(["sbatch", "--parsable", str(path)]).stdout.strip()


def finished(cluster, path: Path, job_id: str, timeout: float = 60) -> str:
    out = path.with_suffix(".out")
    assert wait_job(cluster, job_id, timeout) == "COMPLETED", out.read_text() if out.exists() else job_id
    return out.read_text()


def test_the_nodes_advertise_typed_mig_gpus_shards_and_mps(cluster):
    gres = cluster.run(["sinfo", "-h", "-N", "-o", "%N %G"]).stdout.split("\n")
    assert "node1 gpu:1g.10gb:4,gpu:2g.20gb:2,gpu:3g.40gb:2" in gres, gres
    # Slurm types the shards by the GPU they are on (File= of a typed gpu).
    assert "node2 gpu:h100:1,shard:h100:4" in gres, gres


def test_a_mig_job_gets_its_instance_and_sees_it_in_nvidia_smi(cluster, tmp_path):
    script = tmp_path / "mig.sh"
    text = finished(cluster, script, submit(cluster, script, """
        #SBATCH --gres=gpu:3g.40gb:1
        echo "host=$(hostname) cvd=$CUDA_VISIBLE_DEVICES"
        nvidia-smi -L
        nvidia-smi mig -lgi
    """))
    print(text)
    lines = text.splitlines()
    assert re.fullmatch(f"host=node1 cvd=({MIG_UUID})", lines[0]), text
    uuid = lines[0].split("cvd=")[1]
    assert re.fullmatch(r"GPU \d: NVIDIA H100 80GB HBM3 \(UUID: GPU-[0-9a-f-]+\)", lines[1]), text
    # Its one MIG device, the one CUDA_VISIBLE_DEVICES names, under its GPU; no other.
    assert re.fullmatch(rf"  MIG 3g\.40gb     Device  \d: \(UUID: {uuid}\)", lines[2]), text
    assert sum("MIG " in line and "Device" in line for line in lines) == 1, text
    rows = [line for line in lines if re.match(r"\|\s+\d\s+MIG ", line)]
    assert len(rows) == 1 and "3g.40gb" in rows[0] and rows[0].split()[4] == "9", text  # profile id 9


def test_two_shard_jobs_share_one_gpu_at_once(cluster, tmp_path):
    ids, paths = [], []
    for i in range(2):
        path = tmp_path / f"shard{i}.sh"
        paths.append(path)
        # Each waits until both run: they say so only if Slurm ran them side by side. Slurm
        # may start the second one only at its next scheduling pass (up to a minute on a
        # loaded machine), so the wait is long; on failure the job prints the queue.
        ids.append(submit(cluster, path, f"""
            #SBATCH --gres=shard:1 --job-name=shard{i} --mem=100M
            echo "host=$(hostname) shards=$SLURM_SHARDS_ON_NODE"
            for _ in $(seq 300); do
              [ "$(squeue -h -t R -n shard0,shard1 | wc -l)" = 2 ] && {{ echo both-running; exit 0; }}
              sleep 0.5
            done
            squeue -h -o "%i %j %T %r"
        """))
    texts = [finished(cluster, p, j, timeout=240) for p, j in zip(paths, ids)]
    print(*texts, sep="")
    for text in texts:
        assert text.splitlines() == ["host=node2 shards=1", "both-running"], text


def test_an_mps_job_sees_its_share_of_the_gpu(mps_cluster, tmp_path):
    script = tmp_path / "mps.sh"
    assert mps_cluster.run(["sinfo", "-h", "-o", "%G"]).stdout.strip() == "gpu:h100:1,mps:h100:100"
    text = finished(mps_cluster, script, submit(mps_cluster, script, """
        #SBATCH --gres=mps:50
        echo "host=$(hostname) mps=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
    """))
    print(text)
    assert text.splitlines() == ["host=node1 mps=50"], text


def test_mig_lines_with_multiple_files_schedule_too(mig_only_cluster, tmp_path):
    gres = (mig_only_cluster.root / "etc" / "gres.conf").read_text()
    assert gres.count("Type=3g.40gb MultipleFiles=") == 2 and "/nvidia-caps/nvidia-cap12" in gres, gres
    script = tmp_path / "both.sh"
    text = finished(mig_only_cluster, script, submit(mig_only_cluster, script, """
        #SBATCH --gres=gpu:3g.40gb:2
        echo "cvd=$CUDA_VISIBLE_DEVICES"
        nvidia-smi -L
    """))
    print(text)
    lines = text.splitlines()
    assert re.fullmatch(f"cvd={MIG_UUID},{MIG_UUID}", lines[0]), text
    assert sum(line.startswith("  MIG 3g.40gb ") for line in lines) == 2, text
