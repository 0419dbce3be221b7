"""NodePaths (provisioner/nodepaths.py): the paths as the daemons see them, from a host
layout or fixed container paths, through the state file and back."""

from __future__ import annotations

from provisioner.nodepaths import NodePaths
from provisioner.paths import ClusterLayout


def test_a_host_layout_gives_paths_in_the_clusters_own_directory(tmp_path):
    layout = ClusterLayout(tmp_path / "c")
    paths = NodePaths.of_layout(layout)
    assert paths.root == str(tmp_path / "c")
    assert paths.slurm_conf == str(layout.slurm_conf) and paths.task_prolog == str(layout.task_prolog)
    assert paths.munge_key == str(layout.munge_key) and paths.munge_socket == str(layout.munge_socket)
    assert paths.db_dir == str(tmp_path / "c" / "mariadb")
    assert paths.daemon_log("slurmd-node1") == str(layout.daemon_log("slurmd-node1"))


def test_derived_paths_follow_etc_and_log():
    paths = NodePaths(etc="/etc/simcluster", log="/var/log/slurm", run="/r", spool="/s", state_save="/ss",
                      munge_key="/k", munge_socket="/m.sock", munge_dir="/m", dev="/dev", db_dir="/db")
    assert paths.slurm_conf == "/etc/simcluster/slurm.conf"
    assert paths.jwt_key == "/etc/simcluster/jwt_hs256.key" and paths.hosts_file == "/etc/simcluster/hosts"
    assert paths.daemon_log("slurmctld") == "/var/log/slurm/slurmctld.log"
    assert NodePaths.from_dict(paths.to_dict()) == paths and paths.root == ""
