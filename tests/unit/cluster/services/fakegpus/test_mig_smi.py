"""The nvidia-smi shim on fake MIG GPUs: fake-gpus.json's "mig" entries, `-L` with the MIG
devices under their GPU, `nvidia-smi mig -lgi`, and a job's view (only its MIG devices, by
Slurm's indices on the node)."""

from __future__ import annotations

import json
import re

import pytest

from tests.unit.cluster.services.fakegpus.test_nvidia_smi import in_job, smi
from tests.unit.cluster.services.fakegpus.conftest import installed

MIG_RE = r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture
def config_dir(tmp_path):
    """node1: two H100s cut into 3g.40gb + 2g.20gb + 2x 1g.10gb; node2: one plain GPU."""
    return installed(tmp_path, {"name": "prod", "fakeGpus": True, "gpuType": "h100", "nodes": [
        {"name": "node1", "gpus": [0, 1], "mig": "3g.40gb:1,2g.20gb:1,1g.10gb:2"}, {"name": "node2", "gpus": [2]}]})


def test_fake_gpus_json_holds_each_gpus_mig_devices(config_dir):
    nodes = json.loads((config_dir / "fake-gpus.json").read_text())["nodes"]
    assert "mig" not in nodes["node2"]
    mig = nodes["node1"]["mig"]
    assert sorted(mig) == ["0", "1"]
    assert [(m["profile"], m["gi"]) for m in mig["0"]] == [("1g.10gb", 3), ("1g.10gb", 4), ("2g.20gb", 2),
                                                          ("3g.40gb", 1)]
    uuids = [m["uuid"] for ms in mig.values() for m in ms]
    assert len(set(uuids)) == 8 and all(re.fullmatch(MIG_RE, u) for u in uuids)


def test_list_shows_mig_devices_under_their_gpu(config_dir):
    out = smi(config_dir, "-L", SLURMD_NODENAME="node1")
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == 10
    assert lines[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert re.fullmatch(rf"  MIG 1g\.10gb     Device  0: \(UUID: {MIG_RE}\)", lines[1]), lines
    assert re.fullmatch(rf"  MIG 3g\.40gb     Device  3: \(UUID: {MIG_RE}\)", lines[4]), lines
    assert lines[5].startswith("GPU 1: ")


def test_a_job_sees_only_its_mig_devices(config_dir):
    # Slurm's indices on node1: 1g.10gb x4 (0-3), 2g.20gb x2 (4-5), 3g.40gb x2 (6-7).
    out = smi(config_dir, "-L", **in_job(SLURM_STEP_GPUS="7"))
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("GPU 1: ") and "MIG 3g.40gb" in lines[1], lines
    out = smi(config_dir, "-L", **in_job(SLURM_STEP_GPUS="2,4"))
    assert [line.split()[0:3] for line in out.stdout.splitlines()] == [
        ["GPU", "0:", "NVIDIA"], ["MIG", "2g.20gb", "Device"], ["GPU", "1:", "NVIDIA"], ["MIG", "1g.10gb", "Device"]]


def test_mig_lgi_lists_the_gpu_instances(config_dir):
    out = smi(config_dir, "mig", "-lgi", **in_job(SLURM_STEP_GPUS="6"))
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and all(len(line) == 57 for line in lines), lines
    assert lines[1] == "| GPU instances:                                        |"
    assert lines[5] == "|   0  MIG 3g.40gb          9        1          4:4     |"
    assert len(lines) == 7
    whole = smi(config_dir, "mig", "-lgi", SLURMD_NODENAME="node1")
    assert whole.stdout.count("MIG ") == 8


def test_gpus_without_mig_say_so(config_dir):
    out = smi(config_dir, "mig", "-lgi", SLURMD_NODENAME="node2")
    assert out.returncode == 6 and out.stdout == "No MIG-enabled devices found.\n"
    out = smi(config_dir, "--query-gpu=index,mig.mode.current", "--format=csv,noheader", SLURMD_NODENAME="node2")
    assert out.stdout == "0, Disabled\n"
    out = smi(config_dir, "--query-gpu=index,mig.mode.current", "--format=csv,noheader", SLURMD_NODENAME="node1")
    assert out.stdout == "0, Enabled\n1, Enabled\n"


def test_mig_forms_that_change_the_layout_are_refused(config_dir):
    out = smi(config_dir, "mig", "-cgi", "9", SLURMD_NODENAME="node1")
    assert out.returncode == 2 and "the MIG layout is the cluster spec's mig key" in out.stderr
