"""--max-nodes: a subset that keeps node names and every partition's shapes."""

from __future__ import annotations

import pytest

from provisioner.like import LikeError
from provisioner.like.scale import needed, select
from tests.unit.conftest import spec_from

SHAPES = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "b2": "B", "c1": "C"}
ORDER = list(SHAPES)


def test_needed_is_one_node_per_shape_per_partition_shared_where_it_can():
    parts = [("gpu", ["a1", "a2", "b1", "b2"]), ("debug", ["a2", "b1"]), ("cpu", ["c1"])]
    assert needed(parts, SHAPES) == ["a1", "b1", "a2", "c1"]


def test_select_fills_the_budget_in_turn_and_keeps_the_confs_order():
    parts = [("gpu", ["a1", "a2", "a3", "b1", "b2"]), ("cpu", ["c1"])]
    assert select(ORDER, parts, SHAPES, 3) == ["a1", "b1", "c1"]
    assert select(ORDER, parts, SHAPES, 5) == ["a1", "a2", "a3", "b1", "c1"]
    assert select(ORDER, parts, SHAPES, 99) == ["a1", "a2", "a3", "b1", "b2", "c1"]
    assert select(ORDER, parts, SHAPES, 2) is None


def test_max_nodes_keeps_names_shapes_and_partitions(spec_of):
    conf = ("NodeName=DEFAULT CPUs=64 RealMemory=512000\n"
            "NodeName=gpu[001-128] Gres=gpu:h100:8 Features=ib\n"
            "NodeName=big[01-16] Gres=gpu:h100:8 Features=ib,nvlink\n"
            "NodeName=cpu[001-064]\n"
            "PartitionName=gpu Nodes=gpu[001-128],big[01-16] Default=YES\n"
            "PartitionName=cpu Nodes=cpu[001-064]\n"
            "PartitionName=debug Nodes=gpu[001-002],cpu[001-002] MaxTime=30\n")
    spec = spec_of(conf, max_nodes=5)
    assert [n.name for n in spec.nodes] == ["gpu001", "gpu002", "big01", "cpu001", "cpu002"]
    parts = {p.name: p.nodes for p in spec.partitions}
    assert parts == {"gpu": ("gpu001", "gpu002", "big01"), "cpu": ("cpu001", "cpu002"),
                     "debug": ("gpu001", "gpu002", "cpu001", "cpu002")}
    assert len(spec.all_gpus) == 24 and spec.fake_gpus


def test_too_few_says_how_many_are_needed(mirror_of):
    conf = "NodeName=a[1-4] CPUs=8\nNodeName=b[1-4] CPUs=16\nPartitionName=p Nodes=ALL\nPartitionName=q Nodes=b[1-4]\n"
    with pytest.raises(LikeError) as err:
        mirror_of(conf, max_nodes=1)
    assert err.value.message == ("--max-nodes 1 is too few: keeping one node of each shape in each partition needs 2 "
                                 "(shapes per partition: p: 2, q: 1)")
    assert err.value.hint == "give --max-nodes 2 or more"
    with pytest.raises(LikeError, match="give at least 1"):
        mirror_of(conf, max_nodes=0)


def test_partition_limits_above_the_kept_count_are_noted(mirror_of):
    m = mirror_of("NodeName=n[1-10]\nPartitionName=p Nodes=ALL MaxNodes=8 MinNodes=4\n", max_nodes=3)
    notes = "\n".join(m.report.notes)
    assert "--max-nodes 3: kept 3 of 10 nodes: n[1-3]" in notes
    assert "partition p: MaxNodes=8 kept, it has 3 nodes here" in notes
    assert "partition p: MinNodes=4 kept" in notes
    assert spec_from(m.raw).partitions[0].option("MaxNodes") == "8"


def test_too_many_fake_gpus_after_scaling(mirror_of):
    with pytest.raises(LikeError, match="the kept nodes have 320 GPUs, more than the 256"):
        mirror_of("NodeName=g[1-64] Gres=gpu:8\n", max_nodes=40)


def test_scaled_gpus_from_the_host(spec_of):
    spec = spec_of("NodeName=g[1-64] Gres=gpu:h100:2\n", max_nodes=2, gpus=[4, 5, 6, 7])
    assert [n.gpus for n in spec.nodes] == [(4, 5), (6, 7)] and not spec.fake_gpus
