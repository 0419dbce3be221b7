"""Container jobs' Python side: option parsing, image sources, the plugin's availability,
plugstack.conf and the PlugStackConfig line, and the plugin's C source compiling."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner.cluster.services import containers
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.errors import UsageError
from provisioner.nodepaths import NodePaths
from provisioner.paths import REPO_ROOT, ClusterLayout
from provisioner.render import RenderInputs, render_all


def test_mounts_parse_like_the_plugin():
    assert containers.parse_mounts("/a:/b,/c:/d:ro,/e,/f:/g:ro+rprivate") == [
        ("/a", "/b", False), ("/c", "/d", True), ("/e", "/e", False), ("/f", "/g", True)]
    assert containers.parse_mounts("") == []


@pytest.mark.parametrize("value, message", [
    ("a:/b", "needs absolute paths"),
    ("/a:b", "needs absolute paths"),
    ("/a:/b:ro:x", "too many ':'"),
])
def test_bad_mounts_are_one_line(value, message):
    with pytest.raises(UsageError, match=message):
        containers.parse_mounts(value)


def test_image_sources():
    assert containers.docker_image_of("dockerd://simcluster/base:bookworm") == "simcluster/base:bookworm"
    with pytest.raises(UsageError, match="only dockerd://IMAGE"):
        containers.docker_image_of("podman://ubuntu")
    with pytest.raises(UsageError, match="name an image as dockerd://IMAGE"):
        containers.docker_image_of("ubuntu")
    with pytest.raises(UsageError):
        containers.docker_image_of("dockerd://")


@pytest.mark.parametrize("uri, ref", [
    ("docker://ubuntu", "ubuntu"),
    ("docker://ubuntu:22.04", "ubuntu:22.04"),
    ("docker://nvcr.io#nvidia/pytorch:23.10-py3", "nvcr.io/nvidia/pytorch:23.10-py3"),
    ("docker://me@nvcr.io#nvidia/pytorch:23.10-py3", "nvcr.io/nvidia/pytorch:23.10-py3"),
    ("docker://me@ubuntu:22.04", "ubuntu:22.04"),
    ("docker://ubuntu@sha256:0123abcd", "ubuntu@sha256:0123abcd"),
])
def test_enroot_docker_uris_as_docker_references(uri, ref):
    assert containers.docker_reference(uri) == ref


@pytest.mark.skipif(shutil.which("docker") is None or subprocess.run(["docker", "version"], capture_output=True)
                    .returncode != 0, reason="no docker engine here")
def test_a_docker_uri_without_a_registry_is_one_line():
    """A registry that cannot be reached (.invalid never resolves): one line with docker's reason."""
    with pytest.raises(UsageError, match=r"^docker://nosuch.invalid#simcluster/x:1: docker pull "
                                         r"nosuch.invalid/simcluster/x:1 failed \(.+\); where no registry is reachable"):
        containers.pull_image("docker://nosuch.invalid#simcluster/x:1")


def test_environment_file_keeps_assignments_only():
    assert containers.environment_file(["PATH=/usr/bin", "EMPTY=", "junk"]) == "PATH=/usr/bin\nEMPTY=\n"


def test_availability(tmp_path, monkeypatch):
    plugin = tmp_path / containers.PLUGIN_FILE
    monkeypatch.setattr(containers, "PLUGIN_PATH", plugin)
    assert containers.unavailable_reason(True, True, "22.05.8") == containers.NOT_BUILT
    plugin.write_bytes(b"")
    assert "built for Slurm an unknown release" in containers.unavailable_reason(True, True, "22.05.8")
    (tmp_path / "slurm-version").write_text("22.05.8\n")
    assert "this host runs 24.11.1" in containers.unavailable_reason(True, True, "24.11.1")
    assert containers.unavailable_reason(False, True, "22.05.8") == containers.NOT_ROOT
    assert containers.unavailable_reason(True, False, "22.05.8") == containers.NOT_ROOT
    assert containers.unavailable_reason(True, True, "22.05.8") == ""


def _render(tmp_path, plugin):
    spec = ClusterSpec(name="c", backend="local", nodes=(NodeSpec(name="node1", gpus=(), cpus=2, memory=1024),),
                       partitions=(PartitionSpec(name="main", nodes=("node1",), default=True),))
    paths = NodePaths.of_layout(ClusterLayout(tmp_path / "c"))
    inputs = RenderInputs(paths=paths, hostname="h", slurm_user="root", controller_port=6817,
                          node_ports={"node1": 6818}, containers_plugin=plugin)
    return paths, render_all(spec, inputs)


def test_plugstack_only_with_a_plugin(tmp_path):
    paths, files = _render(tmp_path, None)
    assert "plugstack.conf" not in files and "PlugStackConfig" not in files["slurm.conf"]
    paths, files = _render(tmp_path, "/opt/x/simcluster_pyxis.so")
    assert f"PlugStackConfig={paths.etc}/plugstack.conf\n" in files["slurm.conf"]
    assert files["plugstack.conf"].splitlines()[-1] == \
        f"required /opt/x/simcluster_pyxis.so state_dir={paths.root}/containers"


def test_the_epilog_removes_named_containers_only_with_the_plugin(tmp_path):
    """The plugin has no job epilog (one would start a slurmstepd at every job's end): the
    cluster's Epilog removes the job's named containers instead, /bin/true without it."""
    paths, files = _render(tmp_path, None)
    assert "Epilog=/bin/true\n" in files["slurm.conf"] and "epilog.sh" not in files
    paths, files = _render(tmp_path, "/opt/x/simcluster_pyxis.so")
    assert f"Epilog={paths.etc}/epilog.sh\n" in files["slurm.conf"]
    script = files["epilog.sh"]
    assert script.startswith("#!/bin/sh\n")
    assert f'for dir in "{paths.root}/containers/data/$SLURM_JOB_ID".*; do' in script
    # Run it: the job's containers go, another job's stay, and it exits 0.
    data = Path(paths.root) / "containers" / "data"
    for name in ("12.name.keep.0", "12.name.keep.1", "123.name.keep.0", "7.0.0"):
        (data / name / "upper").mkdir(parents=True)
    written = tmp_path / "epilog.sh"
    written.write_text(script)
    proc = subprocess.run(["sh", str(written)], env=dict(os.environ, SLURM_JOB_ID="12"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in data.iterdir()) == ["123.name.keep.0", "7.0.0"]
    proc = subprocess.run(["sh", str(written)], env=dict(os.environ, SLURM_JOB_ID="99"), capture_output=True, text=True)
    assert proc.returncode == 0 and sorted(p.name for p in data.iterdir()) == ["123.name.keep.0", "7.0.0"]


@pytest.mark.skipif(not Path("/usr/include/slurm/spank.h").exists() or shutil.which("gcc") is None,
                    reason="no Slurm headers or gcc: make setup-containers installs them")
def test_the_plugin_compiles_without_warnings(tmp_path):
    src = REPO_ROOT / "spank" / "simcluster_pyxis.c"
    proc = subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-format-truncation",
                           "-Werror", "-fPIC", "-shared", "-o", str(tmp_path / "p.so"), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    syms = subprocess.run(["nm", "-D", str(tmp_path / "p.so")], capture_output=True, text=True).stdout
    for hook in ("slurm_spank_init_post_opt", "slurm_spank_task_init_privileged", "slurm_spank_task_init",
                 "slurm_spank_exit", "slurm_spank_init"):
        assert f" {hook}\n" in syms
    # A job epilog would make slurmd start one more slurmstepd at every job's end, container
    # or not; the cluster's Epilog (epilog.sh) removes named containers instead.
    assert " slurm_spank_job_epilog\n" not in syms
