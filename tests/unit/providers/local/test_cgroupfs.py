"""What the local nodes' cgroups read of the host (providers/local/cgroupfs.py), on a tree
made in a temporary directory."""

from __future__ import annotations

from provisioner.providers.local import cgroupfs


def test_v2_is_a_root_with_cgroup_controllers_and_they_are_read_from_it(tmp_path):
    assert not cgroupfs.is_v2(tmp_path) and cgroupfs.controllers_of(tmp_path) == []
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert cgroupfs.is_v2(tmp_path)
    assert cgroupfs.controllers_of(tmp_path) == ["cpuset", "cpu", "io", "memory", "pids"]


def test_remove_tree_goes_deepest_first_and_says_what_stayed(tmp_path):
    top = tmp_path / "simcluster" / "abc"
    (top / "node1" / "init").mkdir(parents=True)
    (top / "node2").mkdir()
    assert cgroupfs.remove_tree(top) == [] and not top.exists()
    (top / "node1").mkdir(parents=True)
    (top / "node1" / "a-file").write_text("")  # a cgroup with processes stays, as a full dir does
    left = cgroupfs.remove_tree(top)
    assert left == [str(top / "node1"), str(top)]


def test_probe_says_why_a_cgroup_cannot_be_made(tmp_path):
    assert cgroupfs.probe(tmp_path / "probe") == "" and not (tmp_path / "probe").exists()
    why = cgroupfs.probe(tmp_path / "missing" / "probe")
    assert why.startswith("cannot make a cgroup (") and why.endswith("limits are not enforced")


def test_slurm_release_is_major_and_minor():
    assert cgroupfs.slurm_release("22.05.8") == (22, 5)
    assert cgroupfs.slurm_release("slurm-wlm 24.11.5-1") == (24, 11)
    assert cgroupfs.slurm_release(None) is None and cgroupfs.slurm_release("unknown") is None
