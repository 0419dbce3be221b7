"""The provider interface (cluster/model/provider.py): a core no backend can leave out, optional
capabilities with documented defaults, one registry of names."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.cluster.model.provider import CAPABILITIES, Machines, NodeProcesses, machines_running, node_pids
from provisioner.cluster.model.provider import Provider
from provisioner.cluster.model.state import ClusterState
from provisioner.config import load_spec
from provisioner.config.types import BACKENDS, READ_ONLY_BACKENDS
from provisioner.errors import ConfigError, UsageError
from provisioner.providers import PROVIDERS, provider_class, provider_named

CORE = {"provision", "placement", "runner", "delete", "discover"}
PROVIDERS_DIR = Path(__file__).resolve().parents[3] / "provisioner" / "providers"


class CoreOnly(Provider):
    name = "core-only"

    def provision(self, spec, state, progress):
        pass

    def placement(self, state):
        raise NotImplementedError

    def runner(self, state, key):
        raise NotImplementedError

    def delete(self, state):
        return []

    def discover(self, name):
        return None


def test_the_core_is_exactly_the_abstract_methods():
    assert Provider.__abstractmethods__ == CORE


@pytest.mark.parametrize("missing", sorted(CORE))
def test_a_backend_missing_a_core_method_cannot_be_instantiated(missing):
    body = {m: getattr(CoreOnly, m) for m in CORE - {missing}}
    incomplete = type(f"No{missing.title()}", (Provider,), body)
    with pytest.raises(TypeError, match=missing):
        incomplete()
    CoreOnly()  # with all five it can


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_every_registered_provider_implements_the_core(name):
    cls = provider_class(name)
    assert issubclass(cls, Provider) and not inspect.isabstract(cls), cls.__abstractmethods__
    for cap in CAPABILITIES:  # a capability it claims is complete too
        if issubclass(cls, cap):
            assert not (cap.__abstractmethods__ & cls.__abstractmethods__)
    assert provider_named(name).name == name


def test_backends_up_creates_are_providers_and_ssh_is_not_one_of_them():
    assert set(BACKENDS) <= set(PROVIDERS) and "ssh" in PROVIDERS and "ssh" not in BACKENDS
    assert READ_ONLY_BACKENDS == ("ssh",)
    assert list(BACKENDS) == ["local", "docker"]
    with pytest.raises(ConfigError) as exc:
        load_spec(None, {"name": "x", "backend": "ssh"})
    assert "backend 'ssh' reads clusters made by 'simcluster deploy'" in str(exc.value.problems)
    assert "up creates: local, docker" in str(exc.value.problems)


def test_capabilities_have_documented_defaults_for_a_core_only_provider():
    p = CoreOnly()
    assert not isinstance(p, (Machines, NodeProcesses))
    state = ClusterState(name="x", backend="core-only", spec={}, root="/nonexistent", hostname="h", user="u",
                         controller_port=1, node_ports={})
    assert machines_running(p, state) == {}
    with pytest.raises(UsageError) as exc:
        node_pids(p, state, "node1")
    assert exc.value.one_line() == "the core-only backend cannot list a node's processes"


def test_the_ssh_provider_is_read_only():
    ssh = provider_named("ssh")
    state = ClusterState(name="x", backend="ssh", spec={}, root="?", hostname="h", user="u", controller_port=1,
                         node_ports={})
    with pytest.raises(UsageError, match="simcluster deploy"):
        ssh.provision(None, state, print)
    with pytest.raises(UsageError, match="does not remove the deployed cluster"):
        ssh.delete(state)
    assert ssh.discover("x") is None  # without a connection it finds nothing


def test_no_provider_imports_verify():
    offenders = []
    for path in sorted(PROVIDERS_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}: {n}" for n in names if n == "provisioner.verify" or
                          n.startswith("provisioner.verify.")]
    assert offenders == []


def test_the_registry_names_are_cheap_to_import():
    """config/validate.py reads BACKENDS: that must not load the providers or the cluster model."""
    code = ("import sys, provisioner.config; "
            "print(sorted(m for m in sys.modules if m.startswith(('provisioner.providers.', 'provisioner.cluster'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
