"""Create, repair and stop one cluster (provisioner/cluster/lifecycle/create.py), and `up`'s
conflict rule (provisioner/named_clusters.py), with a provider that has the Provider core and
no daemon (tests/unit/cluster/fakes.py); the step list is replaced where create runs it."""

from __future__ import annotations

import os
import re
import signal
import stat

import pytest

from provisioner import named_clusters
from provisioner.cluster.lifecycle import create as lifecycle
from provisioner.cluster.model.state import ClusterState
from provisioner.errors import ClusterConflict, StartupError
from provisioner.paths import ClusterLayout
from tests.unit.cluster.fakes import FakeProvider, home, make_cluster  # noqa: F401 (fixture)
from tests.unit.conftest import spec_from


def test_stop_order_nodes_first_then_controller_then_accounting_and_munged_last():
    order = list(lifecycle.STOP_ORDER)
    # The metrics exporter and the REST API first (no new requests reach slurmctld while it
    # stops), then the nodes.
    assert order[:3] == ["metrics", "slurmrestd", "slurmd:"] and order[-1] == "munged"
    assert order.index("slurmctld") < order.index("slurmdbd") and order.index("slurmctld") < order.index("mariadbd")


@pytest.fixture
def no_steps(monkeypatch):
    """create's step list replaced: records the clusters it would have made ready."""
    ran = []
    monkeypatch.setattr(lifecycle, "run_steps", lambda up: ran.append(up.cluster.name))
    return ran


def test_create_provisions_runs_the_steps_and_says_what_is_up(home, no_steps):
    provider = FakeProvider()
    spec = spec_from({"name": "l1", "nodes": 2})
    line = lifecycle.create(spec, provider, retain=False, progress=lambda m: None)
    first, usage = line.split("\n", 1)
    assert re.fullmatch(r"cluster 'l1' is up \(fake\): 2 nodes idle in \d+\.\d\ds", first)
    assert usage == '  eval "$(simcluster env)"'
    assert no_steps == ["l1"] and provider.provisioned == ["l1"]
    root = ClusterLayout.for_name("l1").root
    # root's clusters are read by every local user (docs/users.md); anyone else's stay private
    assert stat.S_IMODE(root.stat().st_mode) == (0o755 if os.geteuid() == 0 else 0o700)
    saved = ClusterState.load(ClusterLayout.for_name("l1"))
    assert saved.placement is not None and saved.controller_port == 26817 and saved.backend == "fake"


def test_the_summary_names_fake_gpus_and_accounting(home, no_steps):
    spec = spec_from({"name": "l2", "nodes": 2, "fakeGpus": 4, "accounting": True})
    first = lifecycle.create(spec, FakeProvider(), retain=False, progress=lambda m: None).splitlines()[0]
    assert ": 2 nodes idle, GPUs 0-3 (fake), accounting ready (sacct, sshare) in " in first


def test_a_failed_provision_deletes_what_it_made(home, no_steps):
    provider = FakeProvider(fail=StartupError("no free port"))
    with pytest.raises(StartupError, match="no free port"):
        lifecycle.create(spec_from({"name": "l3"}), provider, retain=False, progress=lambda m: None)
    assert provider.deleted == ["l3"] and not ClusterLayout.for_name("l3").root.exists()
    assert no_steps == []


def test_a_failed_step_with_retain_keeps_the_cluster_for_inspection(home, monkeypatch):
    def fail(up):
        raise StartupError("slurmctld did not start")

    monkeypatch.setattr(lifecycle, "run_steps", fail)
    provider, lines = FakeProvider(), []
    with pytest.raises(StartupError):
        lifecycle.create(spec_from({"name": "l4"}), provider, retain=True, progress=lines.append)
    assert provider.deleted == []
    assert lines[-1].startswith("keeping the failed cluster for inspection (--retain): ")
    assert ClusterState.load(ClusterLayout.for_name("l4")) is not None


def test_is_running_needs_every_daemon_alive(home):
    c = make_cluster("l5", FakeProvider())
    assert lifecycle.is_running(c)
    c.provider.the_runner.alive.discard(c.state.pids["slurmd:node2"])
    assert not lifecycle.is_running(c)


def test_stop_signals_in_stop_order_keeps_drains_and_says_how_to_start(home):
    c = make_cluster("l6", FakeProvider())
    c.state.faults = [{"what": "drain", "node": "node1"}, {"what": "kill", "node": "node2"}]
    message = lifecycle.stop(c, grace=5)
    runner = c.provider.the_runner
    pids = c.state.pids
    termed = [p for pids_, sig in runner.killed if sig == signal.SIGTERM for p in pids_]
    assert termed == [pids["slurmd:node1"], pids["slurmd:node2"], pids["slurmctld"], pids["munged"]]
    assert c.state.phase == "stopped" and c.state.faults == [{"what": "drain", "node": "node1"}]
    assert message.startswith("cluster 'l6' stopped in ") and "'simcluster start --name l6'" in message
    assert ClusterState.load(c.state.layout).phase == "stopped"


def test_repair_in_place_with_nothing_dead(home, monkeypatch):
    monkeypatch.setattr(lifecycle, "repair", lambda c, progress, timeout: [])
    c = make_cluster("l7", FakeProvider())
    assert lifecycle.repair_in_place(c, lambda m: None, 5, "repaired") == \
        "cluster 'l7' is already running with this spec (nothing to do)"


def test_repair_in_place_names_at_most_twelve_restarted(home, monkeypatch):
    restarted = [f"slurmd:node{i}" for i in range(1, 15)]
    monkeypatch.setattr(lifecycle, "repair", lambda c, progress, timeout: restarted)
    c = make_cluster("l8", FakeProvider())
    first = lifecycle.repair_in_place(c, lambda m: None, 5, "started").splitlines()[0]
    assert first.startswith("cluster 'l8' started in ")
    assert "restarted slurmd:node1, " in first and "slurmd:node12 and 2 more; same ports, state and jobs" in first
    assert "slurmd:node13" not in first


# -- up: an existing cluster of that name ----------------------------------------------------------

@pytest.fixture
def fake_registry(monkeypatch):
    provider = FakeProvider()
    monkeypatch.setattr(named_clusters, "provider_named", lambda name: provider)
    return provider


def test_up_with_a_different_spec_is_a_conflict(home, fake_registry, no_steps):
    named_clusters.up(spec_from({"name": "l9", "nodes": 2}), fake_registry, progress=lambda m: None)
    with pytest.raises(ClusterConflict, match="already exists with a different spec") as exc:
        named_clusters.up(spec_from({"name": "l9", "nodes": 3}), fake_registry, progress=lambda m: None)
    assert "--recreate" in exc.value.hint
    assert fake_registry.provisioned == ["l9"] and fake_registry.deleted == []


def test_up_with_the_same_spec_repairs_in_place(home, fake_registry, no_steps, monkeypatch):
    named_clusters.up(spec_from({"name": "l10"}), fake_registry, progress=lambda m: None)
    st = ClusterState.load(ClusterLayout.for_name("l10"))
    st.phase = "running"
    st.save()
    monkeypatch.setattr(lifecycle, "repair", lambda c, progress, timeout: [])
    assert "nothing to do" in named_clusters.up(spec_from({"name": "l10"}), fake_registry, progress=lambda m: None)
    assert fake_registry.provisioned == ["l10"]


def test_up_recreate_deletes_the_old_cluster_first(home, fake_registry, no_steps):
    named_clusters.up(spec_from({"name": "l11", "nodes": 2}), fake_registry, progress=lambda m: None)
    lines = []
    named_clusters.up(spec_from({"name": "l11", "nodes": 3}), fake_registry, recreate=True, progress=lines.append)
    assert fake_registry.deleted == ["l11"] and fake_registry.provisioned == ["l11", "l11"]
    assert lines[0] == " - removing cluster 'l11' (--recreate)"
    assert len(ClusterState.load(ClusterLayout.for_name("l11")).spec["nodes"]) == 3
