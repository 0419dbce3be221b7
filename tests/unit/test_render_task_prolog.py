"""The rendered TaskProlog (configs/templates via provisioner/render.py) that maps node-local
GPU indices to physical GPU ids (pitfall 1), executed with /bin/sh in crafted environments."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from provisioner.config import load_spec
from provisioner.render import render_all
from tests.conftest import REPO
from tests.unit.conftest import NSS_LIB, fixed_inputs, spec_from


# -- the TaskProlog ---------------------------------------------------------------------

EXPORT_RE = re.compile(r"^export [A-Za-z_][A-Za-z0-9_]*=\S*$")


def prolog_for(tmp_path: Path, spec, nss: Optional[str] = NSS_LIB, root: str = "/state/x") -> Path:
    path = tmp_path / "task_prolog.sh"
    path.write_text(render_all(spec, fixed_inputs(spec, root=root, nss=nss))["task_prolog.sh"])
    return path


def run_prolog(prolog: Path, **env: str) -> Dict[str, str]:
    """Run the prolog as slurmd would (sh, a job's environment); return what it exports.

    Every line must be ``export K=V``: slurmd copies anything else into the job's output.
    """
    full = {"PATH": "/usr/bin:/bin"}
    full.update(env)
    proc = subprocess.run(["/bin/sh", str(prolog)], env=full, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines, "the prolog printed nothing"
    bad = [line for line in lines if not EXPORT_RE.match(line)]
    assert not bad, f"lines that are not 'export K=V': {bad}"
    exports: Dict[str, str] = {}
    for line in lines:
        key, _, value = line[len("export "):].partition("=")
        assert key not in exports, f"{key} exported twice"
        exports[key] = value
    return exports


@pytest.fixture
def seed_prolog(tmp_path) -> Path:
    spec = load_spec(str(REPO / "configs/examples/node6-node7-one-gpu-each.yaml"), cpus=2, memory_mb=2000)
    return prolog_for(tmp_path, spec, root="/state/seed")


@pytest.fixture
def two_per_node_prolog(tmp_path) -> Path:
    """--nodes 2 --gpus 4-7: node1 owns 4,5 and node2 owns 6,7."""
    return prolog_for(tmp_path, spec_from({"nodes": 2, "gpus": "4-7", "fakeGpus": True}))


@pytest.mark.parametrize("node, physical", [("node6", "6"), ("node7", "7")])
def test_one_gpu_per_node_maps_local_zero_to_the_physical_id(seed_prolog, node, physical):
    # Slurm also set CUDA_VISIBLE_DEVICES=0 (the node-local index): the prolog overrides it.
    out = run_prolog(seed_prolog, SLURMD_NODENAME=node, SLURM_STEP_GPUS="0", CUDA_VISIBLE_DEVICES="0")
    assert out["CUDA_VISIBLE_DEVICES"] == physical
    assert out["SIMCLUSTER_PHYSICAL_GPUS"] == physical
    assert out["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_batch_step_uses_slurm_job_gpus(seed_prolog):
    out = run_prolog(seed_prolog, SLURMD_NODENAME="node7", SLURM_JOB_GPUS="0")
    assert out["CUDA_VISIBLE_DEVICES"] == "7"


def test_step_gpus_win_over_job_gpus(two_per_node_prolog):
    out = run_prolog(two_per_node_prolog, SLURMD_NODENAME="node2", SLURM_STEP_GPUS="1", SLURM_JOB_GPUS="0,1")
    assert out["CUDA_VISIBLE_DEVICES"] == "7"


def test_empty_step_gpus_fall_back_to_job_gpus(two_per_node_prolog):
    out = run_prolog(two_per_node_prolog, SLURMD_NODENAME="node2", SLURM_STEP_GPUS="", SLURM_JOB_GPUS="0")
    assert out["CUDA_VISIBLE_DEVICES"] == "6"


@pytest.mark.parametrize("node, local, physical", [
    ("node1", "0", "4"),
    ("node1", "1", "5"),
    ("node2", "0", "6"),
    ("node2", "1", "7"),
    ("node2", "0,1", "6,7"),
    ("node2", "1,0", "7,6"),
    ("node1", "0,1", "4,5"),
])
def test_two_gpus_per_node(two_per_node_prolog, node, local, physical):
    out = run_prolog(two_per_node_prolog, SLURMD_NODENAME=node, SLURM_STEP_GPUS=local)
    assert out["CUDA_VISIBLE_DEVICES"] == physical
    assert out["SIMCLUSTER_PHYSICAL_GPUS"] == physical


@pytest.mark.parametrize("node", ["node6", "node7"])
def test_no_gpu_allocated_sees_no_gpu(seed_prolog, node):
    out = run_prolog(seed_prolog, SLURMD_NODENAME=node, CUDA_VISIBLE_DEVICES="0")
    assert out["CUDA_VISIBLE_DEVICES"] == ""
    assert "SIMCLUSTER_PHYSICAL_GPUS" not in out and "CUDA_DEVICE_ORDER" not in out


def test_unknown_node_sees_no_gpu(seed_prolog):
    out = run_prolog(seed_prolog, SLURMD_NODENAME="node8", SLURM_STEP_GPUS="0")
    assert out["CUDA_VISIBLE_DEVICES"] == ""


def test_a_local_index_the_node_does_not_have_maps_to_nothing(two_per_node_prolog):
    # Never fall back to some other physical GPU (GPU 0 is exactly the bug being fixed).
    out = run_prolog(two_per_node_prolog, SLURMD_NODENAME="node1", SLURM_STEP_GPUS="2")
    assert out["CUDA_VISIBLE_DEVICES"] == ""


def test_cluster_without_gpus(tmp_path):
    prolog = prolog_for(tmp_path, spec_from({"nodes": 2}))
    out = run_prolog(prolog, SLURMD_NODENAME="node1", SLURM_STEP_GPUS="0")
    assert out["CUDA_VISIBLE_DEVICES"] == ""


def test_node_names_that_share_a_prefix(tmp_path):
    """node1 must not match node10..node12 (the case patterns are exact names)."""
    prolog = prolog_for(tmp_path, spec_from({"nodes": 12, "fakeGpus": 24}))
    for n in (1, 2, 10, 11, 12):
        out = run_prolog(prolog, SLURMD_NODENAME=f"node{n}", SLURM_STEP_GPUS="0,1")
        assert out["CUDA_VISIBLE_DEVICES"] == f"{2 * (n - 1)},{2 * (n - 1) + 1}"


def test_explicit_node_list_with_uneven_gpus(tmp_path):
    spec = spec_from({"nodes": [{"name": "big", "gpus": "0-3"}, {"name": "small", "gpus": [7]},
                                {"name": "cpu"}]})
    prolog = prolog_for(tmp_path, spec)
    assert run_prolog(prolog, SLURMD_NODENAME="big", SLURM_STEP_GPUS="1,3")["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert run_prolog(prolog, SLURMD_NODENAME="small", SLURM_STEP_GPUS="0")["CUDA_VISIBLE_DEVICES"] == "7"
    assert run_prolog(prolog, SLURMD_NODENAME="cpu", SLURM_STEP_GPUS="0")["CUDA_VISIBLE_DEVICES"] == ""


def test_name_resolution_and_marker_exports(seed_prolog):
    out = run_prolog(seed_prolog, SLURMD_NODENAME="node6")
    assert out["LD_PRELOAD"] == NSS_LIB
    assert out["NSS_WRAPPER_HOSTS"] == "/state/seed/etc/hosts"
    assert out["SIMCLUSTER_CLUSTER"] == "node6-node7"
    assert out["SIMCLUSTER_STATE_DIR"] == "/state/seed"


def test_an_existing_ld_preload_is_kept(seed_prolog):
    out = run_prolog(seed_prolog, SLURMD_NODENAME="node6", LD_PRELOAD="libm.so.6")  # a real library: sh loads it
    assert out["LD_PRELOAD"] == f"libm.so.6:{NSS_LIB}"


def test_without_nss_wrapper_there_is_no_preload(tmp_path):
    prolog = prolog_for(tmp_path, spec_from({"nodes": 2, "fakeGpus": 2}), nss=None)
    out = run_prolog(prolog, SLURMD_NODENAME="node2", SLURM_STEP_GPUS="0")
    assert out["CUDA_VISIBLE_DEVICES"] == "1"
    assert "LD_PRELOAD" not in out and "NSS_WRAPPER_HOSTS" not in out
    assert out["SIMCLUSTER_STATE_DIR"] == "/state/x"


def test_prolog_runs_with_an_almost_empty_environment(seed_prolog):
    """slurmd may give the prolog very little: no PATH beyond the basics, no SLURM_* at all."""
    out = run_prolog(seed_prolog)
    assert out["CUDA_VISIBLE_DEVICES"] == ""
    assert {"CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "NSS_WRAPPER_HOSTS", "SIMCLUSTER_CLUSTER",
            "SIMCLUSTER_STATE_DIR"} <= set(out)
    assert "SIMCLUSTER_PHYSICAL_GPUS" not in out


def _all_lines_for(prolog: Path, envs: List[Dict[str, str]]) -> None:
    for env in envs:
        run_prolog(prolog, **env)  # run_prolog asserts every line is `export K=V`


def test_only_export_lines_in_every_branch(two_per_node_prolog):
    _all_lines_for(two_per_node_prolog, [
        {},
        {"SLURMD_NODENAME": "node1"},
        {"SLURMD_NODENAME": "node1", "SLURM_STEP_GPUS": "0"},
        {"SLURMD_NODENAME": "node2", "SLURM_JOB_GPUS": "0,1"},
        {"SLURMD_NODENAME": "node9", "SLURM_STEP_GPUS": "0"},
        {"SLURMD_NODENAME": "node1", "SLURM_STEP_GPUS": "x"},
    ])
