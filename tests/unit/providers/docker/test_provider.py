"""The docker backend's container settings and placement, computed without an engine."""

from __future__ import annotations

import json

from provisioner.cluster.placement import CONTROLLER
from provisioner.cluster.state import ClusterState
from provisioner.config.types import ClusterSpec
from provisioner.paths import ClusterLayout
from provisioner.providers.docker.engine import LABEL_CLUSTER, LABEL_SPEC_JSON
from provisioner.providers.docker.provider import DockerProvider, container_config
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
