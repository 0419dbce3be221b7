"""Cluster spec validation (provisioner/config/validate.py): defaults, every problem at once."""

from __future__ import annotations

import pytest

from provisioner.config.types import NodeSpec, PartitionSpec
from provisioner.config.validate import validate
from provisioner.errors import ConfigError, UsageError
from tests.unit.conftest import HOST_CPUS, HOST_MEMORY_MB, spec_from

def problems_of(raw) -> list:
    with pytest.raises(ConfigError) as info:
        spec_from(raw)
    return info.value.problems


def one_problem(raw) -> str:
    problems = problems_of(raw)
    assert len(problems) == 1, problems
    return problems[0]


# -- defaults ---------------------------------------------------------------------------

def test_empty_spec_gets_every_default():
    spec = spec_from({})
    assert spec.name == "default"
    assert spec.backend == "local"
    assert spec.nodes == (NodeSpec("node1", (), HOST_CPUS, HOST_MEMORY_MB, None),
                          NodeSpec("node2", (), HOST_CPUS, HOST_MEMORY_MB, None))
    assert spec.partitions == (PartitionSpec("main", ("node1", "node2"), True, "INFINITE"),)
    assert spec.fake_gpus is False
    assert spec.controller_port is None
    assert spec.slurm_conf_extra == ()
    assert spec.wait == 60.0
    assert spec.image is None and spec.privileged is False
    assert spec.all_gpus == []


def test_host_facts_are_the_default_shape():
    spec = spec_from({"nodes": 1}, host_cpus=7, host_memory_mb=1234)
    assert (spec.nodes[0].cpus, spec.nodes[0].memory) == (7, 1234)


def test_api_version_and_kind_are_optional_but_checked():
    spec = spec_from({"apiVersion": "simcluster/v1", "kind": "Cluster", "name": "a"})
    assert spec.name == "a"
    assert "apiVersion" in one_problem({"apiVersion": "simcluster/v2"})
    assert "kind" in one_problem({"kind": "Pod"})


# -- node count vs node list ------------------------------------------------------------

def test_node_count_names_nodes_with_the_prefix_and_splits_gpus_in_order():
    spec = spec_from({"nodes": 3, "gpus": "0-5", "nodePrefix": "gpu", "cpus": 16, "memory": "64G"})
    assert [n.name for n in spec.nodes] == ["gpu1", "gpu2", "gpu3"]
    assert [n.gpus for n in spec.nodes] == [(0, 1), (2, 3), (4, 5)]
    assert {(n.cpus, n.memory, n.port) for n in spec.nodes} == {(16, 65536, None)}


@pytest.mark.parametrize("nodes", [0, -1, 1025, "abc", True, 2.5, None])
def test_bad_node_counts(nodes):
    assert one_problem({"nodes": nodes}).startswith("nodes:")


def test_node_count_limits():
    assert len(spec_from({"nodes": 1}).nodes) == 1
    assert len(spec_from({"nodes": 1024}).nodes) == 1024


def test_explicit_node_list_with_per_node_shape():
    spec = spec_from({
        "cpus": 8, "memory": 16000,
        "nodes": [
            {"name": "a1", "gpus": "0,1", "cpus": 32, "memory": "200G", "port": 20001},
            {"name": "b2", "gpus": [5]},
            {"name": "c3"},
        ],
    })
    a, b, c = spec.nodes
    assert a == NodeSpec("a1", (0, 1), 32, 204800, 20001)
    assert b == NodeSpec("b2", (5,), 8, 16000, None)  # top-level shape is the default
    assert c == NodeSpec("c3", (), 8, 16000, None)
    assert spec.all_gpus == [0, 1, 5]
    assert spec.node("b2") is b
    with pytest.raises(KeyError):
        spec.node("nope")


def test_top_level_gpus_are_split_over_an_explicit_node_list():
    spec = spec_from({"gpus": "4-7", "nodes": [{"name": "x"}, {"name": "y"}]})
    assert [n.gpus for n in spec.nodes] == [(4, 5), (6, 7)]


def test_gpus_top_level_and_per_node_is_an_error():
    problem = one_problem({"gpus": "0,1", "nodes": [{"name": "x", "gpus": [0]}, {"name": "y"}]})
    assert "either at the top level or per node" in problem


def test_node_list_problems():
    assert "empty" in one_problem({"nodes": []})
    assert "listed twice" in one_problem({"nodes": [{"name": "a"}, {"name": "a"}]})
    assert "not a valid node name" in one_problem({"nodes": [{"name": "Node_1"}]})
    assert "not a valid node name" in one_problem({"nodes": [{"cpus": 2}]})
    assert "expected a mapping" in one_problem({"nodes": ["node1"]})
    assert "GPU 3 is given to more than one node" in one_problem(
        {"nodes": [{"name": "a", "gpus": [3]}, {"name": "b", "gpus": "2-3"}]})
    assert one_problem({"nodes": [{"name": "a", "port": 80}]}).startswith("nodes[0].port:")
    assert one_problem({"nodes": [{"name": "a", "cpus": 0}]}).startswith("nodes[0].cpus:")
    assert one_problem({"nodes": [{"name": "a", "memory": "lots"}]}).startswith("nodes[0].memory:")
    assert one_problem({"nodes": [{"name": "a", "gpus": "x"}]}).startswith("nodes[0].gpus:")


def test_duplicate_ports_including_the_controller_port():
    nodes = [{"name": "a", "port": 20001}, {"name": "b", "port": 20001}]
    assert one_problem({"nodes": nodes}) == "ports: port 20001 is used twice"
    nodes = [{"name": "a", "port": 20001}, {"name": "b", "port": 20002}]
    assert one_problem({"nodes": nodes, "controllerPort": 20002}) == "ports: port 20002 is used twice"
    assert spec_from({"nodes": nodes, "controllerPort": 20003}).controller_port == 20003
    assert one_problem({"controllerPort": 70000}).startswith("controllerPort:")


# -- shape values -----------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [(112, 112), ("28", 28), (100000, 100000)])
def test_cpus_accepted(value, expected):
    assert spec_from({"cpus": value, "nodes": 1}).nodes[0].cpus == expected


@pytest.mark.parametrize("value", [0, -3, 100001, "many", "²", 1.5, True])
def test_cpus_rejected(value):
    assert one_problem({"cpus": value}).startswith("cpus:")


@pytest.mark.parametrize("value, expected", [(240000, 240000), ("240G", 245760), ("1T", 1048576)])
def test_memory_accepted(value, expected):
    assert spec_from({"memory": value, "nodes": 1}).nodes[0].memory == expected


@pytest.mark.parametrize("value", ["12X", 0, "0", "1.5G", "", [1]])
def test_memory_rejected(value):
    assert one_problem({"memory": value}).startswith("memory:")


# -- fake GPUs --------------------------------------------------------------------------

def test_fake_gpus_true_fakes_the_gpu_list():
    spec = spec_from({"nodes": 2, "gpus": "6,7", "fakeGpus": True})
    assert spec.fake_gpus is True
    assert [n.gpus for n in spec.nodes] == [(6,), (7,)]


def test_fake_gpus_false_keeps_real_gpus():
    spec = spec_from({"nodes": 2, "gpus": "6,7", "fakeGpus": False})
    assert spec.fake_gpus is False and spec.all_gpus == [6, 7]


def test_fake_gpus_count_makes_ids_from_zero():
    spec = spec_from({"nodes": 2, "fakeGpus": 4})
    assert spec.fake_gpus is True
    assert [n.gpus for n in spec.nodes] == [(0, 1), (2, 3)]


def test_fake_gpus_count_must_split_evenly():
    assert "cannot be split evenly" in one_problem({"nodes": 2, "fakeGpus": 3})


def test_fake_gpus_count_and_gpu_list_conflict():
    assert "not both" in one_problem({"gpus": "0,1", "fakeGpus": 2})


@pytest.mark.parametrize("value", [0, -1, 257, "yes", 1.5, None])
def test_fake_gpus_bad_values(value):
    assert one_problem({"fakeGpus": value}).startswith("fakeGpus:")


def test_uneven_gpu_split_over_node_count():
    problem = one_problem({"nodes": 2, "gpus": "0,1,2"})
    assert problem.startswith("gpus:") and "3 GPUs cannot be split evenly over 2 nodes" in problem


# -- partitions -------------------------------------------------------------------------

def test_partitions_all_lists_and_defaults():
    spec = spec_from({"nodes": 4, "partitions": [
        {"name": "batch", "nodes": "ALL", "maxTime": "1-00:00:00"},
        {"name": "debug", "nodes": ["node1", "node2"], "default": True, "maxTime": 30},
    ]})
    assert spec.partitions == (
        PartitionSpec("batch", ("node1", "node2", "node3", "node4"), False, "1-00:00:00"),
        PartitionSpec("debug", ("node1", "node2"), True, "30"),
    )


def test_first_partition_becomes_default_when_none_is():
    spec = spec_from({"partitions": [{"name": "a"}, {"name": "b", "nodes": ["node2"]}]})
    assert [(p.name, p.default) for p in spec.partitions] == [("a", True), ("b", False)]
    assert spec.partitions[0].nodes == ("node1", "node2")  # nodes default to ALL


def test_partition_problems():
    assert "more than one partition has default: true" in one_problem(
        {"partitions": [{"name": "a", "default": True}, {"name": "b", "default": True}]})
    problem = one_problem({"partitions": [{"name": "a", "nodes": ["node1", "node9"]}]})
    assert "unknown node 'node9'" in problem and "node1, node2" in problem
    assert "listed twice" in one_problem({"partitions": [{"name": "a"}, {"name": "a"}]})
    assert "not a Slurm time" in one_problem({"partitions": [{"name": "a", "maxTime": "soon"}]})
    assert "not a valid partition name" in one_problem({"partitions": [{"name": "1st"}]})
    assert one_problem({"partitions": []}).startswith("partitions:")
    assert one_problem({"partitions": {"name": "a"}}).startswith("partitions:")
    assert "expected 'ALL' or a list" in one_problem({"partitions": [{"name": "a", "nodes": []}]})
    assert "true or false" in one_problem({"partitions": [{"name": "a", "default": "yes"}]})
    assert "expected a mapping" in one_problem({"partitions": ["a"]})


# -- slurmConf, wait, backend, names ----------------------------------------------------

def test_slurm_conf_extra_lines_are_kept_in_order():
    lines = ["MaxJobCount=20000", "PriorityType = priority/multifactor"]
    assert spec_from({"slurmConf": lines}).slurm_conf_extra == tuple(lines)


@pytest.mark.parametrize("value, where", [
    ("MaxJobCount=1", "slurmConf"),
    ([1], "slurmConf"),
    (["MaxJobCount=1\nEvil=2"], "slurmConf[0]"),
    (["just words"], "slurmConf[0]"),
    (["=1"], "slurmConf[0]"),
])
def test_slurm_conf_bad_values(value, where):
    assert one_problem({"slurmConf": value}).startswith(f"{where}:")


@pytest.mark.parametrize("value", [0, -1, 3601, True, "abc", float("nan"), float("inf")])
def test_wait_rejected(value):
    assert one_problem({"wait": value}).startswith("wait:")


@pytest.mark.parametrize("value", [0.5, 1, 3600])
def test_wait_accepted(value):
    assert spec_from({"wait": value}).wait == float(value)


@pytest.mark.parametrize("name", ["a", "dev-2", "x" * 31])
def test_good_cluster_names(name):
    assert spec_from({"name": name}).name == name


@pytest.mark.parametrize("name", ["", "Upper", "../x", "/tmp", "a" * 32, "1abc", "a_b", "a.b", 5, None])
def test_bad_cluster_names(name):
    assert one_problem({"name": name}).startswith("name:")


def test_backend_and_docker_only_options():
    assert one_problem({"backend": "nosuch"}) == "backend: unknown backend 'nosuch' (available: local, docker)"
    docker = spec_from({"backend": "docker", "image": "simcluster/node:0.1.0", "privileged": True})
    assert (docker.backend, docker.image, docker.privileged) == ("docker", "simcluster/node:0.1.0", True)
    assert "only applies to the docker backend" in one_problem({"image": "foo"})
    assert "only applies to the docker backend" in one_problem({"privileged": True})
    assert one_problem({"backend": "docker", "image": "bad image"}).startswith("image:")
    assert one_problem({"backend": "docker", "privileged": "yes"}).startswith("privileged:")


# -- unknown keys, all problems at once -------------------------------------------------

def test_unknown_key_with_a_close_match_gets_a_did_you_mean_hint():
    assert one_problem({"fake_gpus": 2}) == "unknown key 'fake_gpus' (did you mean 'fakeGpus'?)"
    assert one_problem({"SlurmConf": []}) == "unknown key 'SlurmConf' (did you mean 'slurmConf'?)"
    assert one_problem({"nodes": [{"name": "a", "Port": 20001}]}) == \
        "nodes[0]: unknown key 'Port' (did you mean 'port'?)"


def test_unknown_key_without_a_close_match_lists_the_allowed_keys():
    problem = one_problem({"nodez": 2})
    assert problem.startswith("unknown key 'nodez' (allowed: ")
    allowed = problem[len("unknown key 'nodez' (allowed: "):-1].split(", ")
    assert allowed == sorted(allowed)
    assert {"apiVersion", "kind", "name", "nodes", "gpus", "fakeGpus", "partitions", "slurmConf"} <= set(allowed)
    problem = one_problem({"partitions": [{"name": "p", "time": 5}]})
    assert problem == "partitions[0]: unknown key 'time' (allowed: default, maxTime, name, nodes, options)"


def test_unknown_keys_that_are_not_strings_do_not_crash():
    problems = problems_of({1: "a", "foo": "b", None: "c"})
    assert len(problems) == 3
    assert all(p.startswith("unknown key") for p in problems)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        spec_from({"name": "Bad", "nodes": 0, "cpus": 0, "memory": "12X", "gpus": "a", "wait": 0,
                   "bogus": 1, "backend": "nosuch"})
    err = info.value
    wheres = sorted(p.split(":")[0] for p in err.problems)
    assert wheres == ["backend", "cpus", "gpus", "memory", "name", "nodes", "unknown key 'bogus' (allowed",
                      "wait"]
    assert err.message == "invalid cluster spec: 8 problems"
    assert err.details.splitlines() == [f"  - {p}" for p in err.problems]
    assert err.exit_code == 2


def test_one_problem_is_one_line():
    with pytest.raises(ConfigError) as info:
        spec_from({"nodes": 0})
    err = info.value
    assert err.one_line() == "invalid cluster spec: nodes: 0 is out of range 1-1024"
    assert err.details == ""
    assert isinstance(err, UsageError) and err.exit_code == 2


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError) as info:
        validate(["a"], host_cpus=1, host_memory_mb=1)  # type: ignore[arg-type]
    assert "expected a mapping" in info.value.problems[0]
