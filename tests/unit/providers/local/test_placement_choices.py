"""When a local cluster needs its TaskProlog (placement_choices.needs_task_prolog: pure logic; the
host's GPU devices and Open MPI are faked)."""

from __future__ import annotations

import pytest

from provisioner.providers.local import names, placement_choices
from tests.unit.conftest import spec_from


@pytest.fixture
def host(monkeypatch):
    """A host with no GPUs and Debian's Open MPI (or none); tests change what they need."""
    state = {"gpus": [], "foreign_mpi": None}
    monkeypatch.setattr(placement_choices.glob, "glob", lambda pattern: state["gpus"])
    monkeypatch.setattr(names, "foreign_openmpi", lambda: state["foreign_mpi"])
    return state


def test_cpu_cluster_in_pid_namespaces_on_a_plain_host_needs_none(host):
    assert placement_choices.needs_task_prolog(spec_from({"name": "c", "nodes": 4}), pid_namespace=True) is False


def test_without_pid_namespaces_the_prolog_stays(host):
    # Its marker is how `down` and faults find job tasks that share the host's process table.
    assert placement_choices.needs_task_prolog(spec_from({"name": "c", "nodes": 4}), pid_namespace=False) is True


@pytest.mark.parametrize("raw", [{"name": "c", "nodes": 2, "gpus": [0, 1]},
                                 {"name": "c", "nodes": 2, "gpus": [0, 1], "fakeGpus": True}])
def test_gpus_in_the_spec_need_the_mapping(host, raw):
    assert placement_choices.needs_task_prolog(spec_from(raw), pid_namespace=True) is True


def test_gpus_on_the_host_are_hidden_from_steps_without_them(host):
    host["gpus"] = ["/dev/nvidia0"]
    assert placement_choices.needs_task_prolog(spec_from({"name": "c", "nodes": 2}), pid_namespace=True) is True


def test_an_open_mpi_the_mounted_parameter_file_does_not_reach_keeps_the_prolog(host):
    host["foreign_mpi"] = "/opt/openmpi/bin/ompi_info"
    assert placement_choices.needs_task_prolog(spec_from({"name": "c", "nodes": 2}), pid_namespace=True) is True
