"""MPI across virtual nodes on the local backend: examples/mpi/run.slurm runs unchanged
(srun --mpi=pmix, Debian's mpi4py over Open MPI, system python3), CPU binding works on a
real-shaped node, and the daemons log no PMIx error."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO
from tests.integration.test_local_cluster import wait_job

pytestmark = pytest.mark.integration

# Logged by every Slurm 22.05 step with PMIx 4 at its end, also on real hosts: the PMIx
# library already removed the step's client directory when Slurm tries to (upstream:
# openpmix/openpmix#1444). Every other PMIx line is a failure.
UPSTREAM_CLEANUP = re.compile(r"rmdir_recursive: could not open .*/spmix_appdir_|"
                              r"pmixp_libpmix_finalize: .*Failed to remove .*/spmix_appdir_")


def _have_mpi() -> bool:
    probe = subprocess.run(["/usr/bin/python3", "-c", "import mpi4py"], capture_output=True)
    return probe.returncode == 0 and shutil.which("ompi_info") is not None


@pytest.mark.skipif(not _have_mpi(), reason="python3-mpi4py / openmpi-bin not installed (make setup)")
def test_mpi_example_runs_across_nodes_with_clean_daemon_logs(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2")
    job_id = c.run(["sbatch", "--parsable", str(REPO / "examples/mpi/run.slurm")], cwd=tmp_path).stdout.strip()
    state = wait_job(c, job_id, timeout=120)
    out = (tmp_path / f"mpi_{job_id}.out").read_text()
    assert state == "COMPLETED", out
    ranks = re.findall(r"rank (\d)/4 on (node\d): allreduce sum=10 over node1,node2", out)
    assert sorted(ranks) == [("0", "node1"), ("1", "node1"), ("2", "node2"), ("3", "node2")], out
    assert "pmix" in out  # srun --mpi=list
    # CPU binding on a node with the host's real CPUs (task/affinity).
    bound = c.run(["srun", "-N1", "-n1", "--cpu-bind=verbose,cores", "grep", "Cpus_allowed_list", "/proc/self/status"])
    assert "cpu-bind=MASK" in bound.stderr, bound.stderr
    logs = "".join(p.read_text() for p in (c.root / "log").glob("slurm*.log"))
    pmix_errors = [line for line in logs.splitlines()
                   if re.search(r"pmix", line, re.I) and re.search(r"error|fatal|can not", line, re.I)
                   and not UPSTREAM_CLEANUP.search(line)]
    assert not pmix_errors, "\n".join(pmix_errors[:10])
