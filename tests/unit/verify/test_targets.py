"""verify's target without a cluster: GPU ids per node, job-file paths, module probes."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.cluster.model.command_runner import HostRunner
from provisioner.cluster.model.jobfiles import HostDirFiles
from provisioner.cluster.model.slurm import SlurmClient
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.verify.targets import VerifyTarget, _parse_probe


def spec() -> ClusterSpec:
    ns = (NodeSpec("node1", (6,), 2, 1000), NodeSpec("node2", (7, 3), 2, 1000), NodeSpec("node3", (), 2, 1000))
    return ClusterSpec("t", "local", ns, (PartitionSpec("main", ("node1", "node2", "node3"), default=True),))


def target(tmp_path: Path, renumbered: bool) -> VerifyTarget:
    return VerifyTarget("t", "test cluster 't'", spec(), SlurmClient(HostRunner()),
                        HostDirFiles(tmp_path / "shared", "/shared"), "/usr/bin", renumbered, "", "")


def test_gpu_ids_shared_host_are_physical_own_machines_are_numbered_from_zero(tmp_path):
    shared = target(tmp_path, renumbered=False)
    assert shared.visible_gpus("node1") == "6"
    assert shared.visible_gpus("node2") == "7,3"
    assert shared.visible_gpus("node2", 1) == "7"
    assert shared.visible_gpus("node3") == ""
    own = target(tmp_path, renumbered=True)
    assert own.visible_gpus("node1") == "0"
    assert own.visible_gpus("node2") == "0,1"
    assert own.visible_gpus("node2", 1) == "0"
    assert own.visible_gpus("node3") == ""


def test_job_files_map_to_the_clusters_path_and_refuse_others(tmp_path):
    t = target(tmp_path, True)
    assert t.cluster_path(tmp_path / "shared" / "verify" / "r1" / "job.sh") == "/shared/verify/r1/job.sh"
    assert t.cluster_path(tmp_path / "shared") == "/shared"
    with pytest.raises(ValueError):
        t.cluster_path(Path("/etc/passwd"))


def test_new_run_dirs_never_collide_and_are_writable_by_jobs(tmp_path):
    files = HostDirFiles(tmp_path, str(tmp_path))
    a, b = files.new_run_dir(), files.new_run_dir()
    assert a != b and a.is_dir() and b.is_dir()
    assert a.stat().st_mode & 0o777 == 0o777
    files.write_text(a / "job.sh", "echo hi\n", 0o755)
    assert files.read_text(a / "job.sh") == "echo hi\n" and files.read_text(a / "missing") is None
    assert (a / "job.sh").stat().st_mode & 0o777 == 0o755


def test_module_probe_runs_the_jobs_python_once_per_module(tmp_path):
    import sys
    t = VerifyTarget("t", "", spec(), SlurmClient(HostRunner()), HostDirFiles(tmp_path, str(tmp_path)),
                     str(Path(sys.executable).parent), False, "", "")
    assert t.missing_module(["json", "no_such_module_x"]) == "no_such_module_x"
    assert t._modules == {"json": True, "no_such_module_x": False}
    assert t.missing_module(["json"]) is None


def test_module_probe_output_parsing():
    assert _parse_probe('{"torch": true, "deepspeed": false}\n', ["torch", "deepspeed"]) == \
        {"torch": True, "deepspeed": False}
    # a python that crashed or printed nothing: treat every module as missing (SKIP, not a crash)
    assert _parse_probe("", ["torch"]) == {"torch": False}
    assert _parse_probe("Traceback ...", ["torch"]) == {"torch": False}
