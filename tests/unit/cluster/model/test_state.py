"""A cluster's state.json (cluster/model/state.py): written whole, read back as it was, an
unreadable or foreign file is no cluster; the ports other clusters hold."""

from __future__ import annotations

import json

import pytest

from provisioner.cluster.model.state import ClusterState, all_states, reserved_ports
from provisioner.paths import ClusterLayout


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMCLUSTER_HOME", str(tmp_path))
    return tmp_path


def state(home, name: str, **kw) -> ClusterState:
    layout = ClusterLayout.for_name(name, home)
    layout.root.mkdir(parents=True, exist_ok=True)
    st = ClusterState(name=name, backend="local", spec={"name": name}, root=str(layout.root), hostname="h",
                      user="u", controller_port=kw.pop("controller_port", 20000),
                      node_ports=kw.pop("node_ports", {"node1": 20001}), **kw)
    st.save()
    return st


def test_saved_state_loads_back_equal_and_no_temporary_file_is_left(home):
    st = state(home, "c1", pids={"slurmctld": 12, "slurmd:node1": 20}, faults=[{"what": "drain", "node": "node1"}])
    again = ClusterState.load(st.layout)
    assert again == st
    assert [p.name for p in st.layout.root.iterdir()] == ["state.json"]


def test_a_broken_or_foreign_file_is_no_cluster(home):
    layout = ClusterLayout.for_name("c2", home)
    layout.root.mkdir()
    assert ClusterState.load(layout) is None  # none at all
    layout.state_file.write_text("{not json")
    assert ClusterState.load(layout) is None
    layout.state_file.write_text(json.dumps({"name": "c2", "unknown_key": 1}))
    assert ClusterState.load(layout) is None


def test_runner_key_of_a_daemon():
    assert ClusterState.runner_key("slurmd:node7") == "node7"
    assert ClusterState.runner_key("munged:node2") == "node2"
    assert ClusterState.runner_key("slurmctld") == "controller"


def test_reserved_ports_are_every_other_clusters(home):
    state(home, "a", controller_port=21000, node_ports={"node1": 21001, "node2": 21002}, mariadb_port=21003)
    state(home, "b", controller_port=22000, node_ports={"node1": 22001}, rest_port=22009)
    (home / "not-a-cluster").mkdir()
    assert [s.name for s in all_states()] == ["a", "b"]
    assert sorted(reserved_ports(exclude="b")) == [21000, 21001, 21002, 21003]
    assert sorted(reserved_ports()) == [21000, 21001, 21002, 21003, 22000, 22001, 22009]
