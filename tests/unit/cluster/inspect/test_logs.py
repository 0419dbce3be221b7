"""The export-logs bundle (provisioner/cluster/inspect/logs.py): which files it holds, passwords
redacted and no munge key, daemon logs read through the runners, built from a scripted
runner (tests/unit/cluster/fakes.py); no daemon runs."""

from __future__ import annotations

import json

from provisioner.cluster.inspect import logs
from provisioner.cluster.services.accounting import DEBUG_REPORTS
from tests.unit.cluster.fakes import FakeProvider, ScriptedRunner, home, make_cluster  # noqa: F401 (fixture)


def test_copy_files_redacts_passwords_and_leaves_out_the_munge_key(tmp_path):
    src, dest = tmp_path / "etc", tmp_path / "bundle"
    src.mkdir()
    (src / "slurm.conf").write_text("ClusterName=x\n")
    (src / "slurmdbd.conf").write_text("StorageUser=slurm\nStoragePass=s3cret\n")
    (src / "munge.key").write_bytes(b"\0" * 1024)
    (src / "sub").mkdir()
    (src / "sub" / "nested.conf").write_text("x")
    written = logs.copy_files(src, dest)
    assert sorted(p.name for p in written) == ["slurm.conf", "slurmdbd.conf"]
    assert (dest / "slurmdbd.conf").read_text() == "StorageUser=slurm\nStoragePass=<redacted>\n"
    assert (dest / "slurm.conf").read_text() == "ClusterName=x\n"
    assert not (dest / "munge.key").exists() and not (dest / "sub").exists()


def test_copy_files_of_a_missing_directory_writes_nothing(tmp_path):
    assert logs.copy_files(tmp_path / "nope", tmp_path / "bundle") == []
    assert not (tmp_path / "bundle").exists()


def test_daemon_log_names_are_flat(home):
    c = make_cluster("g1", FakeProvider())
    found = logs._daemon_logs(c, ["slurmd:node1", "munged:node2", "slurmctld"])
    assert ("slurmd:node1", "slurmd-node1.log", "slurmd-node1.log") in found
    assert ("munged:node2", "munged.log", "munged-node2.log") in found  # a node's own munged
    assert ("slurmctld", "slurmctld.out", "slurmctld.out") in found
    assert len(found) == 6


def test_accounting_clusters_add_the_database_setup_logs(home):
    c = make_cluster("g2", FakeProvider(), accounting=True)
    names = [bundle for _, _, bundle in logs._daemon_logs(c, ["slurmdbd"])]
    assert names == ["slurmdbd.log", "slurmdbd.out", "mariadb-install.log", "sacctmgr-setup.log"]


def _bundle(c, tmp_path):
    out = tmp_path / "bundle"
    written = logs.export_logs(c, out)
    return out, sorted(str(p.relative_to(out)) for p in written)


def test_the_bundle_of_a_cluster(home, tmp_path):
    runner = ScriptedRunner({("scontrol", "show", "node"): (0, "NodeName=node1 State=IDLE\n", ""),
                             ("slurmctld", "-V"): (0, "slurm 24.11.5\n", ""),
                             ("slurmd", "-V"): (1, "", "")})
    c = make_cluster("g3", FakeProvider(runner))
    etc = c.placement.config_dir
    (etc / "slurm.conf").write_text("ClusterName=g3\n")
    (etc / "munge.key").write_bytes(b"k" * 1024)
    log_dir = c.paths.log
    runner.files[f"{log_dir}/slurmctld.log"] = b"slurmctld started\n"
    runner.files[f"{log_dir}/slurmd-node1.log"] = b"slurmd node1\n"
    out, files = _bundle(c, tmp_path)
    assert files == ["config/slurm.conf", "logs/slurmctld.log", "logs/slurmd-node1.log",
                     "scontrol-show-config.txt", "scontrol-show-job.txt", "scontrol-show-node.txt",
                     "scontrol-show-partition.txt", "state.json", "versions.txt"]
    assert (out / "logs" / "slurmd-node1.log").read_text() == "slurmd node1\n"
    assert (out / "scontrol-show-node.txt").read_text() == "NodeName=node1 State=IDLE\n"
    assert (out / "scontrol-show-job.txt").read_text().startswith("(scontrol show job failed: ")
    state = json.loads((out / "state.json").read_text())
    assert state["name"] == "g3" and state["alive"] == {"munged": True, "slurmctld": True, "slurmd:node1": True,
                                                         "slurmd:node2": True}
    versions = (out / "versions.txt").read_text()
    assert "slurmctld: slurm 24.11.5\n" in versions
    assert "slurmd: (unavailable: exit 1)\n" in versions  # asked, no answer: said so
    assert "munged: munged: not scripted\n" in versions  # an error's text is the answer
    assert versions.startswith("simcluster: ") and "mariadbd" not in versions


def test_the_bundle_of_an_accounting_cluster_has_the_database_reports(home, tmp_path):
    runner = ScriptedRunner({("sacctmgr", "show", "cluster"): (0, "Cluster g4\n", ""),
                             ("sshare",): (1, "", "slurmdbd not answering")})
    c = make_cluster("g4", FakeProvider(runner), accounting=True)
    (c.placement.config_dir / "slurmdbd.conf").write_text("StoragePass=pw\n")
    out, files = _bundle(c, tmp_path)
    for rel, _ in DEBUG_REPORTS:
        assert rel in files
    assert (out / "config" / "slurmdbd.conf").read_text() == "StoragePass=<redacted>\n"
    assert (out / "sacctmgr-show-cluster.txt").read_text() == "Cluster g4\n"
    assert (out / "sshare.txt").read_text() == "\n(exit 1: slurmdbd not answering)"
    assert "mariadbd: " in (out / "versions.txt").read_text()
