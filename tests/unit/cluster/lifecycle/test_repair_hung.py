"""repair restarts a slurmd that does not answer only when it stays that way: a node only
flagged '*' (just resumed, or slow on a loaded host) gets one more ping round first."""

from __future__ import annotations

from types import SimpleNamespace

from provisioner.cluster.lifecycle import repair
from provisioner.cluster.model.slurm import NodeState


def fake_cluster(sequence):
    """A cluster whose slurmctld reports the node states in ``sequence``, one per call (the last repeats)."""
    calls = []

    def node_states():
        calls.append(1)
        return sequence[min(len(calls) - 1, len(sequence) - 1)]
    return SimpleNamespace(client=SimpleNamespace(node_states=node_states),
                           spec=SimpleNamespace(failure_detection="fast")), calls


def states(**kw):
    return {n: NodeState(n, s) for n, s in kw.items()}


def test_a_node_that_answers_again_is_not_restarted(monkeypatch):
    monkeypatch.setattr(repair.time, "sleep", lambda s: None)
    c, _ = fake_cluster([states(node1="idle*", node2="down*"), states(node1="idle", node2="down*")])
    assert repair._still_hung(c, {}, ["node1", "node2"]) == ["node2"]


def test_a_down_node_is_restarted_at_once_and_a_silent_one_after_the_wait(monkeypatch):
    monkeypatch.setattr(repair.time, "sleep", lambda s: None)
    clock = iter(range(0, 1000))
    monkeypatch.setattr(repair.time, "monotonic", lambda: next(clock))
    c, calls = fake_cluster([states(node1="mixed*", node2="down*")])
    assert repair._still_hung(c, {}, ["node1", "node2"]) == ["node1", "node2"]
    assert len(calls) > 1
    c, calls = fake_cluster([states(node2="down*")])
    assert repair._still_hung(c, {}, ["node2"]) == ["node2"] and len(calls) == 1
