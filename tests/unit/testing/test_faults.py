"""`slurm_faults` (provisioner/testing/faults.py): which cluster a call goes to and what the
teardown heals, with the injector and the readiness wait replaced (no daemon)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from provisioner.errors import ClusterNotFound
from provisioner.testing import faults as testing_faults
from provisioner.testing.faults import SlurmFaults


class FakeInjector:
    made = []

    def __init__(self, name):
        self.name = name
        self.calls = []
        FakeInjector.made.append(self)

    def inject(self, verb, *args, **kwargs):  # named_clusters.Injector's one entry point
        return getattr(self, verb.replace("-", "_"))(*args, **kwargs)

    def kill(self, node):
        self.calls.append(("kill", node))
        return f"killed {node}"

    def kill_controller(self):
        self.calls.append(("kill_controller",))
        return "killed slurmctld"

    def heal(self, timeout=120.0):
        if self.name == "gone":
            raise ClusterNotFound(self.name)
        self.calls.append(("heal", timeout))
        return f"cluster '{self.name}' healed"


@pytest.fixture
def fake_injector(monkeypatch):
    FakeInjector.made = []
    waited = []
    monkeypatch.setattr(testing_faults, "Injector", FakeInjector)
    monkeypatch.setattr(testing_faults, "wait_all_ready", lambda name, timeout: waited.append(name))
    return waited


def test_without_a_cluster_it_says_so(fake_injector):
    with pytest.raises(ValueError, match="no cluster given and no slurm_cluster"):
        SlurmFaults(None).kill("node1")


def test_calls_go_to_the_default_or_the_given_cluster_one_injector_each(fake_injector):
    f = SlurmFaults(SimpleNamespace(name="a"))
    other = SimpleNamespace(name="b")
    assert f.kill("node1") == "killed node1"
    assert f.kill_controller(cluster=other) == "killed slurmctld"
    f.kill("node2")
    by_name = {}
    for inj in FakeInjector.made:
        if inj.calls:
            by_name.setdefault(inj.name, []).append(inj.calls)
    assert by_name == {"a": [[("kill", "node1"), ("kill", "node2")]], "b": [[("kill_controller",)]]}


def test_heal_all_heals_every_touched_cluster_and_skips_those_already_gone(fake_injector):
    f = SlurmFaults(SimpleNamespace(name="a"))
    f.kill("node1")
    f.kill("node1", cluster=SimpleNamespace(name="gone"))
    f.kill_controller(cluster=SimpleNamespace(name="c"))
    assert f.heal_all(timeout=5) == ["cluster 'a' healed", "cluster 'c' healed"]
    assert fake_injector == ["a", "c"]  # waited for every node of what was healed
