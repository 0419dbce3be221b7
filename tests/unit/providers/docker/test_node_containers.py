"""A docker cluster's containers as the engine makes them (providers/docker/node_containers.py):
the SDK's run() arguments (pure logic)."""

from __future__ import annotations

from provisioner.paths import ClusterLayout
from provisioner.providers.docker.node_containers import container_config
from tests.unit.conftest import spec_from


def test_node_containers_get_sys_admin_no_seccomp_filter_and_no_apparmor_where_the_engine_uses_it(tmp_path):
    spec = spec_from({"backend": "docker", "nodes": [{"name": "node1"}, {"name": "node2"}]})
    layout = ClusterLayout(tmp_path)
    node = container_config(spec, layout, "img", spec.nodes[0].name, apparmor=True)
    assert node["cap_add"] == ["SYS_ADMIN"] and node["security_opt"] == ["seccomp=unconfined", "apparmor=unconfined"]
    # seccomp: crun (srun --container) needs pivot_root and a keyring, which docker's profile refuses.
    assert container_config(spec, layout, "img", spec.nodes[0].name)["security_opt"] == ["seccomp=unconfined"]
    assert "cap_add" not in container_config(spec, layout, "img", None)  # the controller mounts nothing
