"""`fault net NODE` (provisioner/cluster/faults/net.py): its row, the command it runs per
backend, its refusal where a node has no network of its own, and heal's undo."""

from __future__ import annotations

import pytest

from provisioner.cluster.faults import net
from provisioner.cluster.faults.record import active
from provisioner.cluster.faults.registry import fault_named, node_problems
from provisioner.errors import UsageError
from tests.unit.cluster.fakes import FakeProvider, ScriptedRunner, home, make_cluster  # noqa: F401


class LocalLike(FakeProvider):
    name = "local"


class DockerLike(FakeProvider):
    name = "docker"


def test_the_row_undoes_it_before_the_repair():
    row = fault_named("net")
    assert row.target == "node" and row.undo is net.reconnect and row.undo_first
    assert node_problems([{"what": "net", "node": "node2"}]) == {"node2": "off the network by 'simcluster fault net'"}


def test_local_sets_the_interface_down_in_the_slurmd_namespace_and_heal_up(home, monkeypatch):
    monkeypatch.setattr(net.os, "geteuid", lambda: 0)
    monkeypatch.setattr(net, "_netns_of", lambda pid: f"net:[{pid}]")  # every process its own
    runner = ScriptedRunner({("nsenter",): (0, "", "")})
    c = make_cluster("n1", LocalLike(runner))
    assert net.disconnect_node(c, "node2").startswith("took node node2 off the network")
    assert runner.calls[-1] == ["nsenter", "--net=/proc/21/ns/net", "ip", "link", "set", "eth0", "down"]
    assert [f["node"] for f in active(c, "net")] == ["node2"]
    with pytest.raises(UsageError, match="node node2 is already off the network"):
        net.disconnect_node(c, "node2")
    assert net.reconnect(c, active(c, "net")[0]) == "node2 back on the network"
    assert runner.calls[-1][-1] == "up"


@pytest.mark.parametrize("euid, shared, why", [(0, True, "no namespace per node"), (1000, False, "without root")])
def test_refuses_where_a_node_has_no_network_of_its_own(home, monkeypatch, euid, shared, why):
    monkeypatch.setattr(net.os, "geteuid", lambda: euid)
    monkeypatch.setattr(net, "_netns_of", lambda pid: "net:[1]" if shared else f"net:[{pid}]")
    runner = ScriptedRunner()
    c = make_cluster("n2", LocalLike(runner))
    with pytest.raises(UsageError, match=f"nodes have no network of their own .*{why}"):
        net.disconnect_node(c, "node1")
    assert runner.calls == [] and c.state.faults == []
    with pytest.raises(UsageError, match="no network of their own"):
        net.disconnect_node(make_cluster("n3", FakeProvider()), "node1")


def test_docker_runs_it_in_the_container_and_a_failure_is_one_line(home):
    runner = ScriptedRunner({("ip",): (2, "", "RTNETLINK answers: Operation not permitted")})
    c = make_cluster("n4", DockerLike(runner))
    with pytest.raises(UsageError, match="setting node1's network down failed: RTNETLINK answers: Operation not"):
        net.disconnect_node(c, "node1")
    assert runner.calls[-1] == ["ip", "link", "set", "eth0", "down"] and c.state.faults == []
