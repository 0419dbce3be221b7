"""Slurm releases: parsing --slurm / `slurm:` values and what a spec runs when none is given."""

from __future__ import annotations

import pytest

from provisioner.config.types import ClusterSpec
from provisioner.config.validate import validate
from provisioner.config.versions import (DEFAULT_SLURM, SLURM_SUITES, controller_resolves_node_names, normalize,
                                         release_of)
from provisioner.errors import ConfigError


@pytest.mark.parametrize("given, release", [("24.11", "24.11"), (24.11, "24.11"), (26.05, "26.05"),
                                            ("22.05.8", "22.05"), (" 26.05 ", "26.05")])
def test_normalize_accepts_strings_yaml_floats_and_full_versions(given, release):
    assert normalize(given) == release


@pytest.mark.parametrize("given", ["23.02", "24.1", "latest", True, 24, ""])
def test_normalize_refuses_other_releases(given):
    with pytest.raises(ValueError, match="22.05, 24.11, 26.05"):
        normalize(given)


def test_each_release_has_its_debian_suite():
    assert SLURM_SUITES == {"22.05": "bookworm", "24.11": "trixie", "26.05": "sid"}
    assert release_of("slurm-wlm 24.11.5") == "24.11" and release_of("") is None


def test_spec_key_and_backend_defaults():
    docker = validate({"backend": "docker", "slurm": 24.11}, 2, 1000)
    assert docker.slurm == docker.slurm_release == "24.11"
    plain = validate({"backend": "docker"}, 2, 1000)
    assert plain.slurm is None and plain.slurm_release == DEFAULT_SLURM
    local = validate({}, 2, 1000)
    assert local.slurm_release is None  # the host's own Slurm
    with pytest.raises(ConfigError, match="slurm: '25.05'"):
        validate({"slurm": "25.05"}, 2, 1000)


def test_docker_cluster_made_without_a_release_is_the_same_cluster_as_one_asking_for_the_default():
    """`up --slurm 22.05` on a docker cluster made before versions existed repairs it, no conflict."""
    old = validate({"backend": "docker"}, 2, 1000)
    stored = old.to_dict()
    stored.pop("slurm")  # a state file written before the key existed
    again = validate({"backend": "docker", "slurm": DEFAULT_SLURM}, 2, 1000)
    assert ClusterSpec.from_dict(stored).identity() == again.identity()
    assert validate({"backend": "docker", "slurm": "24.11"}, 2, 1000).identity() != again.identity()


@pytest.mark.parametrize("version, resolves", [("24.11.5", True), ("26.05.5", True), ("22.05.8", False),
                                               (None, False), ("", False)])
def test_controller_resolves_node_names_from_24_11(version, resolves):
    assert controller_resolves_node_names(version) is resolves
