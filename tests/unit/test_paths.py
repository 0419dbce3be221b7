"""Where clusters live (provisioner/paths.py): $SIMCLUSTER_HOME, else root's shared home or a
user's own, and the modes that make root's clusters usable by every local user."""

from __future__ import annotations

import os

from provisioner import paths
from provisioner.paths import ClusterLayout


def test_simcluster_home_wins_then_root_system_home_then_the_users_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMCLUSTER_HOME", str(tmp_path / "h"))
    assert paths.simcluster_home() == (tmp_path / "h").resolve() and paths.shared_home() is None
    monkeypatch.delenv("SIMCLUSTER_HOME")
    monkeypatch.setattr(paths.os, "geteuid", lambda: 0)
    assert paths.simcluster_home() == paths.SYSTEM_HOME and paths.shared_home() is None
    monkeypatch.setattr(paths.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert paths.simcluster_home() == (tmp_path / "xdg").resolve() / "simcluster"
    assert paths.shared_home() == paths.SYSTEM_HOME  # an ordinary user also finds root's clusters


def test_modes_root_serves_every_user_an_ordinary_users_cluster_stays_private(monkeypatch):
    monkeypatch.setattr(paths.os, "geteuid", lambda: 0)
    assert paths.state_dir_mode() == 0o755
    before = os.umask(0o077)
    try:
        with paths.shared_umask():
            assert os.umask(0o022) == 0o022
        assert os.umask(0o077) == 0o077  # restored
        monkeypatch.setattr(paths.os, "geteuid", lambda: 1000)
        assert paths.state_dir_mode() == 0o700
        with paths.shared_umask():
            assert os.umask(0o077) == 0o077  # unchanged
    finally:
        os.umask(before)


def test_a_clusters_files_are_under_its_directory(tmp_path):
    layout = ClusterLayout.for_name("c1", tmp_path)
    assert layout.root == tmp_path / "c1" and layout.state_file == tmp_path / "c1" / "state.json"
    assert layout.munge_key.parent == layout.etc and layout.munge_socket.parent == layout.munge_dir
    assert layout.daemon_log("slurmctld") == tmp_path / "c1" / "log" / "slurmctld.log"
    assert layout.state_save == tmp_path / "c1" / "slurmctld"
