"""cgroup v2 hosts without systemd (containers, VMs): slurmd makes its slurmstepd scope
itself. Seen on a GPU machine (Firecracker VM, cgroup v2, no D-Bus): without this, every
slurmd stopped at start ("cannot connect to dbus system daemon")."""

from __future__ import annotations

from dataclasses import replace

from provisioner.providers.local import cgroups_v2
from provisioner.render import render_all
from tests.unit.conftest import fixed_inputs, spec_from


def test_v2_without_dbus_is_recognised(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert cgroups_v2.v2_without_systemd(tmp_path, str(tmp_path / "no-socket"))
    socket = tmp_path / "bus"
    socket.write_text("")
    assert not cgroups_v2.v2_without_systemd(tmp_path, str(socket))  # systemd's D-Bus answers there
    assert not cgroups_v2.v2_without_systemd(tmp_path / "v1-host", str(tmp_path / "no-socket"))


def test_prepare_makes_the_slice_and_enables_controllers(tmp_path):
    for d in (tmp_path, tmp_path / cgroups_v2.V2_SLICE):
        d.mkdir(exist_ok=True)
        (d / "cgroup.subtree_control").write_text("")
    assert cgroups_v2.prepare_v2_without_systemd(tmp_path) == ""
    assert (tmp_path / "cgroup.subtree_control").read_text() == cgroups_v2.V2_CONTROLLERS
    assert (tmp_path / cgroups_v2.V2_SLICE / "cgroup.subtree_control").read_text() == cgroups_v2.V2_CONTROLLERS


def test_prepare_says_what_it_could_not_do(tmp_path):
    assert "cannot make" in cgroups_v2.prepare_v2_without_systemd(tmp_path / "missing" / "deeper")


def test_cgroup_conf_says_ignore_systemd_only_where_asked():
    spec = spec_from({"name": "v2", "nodes": 1})
    inputs = fixed_inputs(spec)
    assert "IgnoreSystemd" not in render_all(spec, inputs)["cgroup.conf"]
    text = render_all(spec, replace(inputs, cgroup_ignore_systemd=True))["cgroup.conf"]
    assert "\nIgnoreSystemd=yes\n" in text


# -- nodes with cgroup v2 limits (cgroups_v2.py) -------------------------------

import struct

import pytest

from provisioner.providers.local import bpfdevices, names


def run_device_program(code: bytes, dev_type: int, major: int, minor: int, access: int = 6) -> int:
    """Run the few instructions bpfdevices.program emits on one device context, as the
    kernel would: r1 points at (access << 16 | type, major, minor)."""
    ctx = struct.pack("<III", (access << 16) | dev_type, major, minor)
    regs, pc = [0] * 11, 0
    insns = [struct.unpack_from("<BBhi", code, i) for i in range(0, len(code), 8)]
    while True:
        op, regbits, off, imm = insns[pc]
        dst, src = regbits & 0xF, regbits >> 4
        if op == 0x61:  # r_dst = *(u32 *)(r_src + off); r1 is the context
            assert src == 1
            regs[dst] = struct.unpack_from("<I", ctx, off)[0]
        elif op == 0x54:  # w_dst &= imm
            regs[dst] &= imm
        elif op == 0x55:  # if r_dst != imm goto +off
            pc += off if regs[dst] != imm else 0
        elif op == 0x15:  # if r_dst == imm goto +off
            pc += off if regs[dst] == imm else 0
        elif op == 0xB7:  # r_dst = imm
            regs[dst] = imm
        elif op == 0x95:  # exit: r0 is the verdict
            return regs[0]
        else:
            raise AssertionError(f"unexpected opcode {op:#x}")
        pc += 1


@pytest.mark.parametrize("minors", [[1], [0, 2, 7], list(range(64))])
def test_device_program_denies_only_the_other_nodes_gpus(minors):
    code = bpfdevices.program(195, minors)
    char, block = bpfdevices.BPF_DEVCG_DEV_CHAR, 1
    for m in minors:
        assert run_device_program(code, char, 195, m) == 0  # another node's GPU: denied
    own = next(m for m in range(100) if m not in minors)
    assert run_device_program(code, char, 195, own) == 1  # the node's own GPU: Slurm decides
    assert run_device_program(code, block, 195, minors[0]) == 1  # a block device with those numbers
    assert run_device_program(code, char, 1, minors[0]) == 1  # /dev/null and the like (1:3)
    assert run_device_program(code, char, 136, 0) == 1  # a pty


def test_slurm_plugin_keeps_v2_where_nodes_use_cgroups(tmp_path):
    v1_host, v2_host = tmp_path / "v1", tmp_path / "v2"
    v1_host.mkdir()
    v2_host.mkdir()
    (v2_host / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert cgroups_v2.slurm_plugin(True, "22.05.8", v2_host) == "autodetect"
    assert cgroups_v2.slurm_plugin(False, "22.05.8", v1_host) == "autodetect"
    # Rootless on cgroup v2: slurmd must not load cgroup/v2, which would make cgroups.
    assert cgroups_v2.slurm_plugin(False, "22.05.8", v2_host) == "cgroup/v1"
    assert cgroups_v2.slurm_plugin(False, "24.11.5", v2_host) == "disabled"
    assert cgroups_v2.slurm_plugin(False, None, v2_host) == "cgroup/v1"


def test_cgroup_conf_names_the_plugin_it_is_given():
    spec = spec_from({"name": "v2", "nodes": 1})
    inputs = fixed_inputs(spec)
    assert "\nCgroupPlugin=autodetect\n" in render_all(spec, inputs)["cgroup.conf"]
    text = render_all(spec, replace(inputs, cgroup_plugin="cgroup/v1"))["cgroup.conf"]
    assert "\nCgroupPlugin=cgroup/v1\n" in text and "autodetect" not in text


def test_a_node_enters_its_kept_cgroup_namespace_instead_of_making_one():
    ns = cgroups_v2.cgroup_ns_path("abc123", "@NODE@")
    procs = ["/sys/fs/cgroup/simcluster/abc123/@NODE@/init/cgroup.procs"]
    starter = names.namespace_prefix("/f.fstab", 0, 0, "/usr/bin/tini", "/spool", cgroup_procs=procs,
                                     starter="/x/simcluster-node-start", cgroup_ns=ns)
    assert starter[starter.index("--cgroupns") + 1] == ns
    assert starter[starter.index("--cgroup-procs") + 1] == procs[0]
    chain = names.namespace_prefix("/f.fstab", 0, 0, "/usr/bin/tini", "/spool", cgroup_join="echo", cgroup_ns=ns)
    assert any(a == f"--cgroup={ns}" for a in chain)
    unshare = next(i for i, a in enumerate(chain) if a.endswith("unshare"))
    assert "--cgroup" not in chain[unshare:]  # entered, not made: its root is the node's cgroup
    assert chain.index(f"--cgroup={ns}") < unshare
    # cgroup v1: a namespace made where the process is, as before.
    v1 = names.namespace_prefix("/f.fstab", 0, 0, "/usr/bin/tini", "/spool", cgroup_join="echo")
    assert "--cgroup" in v1 and not any(a.startswith("--cgroup=") for a in v1)
    assert not any("umount" in a or "/init/cgroup.procs" in a for a in v1)


def test_v2_node_keeps_its_init_leaf_to_its_own_processes():
    """Slurm 24.11's cgroup/v2 in the node: the host's /sys/fs/cgroup leaves the node's mount
    namespace before its own is mounted, and the process outside the node's PID namespace
    is not in N/init (the starter's outer half: --outer-cgroup-procs; the chain joins
    N/starter and its namespace script moves pid 1 and itself into N/init)."""
    ns = cgroups_v2.cgroup_ns_path("abc123", "@NODE@")
    outer = cgroups_v2.outer_procs_file_v2("abc123")
    assert outer == "/sys/fs/cgroup/simcluster/abc123/@NODE@/starter/cgroup.procs"
    starter = names.namespace_prefix("/f.fstab", 0, 0, "/usr/bin/tini", "/spool", cgroup_procs=["/p"],
                                     starter="/x/simcluster-node-start", cgroup_ns=ns, outer_cgroup_procs=outer)
    assert starter[starter.index("--outer-cgroup-procs") + 1] == outer
    chain = names.namespace_prefix("/f.fstab", 0, 0, "/usr/bin/tini", "/spool",
                                   cgroup_join=cgroups_v2.join_script_v2("abc123"), cgroup_ns=ns)
    script = next(a for a in chain if "mount" in a and "-a" in a)
    assert script.index("-l /sys/fs/cgroup") < script.index(" -a ")
    assert script.index(" -a ") < script.index("for p in 1 $$; do echo $p > /sys/fs/cgroup/init/cgroup.procs")
    no_pid_ns = names.namespace_prefix("/f.fstab", 0, 0, cgroup_join="echo", cgroup_ns=ns)
    assert any("for p in $$; do" in a for a in no_pid_ns)


def test_v2_node_mounts_its_own_cgroup2_over_a_tmpfs():
    lines = cgroups_v2.fstab_lines_v2()
    assert [ln.split()[1:3] for ln in lines] == [["/sys/fs/cgroup", "tmpfs"], ["/sys/fs/cgroup", "cgroup2"]]


def test_v2_node_cgroups_are_per_cluster():
    a, b = cgroups_v2.v2_node_dir("aaaaaa", "node1"), cgroups_v2.v2_node_dir("bbbbbb", "node1")
    assert a != b and a.parent.parent == b.parent.parent
    assert cgroups_v2.cgroup_ns_path("aaaaaa", "node1") != cgroups_v2.cgroup_ns_path("bbbbbb", "node1")
    assert cgroups_v2.join_script_v2("aaaaaa").startswith('echo $$ > "/sys/fs/cgroup/simcluster/aaaaaa/$0/starter/')
