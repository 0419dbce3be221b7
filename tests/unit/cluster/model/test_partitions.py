"""covering_partitions (cluster/model/partitions.py): the fewest jobs, one per partition, that
reach every node; the default partition first, nodes in no partition shown last."""

from __future__ import annotations

from dataclasses import replace

from provisioner.cluster.model.partitions import covering_partitions
from tests.unit.conftest import spec_from


def test_the_default_main_partition_is_one_job_and_no_partitions_too():
    spec = spec_from({"name": "c", "nodes": 3})
    assert covering_partitions(spec) == [("main", ["node1", "node2", "node3"])]
    assert covering_partitions(replace(spec, partitions=[])) == [(None, ["node1", "node2", "node3"])]


def test_the_default_partition_first_then_only_those_that_add_nodes():
    spec = spec_from({"name": "c", "nodes": 4, "partitions": [
        {"name": "big", "nodes": ["node1", "node2", "node3"]},
        {"name": "all", "nodes": ["node1", "node2", "node3", "node4"], "default": True},
        {"name": "two", "nodes": ["node3", "node4"]}]})
    assert covering_partitions(spec) == [("all", ["node1", "node2", "node3", "node4"])]


def test_disjoint_partitions_each_get_a_job_and_orphans_come_last():
    spec = spec_from({"name": "c", "nodes": 5, "partitions": [
        {"name": "a", "nodes": ["node1", "node2"], "default": True},
        {"name": "b", "nodes": ["node2", "node3", "node4"]}]})
    assert covering_partitions(spec) == [("a", ["node1", "node2"]), ("b", ["node2", "node3", "node4"]),
                                         (None, ["node5"])]
