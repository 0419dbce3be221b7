"""The pure planning of `simcluster scale`: names, shapes, GPUs, partitions, stranded jobs."""

from __future__ import annotations

import pytest

from provisioner.cluster.lifecycle import scale
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.errors import UsageError


def spec(names=("node1", "node2"), gpus=((0,), (1,)), fake=True, parts=None) -> ClusterSpec:
    nodes = tuple(NodeSpec(name=n, gpus=tuple(g), cpus=4, memory=8000, features=("ib",)) for n, g in zip(names, gpus))
    parts = parts or (PartitionSpec(name="main", nodes=tuple(names), default=True),)
    return ClusterSpec(name="c", backend="local", nodes=nodes, partitions=parts, fake_gpus=fake)


def test_next_names_follow_the_clusters_pattern():
    assert scale.next_names(["node6", "node7"], 2) == ["node8", "node9"]
    assert scale.next_names(["gpu01", "gpu02"], 1) == ["gpu03"]
    assert scale.next_names(["head"], 1) == ["node1"]


def test_new_nodes_copy_the_last_node_and_take_the_next_fake_gpus():
    new = scale.new_nodes(spec(), 2)
    assert [(n.name, n.gpus, n.cpus, n.features) for n in new] == [("node3", (2,), 4, ("ib",)), ("node4", (3,), 4, ("ib",))]
    assert [n.cpus for n in scale.new_nodes(spec(), 1, cpus=8)] == [8]


def test_real_gpus_must_be_given_and_not_clash():
    with pytest.raises(UsageError, match="say which GPUs"):
        scale.new_nodes(spec(fake=False), 1)
    assert scale.new_nodes(spec(fake=False), 2, gpus=[4, 5, 6, 7])[1].gpus == (6, 7)
    assert scale.new_nodes(spec(fake=False), 1, gpus=[])[0].gpus == ()
    with pytest.raises(UsageError, match="already belongs"):
        scale.new_nodes(spec(fake=False), 1, gpus=[1])
    with pytest.raises(UsageError, match="evenly"):
        scale.new_nodes(spec(), 2, gpus=[4, 5, 6])


def test_new_nodes_join_the_partitions_of_the_last_node():
    parts = (PartitionSpec(name="main", nodes=("node1", "node2"), default=True), PartitionSpec(name="one", nodes=("node1",)))
    grown = scale.grown(spec(parts=parts), scale.new_nodes(spec(parts=parts), 1))
    assert [p.nodes for p in grown.partitions] == [("node1", "node2", "node3"), ("node1",)]


def test_shrunk_refuses_empty_clusters_and_partitions():
    parts = (PartitionSpec(name="main", nodes=("node1", "node2"), default=True), PartitionSpec(name="two", nodes=("node2",)))
    assert [n.name for n in scale.shrunk(spec(), ["node2"]).nodes] == ["node1"]
    with pytest.raises(UsageError, match="partition 'two'"):
        scale.shrunk(spec(parts=parts), ["node2"])
    with pytest.raises(UsageError, match="without nodes"):
        scale.shrunk(spec(), ["node1", "node2"])
    with pytest.raises(UsageError, match="no node node9"):
        scale.shrunk(spec(), ["node9"])


def test_target_adds_or_removes_the_newest():
    s = spec(("node1", "node2", "node3"), ((0,), (1,), (2,)))
    assert scale.target(s, 5) == (2, [])
    assert scale.target(s, 1) == (0, ["node2", "node3"])
    with pytest.raises(UsageError):
        scale.target(s, 0)


def test_stranded_jobs_need_more_nodes_or_a_leaving_node():
    jobs = scale.parse_squeue("7|PENDING|main|3||\n8|PENDING|main|1||node[2-3]\n9|PENDING|main|1||\n")
    assert jobs[1].required == ("node2", "node3")
    left = scale.shrunk(spec(("node1", "node2", "node3"), ((0,), (1,), (2,))), ["node3"])
    why = dict((j.id, w) for j, w in scale.stranded(jobs, left))
    assert set(why) == {"7", "8"} and "node3 by name" in why["8"] and "would have 2" in why["7"]
