"""HostDirFiles (cluster/model/jobfiles.py): job files in a directory of this host that the
cluster sees at another path (docker's /shared), one run directory per verify run."""

from __future__ import annotations

import stat

from provisioner.cluster.model import jobfiles
from provisioner.cluster.model.jobfiles import HostDirFiles


def test_paths_under_the_root_are_given_as_the_jobs_see_them(tmp_path):
    files = HostDirFiles(tmp_path, "/shared")
    assert files.cluster_path(tmp_path) == "/shared"
    assert files.cluster_path(tmp_path / "verify" / "run" / "job.sh") == "/shared/verify/run/job.sh"


def test_run_directories_never_collide_and_every_job_user_may_write_them(tmp_path, monkeypatch):
    monkeypatch.setattr(jobfiles.time, "strftime", lambda fmt: "20261128-120000")
    files = HostDirFiles(tmp_path, str(tmp_path))
    first, second, third = files.new_run_dir(), files.new_run_dir(), files.new_run_dir()
    assert [p.name for p in (first, second, third)] == ["20261128-120000", "20261128-120000-2", "20261128-120000-3"]
    assert stat.S_IMODE(first.stat().st_mode) == 0o777


def test_a_file_not_written_yet_reads_as_none_and_modes_are_kept(tmp_path):
    files = HostDirFiles(tmp_path, "/x")
    out = tmp_path / "out.txt"
    assert files.read_text(out) is None and not files.exists(out)
    files.write_text(out, "done\n", mode=0o600)
    assert files.read_text(out) == "done\n" and files.exists(out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_copy_tree_leaves_python_caches_behind(tmp_path):
    src = tmp_path / "src"
    (src / "__pycache__").mkdir(parents=True)
    (src / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"")
    (src / "train.py").write_text("print(1)\n")
    HostDirFiles(tmp_path, "/x").copy_tree(src, tmp_path / "dest")
    assert sorted(p.name for p in (tmp_path / "dest").iterdir()) == ["train.py"]
