"""A local node's cgroup v1 tree (providers/local/cgroups.py): its fstab mounts and the join
script (pure logic; the limits themselves: tests/integration/test_node_isolation.py)."""

from __future__ import annotations

from provisioner.providers.local import cgroupfs, cgroups


def test_node_cgroup_mounts_are_a_fresh_tmpfs_then_every_v1_hierarchy(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
                      "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
                      "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0\n"
                      "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
                      "proc /proc proc rw 0 0\n")
    lines = cgroups.fstab_lines(str(mounts))
    assert lines[0].split()[1:3] == ["/sys/fs/cgroup", "tmpfs"]
    # Not the host's own source name: `mount -a` would take the hierarchy as mounted already.
    assert all(line.split()[0] == cgroupfs.MOUNT_SOURCE for line in lines)
    # Only the hierarchies a node has a cgroup in (CONTROLLERS): not cpu,cpuacct here.
    assert lines[1:] == [f"{cgroupfs.MOUNT_SOURCE} /sys/fs/cgroup/memory cgroup rw,memory,X-mount.mkdir 0 0"]


def test_the_join_script_moves_the_shell_into_every_controller_of_its_node():
    text = cgroups.join_script("abc123")
    for c in cgroups.CONTROLLERS:
        assert f"/sys/fs/cgroup/{c}/simcluster/abc123" in text
    assert 'echo $$ > "$d/$0/cgroup.procs"' in text and text.endswith('exec "$@"')
