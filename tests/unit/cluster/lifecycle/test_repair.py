"""The repair's judgement (cluster/lifecycle/repair.py), without a cluster: it restarts a
slurmd that does not answer only when it stays that way (a node only flagged '*', just
resumed or slow on a loaded host, gets one more ping round first); and a restarted node
stays drained while slurmctld's retry list (sdiag "Agent queue size") is not empty, so a
retried step kill cannot reach a requeued run of the same job."""

from __future__ import annotations

from types import SimpleNamespace

from provisioner.cluster.lifecycle import repair
from provisioner.cluster.model.command_runner import Result
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


# -- held back while slurmctld retries messages to the restarted node ----------------------------
SDIAG = "Server thread count:  3\nAgent queue size:     {n}\nAgent count:          0\n"


class FakeClient:
    """sdiag reports the queue sizes in ``queue`` one per call (the last repeats); scontrol is recorded."""

    def __init__(self, queue, states):
        self.queue, self.states, self.calls, self.updates = list(queue), states, 0, []

    def run(self, argv, timeout=0):
        if argv[0] == "sdiag":
            n = self.queue[min(self.calls, len(self.queue) - 1)]
            self.calls += 1
            return Result(list(argv), 0, SDIAG.format(n=n), "")
        self.updates.append(list(argv[2:]))
        return Result(list(argv), 0, "", "")

    def node_states(self):
        return self.states


def cluster(queue, **states):
    client = FakeClient(queue, {n: NodeState(n, s) for n, s in states.items()})
    return SimpleNamespace(client=client, spec=SimpleNamespace(failure_detection="fast")), client


def test_agent_queue_size_is_read_from_sdiag():
    c, _ = cluster([4])
    assert repair.agent_queue_size(c) == 4


def test_nothing_is_held_when_slurmctld_retries_nothing():
    c, client = cluster([0], node2="down*")
    assert repair.hold_for_retried_rpcs(c, ["node2"]) == [] and client.updates == []


def test_restarted_nodes_are_drained_then_resumed_once_the_queue_is_empty(monkeypatch):
    monkeypatch.setattr(repair.time, "sleep", lambda s: None)
    c, client = cluster([1, 1, 1, 0], node1="drained", node2="down*")
    held = repair.hold_for_retried_rpcs(c, ["node1", "node2"])
    assert held == ["node2"]  # node1 was drained already (an admin's drain is not ours to undo)
    assert client.updates == [["nodename=node2", "state=drain", f"reason={repair.HOLD_REASON}"]]
    repair.release_after_retried_rpcs(c, held, timeout=120)
    assert client.updates[-1] == ["nodename=node2", "state=resume"] and client.calls == 4
