"""simcluster as other projects install it: a wheel and an sdist built from this checkout,
the wheel installed with pip into a fresh venv outside the checkout, and the installed
`simcluster` run from a directory that is not the checkout (so nothing can be read from it
by accident): --version, up, verify, down, image build, deploy --help; and a project of
its own whose `def test_x(slurm_cluster)` runs through the installed pytest plugin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import uuid
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, TEST_HOME_ROOT, daemons_under

pytestmark = pytest.mark.integration

# The top-level sources (configs/templates/, docker/, ansible/) as the sdist carries them,
# and where the build puts them in the wheel (setup.py's package-dir mapping).
SOURCES = ("configs/templates/slurm.conf.j2", "docker/Dockerfile", "docker/entrypoint.sh",
           "ansible/site.yml", "ansible/filter_plugins/simcluster.py", "setup.py", "MANIFEST.in")
DATA = ("provisioner/data/configs/templates/slurm.conf.j2", "provisioner/data/docker/Dockerfile",
        "provisioner/data/docker/entrypoint.sh", "provisioner/data/ansible/site.yml",
        "provisioner/data/ansible/roles/slurm_common/defaults/main.yml", "provisioner/workloads/torchrun.sbatch")


def sh(argv, cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> Path:
    """sdist + wheel, built without network isolation from this venv's setuptools. Without
    --sdist/--wheel, build makes the sdist and then the wheel from the unpacked sdist: the
    sdist alone must be enough to build it, and nothing is built inside the checkout."""
    out = tmp_path_factory.mktemp("dist")
    sh([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, REPO], cwd=out)
    return out


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory) -> Path:
    """A fresh venv (not this one) with the wheel pip-installed; returns its bin dir."""
    venv = tmp_path_factory.mktemp("venv")
    sh([shutil.which("python3") or sys.executable, "-m", "venv", venv], cwd=venv)
    wheel = next(dists.glob("simcluster-*.whl"))
    sh([venv / "bin" / "pip", "install", "-q", wheel], cwd=venv, timeout=900)
    return venv / "bin"


def test_the_wheel_and_the_sdist_carry_the_run_time_files(dists):
    wheel = next(dists.glob("simcluster-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert all(d in names for d in DATA), sorted(n for n in names if "/data/" in n)[:20]
    assert "provisioner/pytest_plugin.py" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry).decode()
    assert "simcluster = provisioner.cli.main:main" in text and "pytest11" in text
    sdist = next(dists.glob("simcluster-*.tar.gz"))
    members = {m.split("/", 1)[1] for m in tarfile.open(sdist).getnames() if "/" in m}
    assert all(s in members for s in SOURCES), sorted(members)[:40]
    assert "configs/examples/two-node-fake-gpus.yaml" in members
    # One source: the sdist has the top-level directories, not a second copy in the package.
    assert not [m for m in members if m.startswith("provisioner/data/")]
    assert not [n for n in names if n.endswith(".pyc")]


def test_the_installed_wheel_runs_a_cluster_outside_the_checkout(installed, tmp_path):
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    home = TEST_HOME_ROOT / uuid.uuid4().hex[:8]
    home.mkdir()
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SLURM_CONF")}
    env.update(SIMCLUSTER_HOME=str(home), PATH=f"{installed}:{env.get('PATH', '')}")
    exe = installed / "simcluster"
    name = "whl"
    try:
        where = sh([installed / "python", "-c", "import provisioner; print(provisioner.__file__)"], cwd, env).stdout
        assert str(REPO) not in where, where  # the installed copy, not the checkout
        version = sh([exe, "--version"], cwd, env).stdout
        assert version.startswith("simcluster 0.1.0") and "22.05" in version and "26.05" in version, version
        up = sh([exe, "up", "--name", name, "--nodes", "2"], cwd, env, timeout=300)
        assert "is up" in up.stdout, up.stdout
        # basic.controller/nodes/srun-env/sbatch-output run jobs from the packaged workloads.
        ver = sh([exe, "verify", "--name", name, "--suite", "basic", "--json"], cwd, env, timeout=600)
        assert '"status": "FAIL"' not in ver.stdout, ver.stdout[-3000:]
        assert "--inventory" in sh([exe, "deploy", "--help"], cwd, env).stdout
        assert "--slurm" in sh([exe, "image", "build", "--help"], cwd, env).stdout
    finally:
        subprocess.run([str(exe), "down", "--name", name], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
        left = daemons_under(home)
        shutil.rmtree(home, ignore_errors=True)
    assert not left, left


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs docker")
def test_the_installed_wheel_builds_the_node_image(installed, tmp_path):
    """image build from the packaged build context: the cached image is found current (the
    same files give the same context digest), so this is quick when the suite built it."""
    from provisioner.providers.docker import engine
    if not engine.engine_version():
        pytest.skip("no docker engine answers")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    out = sh([installed / "simcluster", "image", "build"], tmp_path, env, timeout=900).stdout
    assert "simcluster/node:0.1.0" in out, out


PROJECT_TEST = """
def test_x(slurm_cluster):
    assert slurm_cluster.nodes == ["node1", "node2"]
    job = slurm_cluster.sbatch("#!/bin/bash\\n#SBATCH -N2\\nsrun hostname -s >/dev/null && echo ran on $SLURM_JOB_NODELIST")
    assert job.state == "COMPLETED" and job.exit_code == 0, job.output
    assert "ran on node[1-2]" in job.output
"""


def test_an_outside_project_uses_the_installed_plugin(installed, tmp_path):
    """A project outside the checkout with the wheel (and pytest) installed writes
    `def test_x(slurm_cluster)`: the plugin loads by its entry point, the test passes and
    the session leaves nothing running."""
    sh([installed / "pip", "install", "-q", "pytest"], tmp_path, timeout=600)
    project = tmp_path / "client"
    project.mkdir()
    (project / "test_client.py").write_text(PROJECT_TEST)
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    home = TEST_HOME_ROOT / uuid.uuid4().hex[:8]
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SLURM_CONF",
                                                           "PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env.update(SIMCLUSTER_HOME=str(home))
    try:
        proc = subprocess.run([str(installed / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                              cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=600)
        assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:]
        left = daemons_under(home)
        assert not left, left
        assert not [p for p in home.iterdir() if p.is_dir() and p.name.startswith("pyt-")]
    finally:
        shutil.rmtree(home, ignore_errors=True)
