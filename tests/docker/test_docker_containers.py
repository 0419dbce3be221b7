"""pyxis's container options on a 2-node docker cluster (Slurm 22.05; test_slurm_versions
runs check_container_jobs on its 24.11 and 26.05 clusters).

From this host's shell, through the wrappers of `simcluster env`: `srun -N2
--container-image=... --container-mounts=... --container-workdir=... hostname` with a
squashfs file in the shared directory (named by its host path) and with dockerd://IMAGE
(unpacked on this host's side, where the engine is); a batch job whose second step reuses a
named container by its name alone and whose step with an unknown name fails; one line for a docker image the engine lacks. Afterwards nothing is mounted
below the plugin's state directory in the node containers, and `down` removes the cluster's
unpacked images.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import TEST_HOME_ROOT, run_cli
from tests.docker.conftest import LABEL, docker_ids
from tests.integration.test_containers import _tiny_rootfs

pytestmark = pytest.mark.integration

DOCKERD_IMAGES = ("simcluster/base:bookworm", "simcluster/base:trixie", "simcluster/base:sid")


def _docker_image(fallback: str) -> str:
    """A small image of this engine for dockerd:// (a base image where one was built)."""
    for tag in DOCKERD_IMAGES:
        if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
            return tag
    return fallback


def _shell(env: str, script: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``script`` in bash with the exports of `simcluster env` (the wrappers first on PATH)."""
    return subprocess.run(["bash", "-c", f'eval "$1"; {script}', "_", env], cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def check_container_jobs(name: str, home: Path) -> None:
    """The container options on docker cluster ``name`` (2 nodes): sqsh and dockerd://
    images with mounts and a workdir, a named container reused by a later step, Slurm's own
    srun --container=BUNDLE, nothing left mounted after the jobs."""
    st = json.loads(run_cli(["status", "--name", name, "--json"], home, check=True).stdout)
    assert st["containers"].startswith("yes: "), st["containers"]
    env = run_cli(["env", "--name", name], home, check=True).stdout
    shared = home / name / "shared"
    (shared / "data").mkdir()
    (shared / "data" / "f").write_text("from the host\n")
    # A tiny image: a few programs and their libraries; mksquashfs in the controller (the
    # node image has squashfs-tools), so this host needs none.
    _tiny_rootfs(shared / "tiny")
    ctl = f"simcluster-{name}-ctl"
    subprocess.run(["docker", "exec", ctl, "mksquashfs", "/shared/tiny", "/shared/tiny.sqsh", "-comp", "lz4",
                    "-quiet", "-no-progress"], check=True, capture_output=True, timeout=120)
    state = json.loads((home / name / "state.json").read_text())
    image = _docker_image(state["provider_data"]["image"])
    run = ("srun -N2 --container-image={img} --container-mounts=/shared/data:/data:ro --container-workdir=/data "
           "bash -c 'echo $(hostname) $(pwd) $(cat f) $(grep -c . /etc/os-release)'")
    proc = _shell(env, f"{run.format(img=shared / 'tiny.sqsh')} && {run.format(img='dockerd://' + image)}", shared)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert [ln.rsplit(" ", 1)[0] for ln in lines] == [f"node{i} /data from the host" for i in (1, 1, 2, 2)], lines
    # The tiny image's os-release has 2 lines, a Debian image's more: each srun ran in its own.
    assert sorted(ln.rsplit(" ", 1)[1] == "2" for ln in lines) == [False, False, True, True], lines
    # pyxis's pattern: a named container set up by one step, used by name alone by the next;
    # an unknown name fails the step (one line in the job's output) and never runs it on the
    # node: there, /shared/ran-on-a-node would be made.
    (shared / "named.sh").write_text(
        "#!/bin/bash\n#SBATCH -N2 -o named.out -e named.err\nset -e\n"
        "srun -N2 --container-image=/shared/tiny.sqsh --container-name=c1 bash -c 'echo kept > /kept'\n"
        "srun -N2 --container-name=c1 cat /kept\n"
        "srun -N2 --container-image=/shared/tiny.sqsh bash -c 'cat /kept 2>/dev/null || echo fresh'\n"
        "if srun -N1 --container-name=nope touch /shared/ran-on-a-node; then echo nope-ran; fi\n")
    proc = _shell(env, "sbatch --wait named.sh", shared)
    assert proc.returncode == 0, proc.stderr + (shared / "named.err").read_text(errors="replace")
    assert (shared / "named.out").read_text().split() == ["kept", "kept", "fresh", "fresh"]
    err = (shared / "named.err").read_text()
    assert "--container-name=nope: no container named nope in this job on this node" in err, err
    assert not (shared / "ran-on-a-node").exists()
    # Slurm's own OCI path: srun --container=BUNDLE (oci.conf, crun in the node image), a bundle
    # made by `simcluster image bundle` from the tiny image, run with each task's rank.
    run_cli(["image", "bundle", str(shared / "tiny.sqsh"), "-o", str(shared / "bundle")], home, check=True)
    proc = _shell(env, "srun -N2 --container=/shared/bundle bash -c "
                       "'echo $(hostname) $SLURM_PROCID $(grep ^ID= /etc/os-release)'", shared)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["node1 0 ID=simcluster-tiny", "node2 1 ID=simcluster-tiny"], proc.stdout
    proc = _shell(env, "srun --container-image=dockerd://simcluster/no-such-image:0 true", shared)
    assert proc.returncode != 0
    assert "this machine's docker engine has no image simcluster/no-such-image:0" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for node in ("node1", "node2"):
        mounts = subprocess.run(["docker", "exec", f"simcluster-{name}-{node}", "cat", "/proc/mounts"],
                                capture_output=True, text=True, check=True).stdout
        assert "/shared/containers" not in mounts, mounts
    assert list((shared / "containers" / "data").iterdir()) == []
    assert [p.name for p in (shared / "containers" / "images").iterdir() if p.is_dir()] != []


@pytest.fixture(scope="module")
def cluster():
    """One 2-node docker cluster for the module; down must remove its unpacked images."""
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    home = TEST_HOME_ROOT / uuid.uuid4().hex[:8]
    home.mkdir()
    name = f"dc{uuid.uuid4().hex[:6]}"
    try:
        run_cli(["up", "--backend", "docker", "--name", name, "--nodes", "2"], home, check=True, timeout=900)
        yield name, home
    finally:
        run_cli(["down", "--name", name], home)
        left = (home / name / "shared" / "containers").exists()
        shutil.rmtree(home, ignore_errors=True)
        assert docker_ids(f"label={LABEL}={name}") == [], f"containers of {name} left behind"
        assert not left, "down left the cluster's unpacked images"


def test_container_jobs(cluster):
    check_container_jobs(*cluster)
