"""Slurm's own OCI containers (`srun --container=BUNDLE`, oci.conf for crun) on a 2-node
local cluster (as root, container options on).

The bundle is made by `simcluster image bundle` from a squashfs file of a few of this
host's programs (its /etc/os-release says ID=simcluster-tiny, so a line that prints it ran
in the bundle); each task prints its node, its rank and that line, from srun and from a
batch job (where Slurm 22.05 would give every task the batch task's rank); a job of another
user gets one line; afterwards crun knows no container on any node and nothing is mounted.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from provisioner.cluster.services import oci
from tests.conftest import module_cluster, run_cli
from tests.integration.test_containers import CONTAINER_MARKS, _tiny_rootfs
from tests.integration.test_local_cluster import wait_job

pytestmark = CONTAINER_MARKS + [
    pytest.mark.skipif(shutil.which("crun") is None, reason="no crun: make setup-containers")]

PRINT = 'echo "$(hostname) $SLURM_PROCID $SLURM_NODEID $(grep ^ID= /etc/os-release)"'
EXPECTED = ["node1 0 0 ID=simcluster-tiny", "node2 1 1 ID=simcluster-tiny"]


@pytest.fixture(scope="module")
def cluster():
    with module_cluster("oci", "--nodes", "2") as c:
        yield c


@pytest.fixture(scope="module")
def bundle(cluster, tmp_path_factory):
    """A bundle of a tiny root file system, made the way users make one."""
    tmp = tmp_path_factory.mktemp("oci")
    _tiny_rootfs(tmp / "rootfs")
    sqsh = tmp / "tiny.sqsh"
    subprocess.run(["mksquashfs", str(tmp / "rootfs"), str(sqsh), "-quiet", "-no-progress"], check=True)
    out = tmp / "bundle"
    proc = run_cli(["image", "bundle", str(sqsh), "-o", str(out)], cluster.home, check=True)
    assert f"bundled {sqsh} to {out}" in proc.stdout
    again = run_cli(["image", "bundle", str(sqsh), "-o", str(out)], cluster.home)
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr
    tmp.chmod(0o755)  # a job of another user reaches the bundle (and finds it is not for it)
    return out


def test_oci_conf_beside_slurm_conf(cluster):
    etc = cluster.root / "etc"
    text = (etc / "oci.conf").read_text()
    assert f'RunTimeRun="{etc}/{oci.RUNTIME_SCRIPT} run %n %b %j.%s.%t.%n"' in text
    assert os.access(etc / oci.RUNTIME_SCRIPT, os.X_OK)


def test_each_node_runs_its_task_in_the_bundle(cluster, bundle):
    proc = cluster.run(["srun", "-N2", f"--container={bundle}", "bash", "-c", PRINT])
    assert sorted(proc.stdout.splitlines()) == EXPECTED, proc.stderr


def test_a_batch_jobs_steps_get_their_own_ranks(cluster, bundle):
    out = bundle.parent / "batch.out"
    proc = cluster.run(["sbatch", "-W", "-N2", "-o", str(out), "--wrap",
                        f"srun -N2 --container={bundle} bash -c '{PRINT}'"], timeout=120)
    assert sorted(out.read_text().splitlines()) == EXPECTED, proc.stdout + proc.stderr


def test_another_users_job_gets_one_line(cluster, bundle):
    # nobody's job must enter the test's home and the cluster's directory (its spool holds the batch script).
    for path in (cluster.home, cluster.root):
        path.chmod(0o711)
    out_dir = cluster.home / "nobody"
    out_dir.mkdir()
    out_dir.chmod(0o777)
    out = out_dir / "out.txt"
    job = cluster.run(["sbatch", "--parsable", "--uid=65534", "--gid=65534", "-N1", "-D", str(out_dir),
                       "-o", str(out), "--wrap", f"srun --container={bundle} id"]).stdout.strip()
    assert wait_job(cluster, job) == "FAILED", out.read_text() if out.exists() else job
    assert "srun --container: runs jobs of root only on this cluster (job user nobody)" in out.read_text()


def test_nothing_left_after_the_steps(cluster, bundle):
    cluster.run(["srun", "-N2", f"--container={bundle}", "id"])
    state = cluster.root / "run" / oci.STATE_DIR
    assert sorted(p.name for p in state.iterdir()) == ["node1", "node2"]
    for node in ("node1", "node2"):
        listed = subprocess.run(["crun", "--root", str(state / node), "list", "-q"], capture_output=True, text=True,
                                check=True).stdout
        assert listed.strip() == "", listed
    assert oci.containers_left(state) == {}
    spool = cluster.root / "spool"
    assert not [p for p in spool.rglob("oci-job*")], list(spool.rglob("oci-job*"))
    with open("/proc/mounts") as fh:
        assert str(bundle) not in fh.read()
