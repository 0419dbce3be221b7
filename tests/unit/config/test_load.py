"""Loading a cluster spec: YAML file + flags, the example files (provisioner/config/load.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.config import load_spec
from provisioner.config.types import ClusterSpec, NodeSpec
from provisioner.errors import ConfigError, UsageError
from tests.conftest import REPO

EXAMPLES = sorted((REPO / "configs" / "examples").glob("*.yaml"))
EXAMPLES_BY_NAME = {p.stem: p for p in EXAMPLES}


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- loading: YAML file + flags ---------------------------------------------------------

def test_load_spec_without_a_file_uses_flags_and_host_facts():
    spec = load_spec(None, {"name": "f", "nodes": 3, "gpus": None}, cpus=3, memory_mb=3000)
    assert spec.name == "f" and len(spec.nodes) == 3
    assert {(n.cpus, n.memory) for n in spec.nodes} == {(3, 3000)}


def test_flags_override_the_file_and_none_flags_do_not(tmp_path):
    path = write(tmp_path, "apiVersion: simcluster/v1\nkind: Cluster\nname: fromfile\nnodes: 4\n"
                           "cpus: 16\nmemory: 32G\nwait: 30\n")
    spec = load_spec(path, {"name": None, "nodes": 2, "cpus": None, "memory": "1G", "wait": None},
                     cpus=2, memory_mb=2000)
    assert spec.name == "fromfile"  # a flag left out (None) keeps the file's value
    assert len(spec.nodes) == 2  # a given flag wins
    assert {(n.cpus, n.memory) for n in spec.nodes} == {(16, 1024)}
    assert spec.wait == 30.0


def test_fake_gpus_flag_on_a_real_gpu_file():
    spec = load_spec(str(EXAMPLES_BY_NAME["node6-node7-one-gpu-each"]), {"fakeGpus": True})
    assert spec.fake_gpus is True and spec.all_gpus == [6, 7]


def test_a_node_count_flag_replaces_the_files_node_list():
    spec = load_spec(str(EXAMPLES_BY_NAME["node6-node7-one-gpu-each"]), {"nodes": 3}, cpus=2, memory_mb=2000)
    # The file's partition names node6 and node7 by ALL, so this is valid: node1..node3.
    assert [n.name for n in spec.nodes] == ["node1", "node2", "node3"]


def test_problems_name_the_file(tmp_path):
    path = write(tmp_path, "nodes: 0\n")
    with pytest.raises(ConfigError) as info:
        load_spec(path)
    assert info.value.message == f"invalid {path}: nodes: 0 is out of range 1-1024"


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty"),
    ("# only a comment\n", "the file is empty"),
    ("- a\n- b\n", "expected a mapping at the top level, got list"),
    ("just text\n", "expected a mapping at the top level, got str"),
])
def test_files_that_are_not_a_mapping(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_spec(path)
    assert info.value.problems == [message]


def test_missing_file_is_usage_error(tmp_path):
    with pytest.raises(UsageError) as info:
        load_spec(str(tmp_path / "nope.yaml"))
    assert "does not exist" in info.value.message and info.value.exit_code == 2
    with pytest.raises(UsageError):
        load_spec(str(tmp_path))  # a directory is not a spec file


def test_yaml_syntax_error_says_where(tmp_path):
    path = write(tmp_path, "name: a\nnodes: [\n")
    with pytest.raises(UsageError) as info:
        load_spec(path)
    assert not isinstance(info.value, ConfigError)
    assert info.value.message.startswith(f"{path} is not valid YAML at line 3, column 1:")
    assert "\n" not in info.value.one_line()


def test_yaml_python_tags_are_refused(tmp_path):
    path = write(tmp_path, "name: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(UsageError) as info:
        load_spec(path)
    assert "is not valid YAML" in info.value.message


def test_binary_file_is_usage_error(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00\x01name: x\n")
    with pytest.raises(UsageError) as info:
        load_spec(str(path))
    assert "not UTF-8" in info.value.message


# -- the example files ------------------------------------------------------------------


def test_there_are_examples():
    assert {"node6-node7-one-gpu-each", "two-node-fake-gpus", "eight-node-partitions"} <= set(EXAMPLES_BY_NAME)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_loads(path):
    spec = load_spec(str(path), cpus=2, memory_mb=2000)
    assert spec.nodes and spec.partitions
    assert sum(p.default for p in spec.partitions) == 1
    assert ClusterSpec.from_dict(spec.to_dict()) == spec


def test_seed_example_is_the_seeds_cluster():
    spec = load_spec(str(EXAMPLES_BY_NAME["node6-node7-one-gpu-each"]), cpus=2, memory_mb=2000)
    assert spec.name == "node6-node7" and spec.fake_gpus is False
    assert spec.nodes == (NodeSpec("node6", (6,), 112, 240000, 17016),
                          NodeSpec("node7", (7,), 112, 240000, 17017))
    assert [(p.name, p.nodes, p.default) for p in spec.partitions] == [("gpu", ("node6", "node7"), True)]


def test_two_node_fake_gpu_example():
    spec = load_spec(str(EXAMPLES_BY_NAME["two-node-fake-gpus"]), cpus=2, memory_mb=2000)
    assert spec.fake_gpus is True
    assert [(n.name, n.gpus) for n in spec.nodes] == [("node1", (0,)), ("node2", (1,))]


def test_eight_node_partitions_example():
    spec = load_spec(str(EXAMPLES_BY_NAME["eight-node-partitions"]), cpus=2, memory_mb=2000)
    assert len(spec.nodes) == 8 and spec.all_gpus == list(range(8))
    assert {(n.cpus, n.memory) for n in spec.nodes} == {(64, 512 * 1024)}
    assert [(p.name, p.default, p.max_time) for p in spec.partitions] == [
        ("batch", True, "1-00:00:00"), ("debug", False, "30")]
    assert spec.slurm_conf_extra == ("MaxJobCount=20000",)
