"""The docker backend's container settings and placement, computed without an engine."""

from __future__ import annotations

import json
import subprocess

from provisioner.cluster.model.placement import CONTROLLER
from provisioner.cluster.model.state import ClusterState
from provisioner.config.types import ClusterSpec
from provisioner.paths import ClusterLayout
from provisioner.providers.docker.engine import LABEL_CLUSTER, LABEL_SPEC_JSON
from provisioner.providers.docker.node_containers import container_config, foreign_gpus_script
from provisioner.providers.docker.node_features import UNPRIVILEGED_NOTE, cgroups_note
from provisioner.providers.docker.provider import DockerProvider
from provisioner.render import render_all
from tests.unit.conftest import spec_from


def test_real_gpus_are_a_device_request_per_node_and_the_controller_carries_the_spec(tmp_path):
    s = spec_from({"backend": "docker", "nodes": [{"name": "node1", "gpus": [0]}, {"name": "node2", "gpus": [7, 3]}]})
    layout = ClusterLayout(tmp_path / "t")
    node = container_config(s, layout, "img:1", "node2")
    assert node["hostname"] == "node2" and node["init"] and not node["privileged"]
    assert node["device_requests"][0]["DeviceIDs"] == ["7,3"]
    assert node["volumes"][str(layout.etc)] == {"bind": "/etc/simcluster", "mode": "ro"}
    # ... and again where Slurm's commands look without SLURM_CONF, read-only too.
    assert [(m["Target"], m["Source"], m["Type"], m["ReadOnly"]) for m in node["mounts"]] == \
        [("/etc/slurm", str(layout.etc), "bind", True)]
    assert LABEL_SPEC_JSON not in node["labels"] and node["labels"][LABEL_CLUSTER] == s.name

    fake = ClusterSpec.from_dict({**s.to_dict(), "fake_gpus": True, "privileged": True})
    node = container_config(fake, layout, "img:1", "node2")
    assert "device_requests" not in node and node["privileged"]

    ctl = container_config(s, layout, "img:1", None)
    assert ctl["hostname"] == "slurmctld" and "device_requests" not in ctl
    assert ClusterSpec.from_dict(json.loads(ctl["labels"][LABEL_SPEC_JSON])) == s


def test_placement_runs_a_munged_per_container_and_shares_job_files(tmp_path):
    s = spec_from({"backend": "docker", "nodes": 2})
    state = ClusterState(name=s.name, backend="docker", spec=s.to_dict(), root=str(tmp_path / "c"), hostname="h",
                         user="u", controller_port=6817, node_ports={n.name: 6818 for n in s.nodes})
    pl = DockerProvider().placement(state)
    assert pl.munged_on == [CONTROLLER, "node1", "node2"] and pl.daemon_user == "root"
    assert pl.paths.munge_socket == "/run/munge/munge.socket.2" and pl.gpus_renumbered
    assert (pl.job_root, pl.job_root_in_cluster) == (tmp_path / "c" / "shared", "/shared")
    assert DockerProvider().runner(state, "node1").exec_prefix("/shared", False) == [
        "docker", "exec", "-i", "-w", "/shared", f"simcluster-{s.name}-node1"]


def _state(tmp_path, spec, **provider_data) -> ClusterState:
    state = ClusterState(name=spec.name, backend="docker", spec=spec.to_dict(), root=str(tmp_path / "c"),
                         hostname="h", user="u", controller_port=6817, node_ports={n.name: 6818 for n in spec.nodes})
    state.provider_data.update(provider_data)
    return state


def test_only_privileged_containers_enforce_limits_on_cgroup_v1_and_v2_hosts():
    assert cgroups_note(True, "1") == "" and cgroups_note(True, "2") == ""
    assert cgroups_note(False, "1") == UNPRIVILEGED_NOTE and "'up --privileged'" in UNPRIVILEGED_NOTE
    assert cgroups_note(False, "2") == UNPRIVILEGED_NOTE
    # An image whose entrypoint does not prepare the cgroup v2 tree (built before): not on v2.
    old = cgroups_note(True, "2", ["accounting", "containers", "boot"], "img:old")
    assert old.startswith("not enforced: image img:old was built before cgroup v2") and "simcluster image build" in old
    assert cgroups_note(True, "1", ["accounting"], "img:old") == ""
    assert cgroups_note(True, "2", ["boot", "cgroup2"], "img:new") == ""
    # An engine that does not say its host's cgroup version: nothing is promised.
    assert cgroups_note(True, None).startswith("not enforced: ")
    for note in (UNPRIVILEGED_NOTE, cgroups_note(True, None)):
        assert "\n" not in note and note.startswith("not enforced: ")


def test_node_containers_get_a_private_cgroup_namespace_where_limits_are_enforced(tmp_path):
    s = spec_from({"backend": "docker", "nodes": 2, "privileged": True})
    layout = ClusterLayout(tmp_path / "t")
    assert container_config(s, layout, "img:1", "node1", cgroups=True)["cgroupns"] == "private"
    assert "cgroupns" not in container_config(s, layout, "img:1", None, cgroups=True)  # the controller: no slurmd
    assert "cgroupns" not in container_config(s, layout, "img:1", "node1")  # the engine's default


def test_placement_of_an_unprivileged_cluster_renders_no_cgroups_and_says_why(tmp_path):
    s = spec_from({"backend": "docker", "nodes": 2})
    pl = DockerProvider().placement(_state(tmp_path, s, cgroups=False, cgroups_note=UNPRIVILEGED_NOTE))
    assert not pl.render.cgroups and pl.render.host_cpus is None
    assert pl.node_cgroups == UNPRIVILEGED_NOTE
    assert pl.node_network == f"a container each on docker network simcluster-{s.name} (own address and ports)"
    # A state from before the decision was recorded: unprivileged, nothing enforced.
    assert DockerProvider().placement(_state(tmp_path, s)).node_cgroups == UNPRIVILEGED_NOTE
    conf = render_all(s, pl.render)
    assert "ProctrackType=proctrack/linuxproc" in conf["slurm.conf"]


def test_placement_of_a_privileged_v1_cluster_renders_cgroup_plugins(tmp_path):
    s = spec_from({"backend": "docker", "nodes": 2, "cpus": 2, "privileged": True})
    pl = DockerProvider().placement(_state(tmp_path, s, cgroups=True, cgroups_note="", host_cpus=4))
    assert pl.render.cgroups and pl.render.host_cpus == 4 and pl.gpus_renumbered
    assert pl.node_cgroups == ("enforced: proctrack/cgroup and task/cgroup in each node container's own cgroup "
                               "namespace (--mem, GPU devices, cores)")
    conf = render_all(s, pl.render)
    assert "ProctrackType=proctrack/cgroup" in conf["slurm.conf"]
    assert "TaskPlugin=task/cgroup,task/affinity" in conf["slurm.conf"]
    assert "ConstrainRAMSpace=yes" in conf["cgroup.conf"] and "ConstrainCores=yes" in conf["cgroup.conf"]
    # Nodes that claim more CPUs than the engine's host has: limits, but no pinned cores.
    big = spec_from({"backend": "docker", "nodes": 2, "cpus": 8, "privileged": True})
    pl = DockerProvider().placement(_state(tmp_path, big, cgroups=True, cgroups_note="", host_cpus=4))
    assert "cores not pinned" in pl.node_cgroups
    assert "ConstrainCores=no" in render_all(big, pl.render)["cgroup.conf"]
    # cgroup v1 (and states from before the version was recorded): autodetect finds it.
    assert "IgnoreSystemd" not in conf["cgroup.conf"] and "CgroupPlugin=autodetect" in conf["cgroup.conf"]


def test_placement_on_a_cgroup_v2_host(tmp_path):
    """Privileged: cgroup/v2 with no systemd in the node (slurmd makes its own scope);
    status says cgroup v2. Unprivileged: nothing enforced, and slurmd loads a cgroup plugin
    that asks nothing of the read-only tree (autodetect's cgroup/v2 would stop it)."""
    s = spec_from({"backend": "docker", "nodes": 2, "cpus": 2, "privileged": True})
    pl = DockerProvider().placement(_state(tmp_path, s, cgroups=True, cgroups_note="", host_cpus=4,
                                           cgroup_version="2"))
    assert pl.node_cgroups == ("enforced: proctrack/cgroup and task/cgroup (cgroup v2) in each node container's "
                               "own cgroup namespace (--mem, GPU devices, cores)")
    conf = render_all(s, pl.render)
    assert "ProctrackType=proctrack/cgroup" in conf["slurm.conf"]
    assert "IgnoreSystemd=yes" in conf["cgroup.conf"] and "CgroupPlugin=autodetect" in conf["cgroup.conf"]
    assert "ConstrainRAMSpace=yes" in conf["cgroup.conf"]
    plain = spec_from({"backend": "docker", "nodes": 2})
    pl = DockerProvider().placement(_state(tmp_path, plain, cgroups=False, cgroups_note=UNPRIVILEGED_NOTE,
                                           cgroup_version="2"))
    assert pl.node_cgroups == UNPRIVILEGED_NOTE and pl.shortfalls == [f"limits: {UNPRIVILEGED_NOTE}"]
    conf = render_all(plain, pl.render)
    assert "ProctrackType=proctrack/linuxproc" in conf["slurm.conf"]
    assert "CgroupPlugin=cgroup/v1" in conf["cgroup.conf"] and "IgnoreSystemd" not in conf["cgroup.conf"]
    newer = spec_from({"backend": "docker", "nodes": 2, "slurm": "24.11"})
    pl = DockerProvider().placement(_state(tmp_path, newer, cgroups=False, cgroups_note=UNPRIVILEGED_NOTE,
                                           cgroup_version="2"))
    assert "CgroupPlugin=disabled" in render_all(newer, pl.render)["cgroup.conf"]


def test_a_privileged_node_keeps_only_its_own_gpu_device_nodes(tmp_path):
    for name in ("nvidia0", "nvidia2", "nvidia3", "nvidia12", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    script = foreign_gpus_script([2, 3]).replace("/dev/", f"{tmp_path}/")
    subprocess.run(["sh", "-c", script], check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nvidia-uvm", "nvidia2", "nvidia3", "nvidiactl"]
    subprocess.run(["sh", "-c", foreign_gpus_script([]).replace("/dev/", f"{tmp_path}/")], check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nvidia-uvm", "nvidiactl"]
    empty = tmp_path / "none"
    empty.mkdir()  # no GPU device at all: nothing to do, no error
    subprocess.run(["sh", "-c", foreign_gpus_script([0]).replace("/dev/", f"{empty}/")], check=True)
