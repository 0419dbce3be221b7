"""cgroup v2 hosts without systemd (containers, VMs): slurmd makes its slurmstepd scope
itself. Seen on a GPU machine (Firecracker VM, cgroup v2, no D-Bus): without this, every
slurmd stopped at start ("cannot connect to dbus system daemon")."""

from __future__ import annotations

from dataclasses import replace

from provisioner.providers.local import cgroups
from provisioner.render import render_all
from tests.unit.conftest import fixed_inputs, spec_from


def test_v2_without_dbus_is_recognised(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert cgroups.v2_without_systemd(tmp_path, str(tmp_path / "no-socket"))
    socket = tmp_path / "bus"
    socket.write_text("")
    assert not cgroups.v2_without_systemd(tmp_path, str(socket))  # systemd's D-Bus answers there
    assert not cgroups.v2_without_systemd(tmp_path / "v1-host", str(tmp_path / "no-socket"))


def test_prepare_makes_the_slice_and_enables_controllers(tmp_path):
    for d in (tmp_path, tmp_path / cgroups.V2_SLICE):
        d.mkdir(exist_ok=True)
        (d / "cgroup.subtree_control").write_text("")
    assert cgroups.prepare_v2_without_systemd(tmp_path) == ""
    assert (tmp_path / "cgroup.subtree_control").read_text() == cgroups.V2_CONTROLLERS
    assert (tmp_path / cgroups.V2_SLICE / "cgroup.subtree_control").read_text() == cgroups.V2_CONTROLLERS


def test_prepare_says_what_it_could_not_do(tmp_path):
    assert "cannot make" in cgroups.prepare_v2_without_systemd(tmp_path / "missing" / "deeper")


def test_cgroup_conf_says_ignore_systemd_only_where_asked():
    spec = spec_from({"name": "v2", "nodes": 1})
    inputs = fixed_inputs(spec)
    assert "IgnoreSystemd" not in render_all(spec, inputs)["cgroup.conf"]
    text = render_all(spec, replace(inputs, cgroup_ignore_systemd=True))["cgroup.conf"]
    assert "\nIgnoreSystemd=yes\n" in text
