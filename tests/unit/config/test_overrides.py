"""The one builder of spec overrides (provisioner/config/overrides.py) and its three users:
the CLI's spec flags, the pytest plugin's requests and `check --run`'s throwaway cluster."""

from __future__ import annotations

import pytest

from provisioner.check.dryrun import cluster_spec
from provisioner.check.shape import Shape
from provisioner.cli.options import SPEC_KEYWORDS, load_spec_from_options
from provisioner.config.overrides import SPEC_KEYS, fake_gpus_value, spec_overrides
from provisioner.config.validate import TOP_KEYS
from provisioner.errors import ConfigError, UsageError


# -- the mapping --------------------------------------------------------------------------

@pytest.mark.parametrize("arg, value, key, expected", [
    ("name", "c1", "name", "c1"),
    ("backend", "docker", "backend", "docker"),
    ("nodes", 3, "nodes", 3),
    ("gpus", "6,7", "gpus", "6,7"),
    ("cpus", 4, "cpus", 4),
    ("memory", "2G", "memory", "2G"),
    ("image", "img:1", "image", "img:1"),
    ("privileged", True, "privileged", True),
    ("accounting", True, "accounting", True),
    ("fast_failure", True, "failureDetection", "fast"),
    ("slurm", "24.11", "slurm", "24.11"),
    ("wait", 30.0, "wait", 30.0),
    ("fake_gpus", 2, "fakeGpus", 2),
])
def test_each_choice_maps_to_its_yaml_key(arg, value, key, expected):
    assert spec_overrides(**{arg: value}) == {key: expected}


def test_every_yaml_key_of_the_table_is_a_spec_key():
    assert set(SPEC_KEYS.values()) <= TOP_KEYS
    assert len(set(SPEC_KEYS.values())) == len(SPEC_KEYS)


def test_every_cli_spec_flag_is_a_choice_of_the_builder():
    assert set(SPEC_KEYWORDS) - {"config_path"} == set(SPEC_KEYS) - {"name"}


def test_nothing_given_gives_no_overrides():
    assert spec_overrides() == {}


def test_none_values_are_left_out():
    assert spec_overrides(name=None, nodes=None, gpus="0", memory=None, wait=None) == {"gpus": "0"}


def test_switches_that_are_off_are_left_out():
    # off must leave the YAML's value: `accounting: true` in a file stays without --accounting
    assert spec_overrides(accounting=False, privileged=None, fast_failure=False) == {}


def test_counts_given_as_text_become_numbers():
    assert spec_overrides(nodes="3", cpus="2") == {"nodes": 3, "cpus": 2}
    assert spec_overrides(nodes="three") == {"nodes": "three"}  # left for validation to name


def test_slurm_version_written_as_a_number_becomes_text():
    assert spec_overrides(slurm=22.05) == {"slurm": "22.05"}


# -- fake GPUs ----------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (None, None), (False, None), (True, True), ("all", True), ("2", 2), (3, 3),
    (0, 0),  # a number is judged by the spec's validation, as if the YAML said it
])
def test_fake_gpus_forms(value, expected):
    assert fake_gpus_value(value) == expected


@pytest.mark.parametrize("text", ["0", "-1", "two", ""])
def test_fake_gpus_text_must_be_all_or_a_positive_count(text):
    with pytest.raises(UsageError, match="--fake-gpus expects a positive GPU count"):
        spec_overrides(fake_gpus=text)


def test_fake_gpus_with_a_gpu_list():
    assert spec_overrides(gpus="6,7", fake_gpus="all") == {"gpus": "6,7", "fakeGpus": True}


# -- the users ----------------------------------------------------------------------------

def test_cli_options_build_the_spec_from_the_flags():
    spec = load_spec_from_options("cli1", {"nodes": 3, "fake_gpus": "3", "cpus": 1, "memory": "512",
                                           "fast_failure": True, "accounting": None, "config_path": None})
    assert spec.name == "cli1" and len(spec.nodes) == 3
    assert spec.fake_gpus and [n.gpus for n in spec.nodes] == [(0,), (1,), (2,)]
    assert spec.failure_detection == "fast"
    assert not spec.accounting


def test_cli_options_left_out_keep_the_files_values(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("apiVersion: simcluster/v1\nkind: Cluster\nname: fromfile\nnodes: 4\ncpus: 1\n"
                    "memory: 256\naccounting: true\n")
    spec = load_spec_from_options(None, {"nodes": 2, "accounting": None, "config_path": str(path)})
    assert spec.name == "fromfile" and len(spec.nodes) == 2 and spec.accounting


def test_cli_bad_fake_gpus_is_a_usage_error():
    with pytest.raises(UsageError, match="got '0'"):
        load_spec_from_options("x", {"fake_gpus": "0"})


def test_cli_invalid_value_is_the_specs_validation_error():
    with pytest.raises(ConfigError, match="nodes"):
        load_spec_from_options("x", {"nodes": 0})


def shape_with(**given) -> Shape:
    fields = dict(nodes=1, nodes_max=1, tasks_per_node=1, cpus_per_task=1, mem_mb=None, gpus_per_node=None,
                  gpus_per_task=None, signal=None)
    fields.update(given)
    return Shape(**fields)


def test_check_run_spec_is_the_headers_shape_with_fake_gpus():
    shape = shape_with(nodes_max=2, tasks_per_node=3, mem_mb=100, gpus_per_node=2)
    spec = cluster_spec(shape, "chk-abc123")
    assert spec.name == "chk-abc123" and spec.backend == "local" and spec.wait == 60
    assert [(n.cpus, n.memory, n.gpus) for n in spec.nodes] == [(3, 100, (0, 1)), (3, 100, (2, 3))]
    assert spec.fake_gpus


def test_check_run_spec_without_gpus_or_memory():
    shape = shape_with(nodes_max=1, tasks_per_node=1, mem_mb=None, gpus_per_node=None)
    spec = cluster_spec(shape, "chk-abc124")
    assert spec.nodes[0].cpus == 1 and spec.nodes[0].gpus == () and not spec.fake_gpus


def test_check_run_memory_has_a_floor():
    spec = cluster_spec(shape_with(mem_mb=10), "chk-abc125")
    assert spec.nodes[0].memory == 64


def test_check_run_refuses_too_many_nodes():
    with pytest.raises(UsageError, match="at most"):
        cluster_spec(shape_with(nodes_max=65), "chk-abc126")
