"""`fault net NODE` (provisioner/cluster/faults/net.py): its row, the command it runs per
backend, its refusal where a node has no network of its own, and its undo: heal's, and
the one stop, start and a repairing up do first."""

from __future__ import annotations

from dataclasses import replace

import pytest

from provisioner.cluster.faults import net
from provisioner.cluster.faults.record import active
from provisioner.cluster.faults.registry import fault_named, node_problems, undo_first_faults
from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.cluster.model.state import ClusterState
from provisioner.errors import UsageError
from tests.unit.cluster.fakes import (FakeMachinesProvider, FakeProvider, ScriptedRunner, home,  # noqa: F401
                                      make_cluster)


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


class LocalWithPrefix(LocalLike):
    """A local-like provider whose placement starts each slurmd in a namespace file."""

    def __init__(self, runner, netns_dir):
        super().__init__(runner)
        self.netns_dir = netns_dir

    def placement(self, state):
        return replace(super().placement(state), slurmd_prefix=(
            "simcluster-node-start", "--net", f"{self.netns_dir}/ns-{NODE_TOKEN}", "--init", "--"))


class DockerStopped(DockerLike, FakeMachinesProvider):
    """Docker-like, its containers stopped."""

    def machines_running(self, state):
        return {k: self.running for k in ("controller", *(n["name"] for n in state.spec["nodes"]))}


def test_reconnect_enters_the_namespace_file_where_no_slurmd_runs(home, tmp_path):
    (tmp_path / "ns-node2").write_text("")  # the namespace outlives the node's slurmd
    runner = ScriptedRunner({("nsenter",): (0, "", "")})
    c = make_cluster("n5", LocalWithPrefix(runner, tmp_path), pids={"munged": 11, "slurmctld": 12})
    assert net.reconnect(c, {"what": "net", "node": "node2"}) == "node2 back on the network"
    assert runner.calls[-1] == ["nsenter", f"--net={tmp_path}/ns-node2", "ip", "link", "set", "eth0", "up"]


def test_reconnect_of_a_stopped_machine_has_nothing_to_undo(home):
    runner = ScriptedRunner()
    c = make_cluster("n6", DockerStopped(runner, running=False))
    assert "machine starts with a fresh one" in net.reconnect(c, {"what": "net", "node": "node1"})
    assert runner.calls == []


def test_stop_start_and_repair_undo_it_first_and_keep_the_other_records(home, monkeypatch):
    monkeypatch.setattr(net.os, "geteuid", lambda: 0)
    monkeypatch.setattr(net, "_netns_of", lambda pid: f"net:[{pid}]")
    runner = ScriptedRunner({("nsenter",): (0, "", "")})
    c = make_cluster("n7", LocalLike(runner))
    net.disconnect_node(c, "node1")
    c.state.faults.append({"what": "drain", "node": "node2"})
    assert undo_first_faults(c) == ["node1 back on the network"]
    assert runner.calls[-1][-1] == "up"
    assert [f["what"] for f in c.state.faults] == ["drain"]
    assert [f["what"] for f in ClusterState.load(c.state.layout).faults] == ["drain"]  # saved
    assert undo_first_faults(c) == []  # nothing left: no command
    assert runner.calls[-1][-1] == "up" and len([x for x in runner.calls if x[-1] == "up"]) == 1
