"""Fake GPUs' nvidia-smi, the parts around the shim: GPU models by Slurm type
(provisioner/config/gpus.py), fake-gpus.json and the installed shim
(provisioner/cluster/services/fakegpus), where jobs find it (the TaskProlog, docker node
containers). The shim's own answers: test_fakegpus_shim.py."""

from __future__ import annotations

import json
import re
import stat
import zipfile
from pathlib import Path

import pytest
from setuptools import find_namespace_packages

from provisioner.cluster.services import fakegpus
from provisioner.config.gpus import GENERIC, MODELS, known_type, model_of
from provisioner.config.types import ClusterSpec
from provisioner.paths import ClusterLayout
from provisioner.providers.docker.node_containers import container_config
from provisioner.render import render_all
from tests.conftest import REPO
from tests.unit.conftest import fixed_inputs, spec_from
from tests.unit.test_render_task_prolog import run_prolog


# -- models --------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpu_type, name, memory", [
    ("h100", "NVIDIA H100 80GB HBM3", 81559),
    ("H100", "NVIDIA H100 80GB HBM3", 81559),
    ("h100_sxm5", "NVIDIA H100 80GB HBM3", 81559),
    ("h200", "NVIDIA H200", 143771),
    ("h800", "NVIDIA H800", 81559),
    ("a100", "NVIDIA A100-SXM4-80GB", 81920),
    ("a100-40g", "NVIDIA A100-SXM4-40GB", 40960),
    ("A100_40GB", "NVIDIA A100-SXM4-40GB", 40960),
    ("v100", "Tesla V100-SXM2-32GB", 32768),
    ("l40s", "NVIDIA L40S", 46068),
    ("l4", "NVIDIA L4", 23034),
    ("a10", "NVIDIA A10", 23028),
    ("t4", "Tesla T4", 15360),
    ("rtx4090", "NVIDIA GeForce RTX 4090", 24564),
])
def test_slurm_gpu_types_name_the_real_models(gpu_type, name, memory):
    model = model_of(gpu_type)
    assert (model.name, model.memory_mib) == (name, memory)


def test_unknown_or_no_type_is_generic_and_a_given_model_name_wins():
    assert known_type("mi300x") is None and model_of("mi300x") == GENERIC and model_of(None) == GENERIC
    assert GENERIC.name.startswith("NVIDIA ")  # `nvidia-smi | grep NVIDIA` still finds it
    # A known name keeps that card's numbers, whatever the type says.
    assert model_of("gpu", "NVIDIA H200").memory_mib == MODELS["h200"].memory_mib
    # An unknown name: its own memory size where it says one.
    custom = model_of("h100", "NVIDIA Custom 48GB")
    assert (custom.name, custom.memory_mib) == ("NVIDIA Custom 48GB", 48 * 1024)
    assert model_of(None, "Acme Accelerator").memory_mib == GENERIC.memory_mib


def test_every_model_reads_like_nvidia_smi():
    for key, model in MODELS.items():
        assert re.match(r"^(NVIDIA|Tesla) ", model.name), key
        assert 1024 <= model.memory_mib and 0 < model.idle_power_w < model.power_limit_w, key
        assert re.match(r"^\d+\.\d$", model.compute_cap), key
        assert known_type(key) is model


# -- fake-gpus.json and the installed shim -------------------------------------------------------

def typed_spec() -> ClusterSpec:
    return spec_from({"name": "prod", "fakeGpus": True, "nodes": [
        {"name": "gpu1", "gpus": [0, 1], "gpuType": "h100"},
        {"name": "gpu2", "gpus": [2, 3], "gpuType": "a100", "gpuModel": "NVIDIA A100 80GB PCIe"},
        {"name": "cpu1"}]})


def test_fake_gpus_json_has_every_gpu_node_with_its_model():
    data = json.loads(fakegpus.render_fake_gpus(typed_spec()))
    assert data["cluster"] == "prod" and data["driver_version"] == fakegpus.DRIVER_VERSION
    assert sorted(data["nodes"]) == ["gpu1", "gpu2"]  # a node without GPUs has none to show
    assert data["nodes"]["gpu1"]["gpus"] == 2 and data["nodes"]["gpu1"]["name"] == "NVIDIA H100 80GB HBM3"
    assert data["nodes"]["gpu2"]["name"] == "NVIDIA A100 80GB PCIe"
    assert data["nodes"]["gpu2"]["memory_mib"] == 81920


def test_real_gpus_get_no_shim(tmp_path):
    real = spec_from({"nodes": [{"name": "node1", "gpus": [0]}]})
    assert fakegpus.render_fake_gpus(real) is None
    assert fakegpus.install(real, tmp_path) == [] and list(tmp_path.iterdir()) == []


def test_install_writes_the_data_and_an_executable_shim(tmp_path):
    written = fakegpus.install(typed_spec(), tmp_path)
    assert written == [tmp_path / "fake-gpus.json", tmp_path / "bin" / "nvidia-smi", tmp_path / "bin" / "gpu-health-check"]
    shim = tmp_path / "bin" / "nvidia-smi"
    assert shim.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    # One file that holds every module of the shim (a docker node mounts just this file).
    with zipfile.ZipFile(shim) as z:
        assert sorted(z.namelist()) == ["__main__.py", "gpu_faults.py", "gpu_health.py", "nvidia_smi.py",
                                        "smi_output.py"]
        assert z.read("smi_output.py") == (Path(fakegpus.__file__).parent / "smi_output.py").read_bytes()
    assert stat.S_IMODE(shim.stat().st_mode) == 0o755
    assert json.loads((tmp_path / "fake-gpus.json").read_text())["cluster"] == "prod"


def test_uuids_are_stable_and_differ_per_cluster_node_and_index():
    u = fakegpus.gpu_uuid("prod", "gpu1", 0)
    assert re.match(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", u)
    assert u == fakegpus.gpu_uuid("prod", "gpu1", 0)
    others = {fakegpus.gpu_uuid("prod", "gpu1", 1), fakegpus.gpu_uuid("prod", "gpu2", 0),
              fakegpus.gpu_uuid("dev", "gpu1", 0)}
    assert u not in others and len(others) == 3


# -- where jobs find it --------------------------------------------------------------------------

def prolog_exports(tmp_path: Path, path: str, shim: bool):
    spec = spec_from({"nodes": 2, "fakeGpus": 2})
    root = tmp_path / "c"
    layout = ClusterLayout(root)
    layout.etc.mkdir(parents=True)
    prolog = layout.etc / "task_prolog.sh"
    prolog.write_text(render_all(spec, fixed_inputs(spec, root=str(root), nss=None))["task_prolog.sh"])
    if shim:
        fakegpus.install(spec, layout.etc)
    return run_prolog(prolog, PATH=path, SLURMD_NODENAME="node1", SLURM_STEP_GPUS="0"), layout.etc / "bin"


def test_task_prolog_puts_the_shim_first_on_path(tmp_path):
    exports, shim_dir = prolog_exports(tmp_path, "/usr/bin:/bin", shim=True)
    assert exports["PATH"] == f"{shim_dir}:/usr/bin:/bin"


def test_task_prolog_adds_nothing_without_the_shim_or_when_it_is_there(tmp_path):
    exports, _ = prolog_exports(tmp_path, "/usr/bin:/bin", shim=False)
    assert "PATH" not in exports  # real GPUs: the real nvidia-smi stays first
    exports, shim_dir = prolog_exports(tmp_path / "nested", f"{tmp_path}/nested/c/etc/bin:/usr/bin", shim=True)
    assert "PATH" not in exports  # a step started from a job that has it: not added twice


def test_docker_nodes_with_fake_gpus_mount_the_shim(tmp_path):
    layout = ClusterLayout(tmp_path / "t")
    fake = spec_from({"backend": "docker", "fakeGpus": True,
                      "nodes": [{"name": "node1", "gpus": [0, 1]}, {"name": "cpu1"}]})

    def shim_mounts(spec, node):
        return [(m["Source"], m["ReadOnly"]) for m in container_config(spec, layout, "img:1", node)["mounts"]
                if m["Target"] == "/usr/local/bin/nvidia-smi"]
    assert shim_mounts(fake, "node1") == [(str(layout.etc / "bin" / "nvidia-smi"), True)]
    assert shim_mounts(fake, "cpu1") == [] and shim_mounts(fake, None) == []  # no GPUs, the controller
    real = spec_from({"backend": "docker", "nodes": [{"name": "node1", "gpus": [0]}]})
    assert shim_mounts(real, "node1") == []


def test_shim_is_a_module_of_a_package_every_wheel_carries():
    # Not data beside the package: setup.py's find_namespace_packages takes it as code.
    assert fakegpus.SHIM_SOURCE == Path(fakegpus.__file__).resolve().with_name("nvidia_smi.py")
    packages = find_namespace_packages(where=str(REPO), include=["provisioner", "provisioner.*"])
    assert "provisioner.cluster.services.fakegpus" in packages
