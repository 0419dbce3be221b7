"""Wait strategies: done as soon as the condition holds, a guard aborts at once, timeouts explain."""

from __future__ import annotations

import pytest

from provisioner.cluster.model.wait import WaitStrategy
from provisioner.errors import StartupError


def test_returns_the_value_seen_when_done():
    calls = iter([(False, 1), (False, 2), (True, 3)])
    assert WaitStrategy("x", lambda: next(calls), timeout=5, first_delay=0.001).wait() == 3


def test_guard_aborts_before_the_timeout():
    def guard():
        raise StartupError("slurmd:node1 exited during startup")
    with pytest.raises(StartupError, match="node1 exited"):
        WaitStrategy("x", lambda: (False, None), timeout=60, guard=guard).wait()


def test_timeout_names_what_was_awaited_last_seen_and_logs():
    with pytest.raises(StartupError) as info:
        WaitStrategy("2 nodes to be idle", lambda: (False, "node2 down*"), timeout=0.05, first_delay=0.01,
                     describe=lambda seen: f"last: {seen}", logs=lambda: "--- tail of slurmctld.log ---").wait()
    err = info.value
    assert "waiting for 2 nodes to be idle" in err.message and err.hint
    assert "last: node2 down*" in err.details and "slurmctld.log" in err.details


# -- nodes_ready: the one "nodes ready" wait (up, repair, fault heal, slurm_faults) -----------------
def _cluster(sequence, alive=None):
    """A cluster whose sinfo reports ``sequence`` one call at a time (the last repeats)."""
    from types import SimpleNamespace

    from provisioner.cluster.model.slurm import NodeState
    calls = []

    def node_states():
        calls.append(1)
        seen = sequence[min(len(calls) - 1, len(sequence) - 1)]
        return None if seen is None else {n: NodeState(n, s, "Not responding" if s.endswith("*") else "")
                                          for n, s in seen.items()}
    runner = SimpleNamespace(read_text=lambda path: "slurmd: fatal: bad config\n", where="this host")
    return SimpleNamespace(
        node_names=["node1", "node2"], client=SimpleNamespace(node_states=node_states),
        log_tail=lambda key, lines=20: f"--- tail of {key}.log ---",
        daemons_alive=lambda keys=None: alive or {}, daemon_runner=lambda key: runner,
        paths=SimpleNamespace(log="/s/log", daemon_log=lambda name: f"/s/log/{name}.log")), calls


def test_nodes_ready_returns_once_every_node_is_ready():
    from provisioner.cluster.model.wait import nodes_ready
    c, calls = _cluster([None, {"node1": "idle", "node2": "down*"}, {"node1": "idle", "node2": "idle"}])
    states = nodes_ready(c, timeout=5)
    assert {n: s.state for n, s in states.items()} == {"node1": "idle", "node2": "idle"} and len(calls) == 3


def test_nodes_ready_with_another_condition():
    from provisioner.cluster.model.wait import nodes_ready
    c, _ = _cluster([{"node1": "idle*", "node2": "drained"}, {"node1": "idle", "node2": "drained"}])
    nodes_ready(c, timeout=5, ready=lambda s: s.responding, adjective="responding")


def test_nodes_ready_timeout_says_what_was_last_seen_and_attaches_log_tails():
    from provisioner.cluster.model.wait import nodes_ready
    c, _ = _cluster([{"node1": "idle", "node2": "down*"}])
    with pytest.raises(StartupError) as info:
        nodes_ready(c, timeout=0.05)
    err = info.value
    assert err.message == "timed out after 0s waiting for 2 nodes to be idle: 1 of 2 nodes are not idle"
    assert "nodes not idle (1 of 2)" in err.details and "node2" in err.details and "down*" in err.details
    assert "Not responding" in err.details
    assert "tail of slurmctld.log" in err.details and "tail of slurmd:node2.log" in err.details
    assert "tail of slurmd:node1.log" not in err.details


def test_nodes_ready_timeout_when_slurmctld_never_answers():
    from provisioner.cluster.model.wait import nodes_ready
    c, _ = _cluster([None])
    with pytest.raises(StartupError) as info:
        nodes_ready(c, timeout=0.05)
    assert "2 of 2 nodes are not idle" in info.value.message
    assert "slurmctld did not answer sinfo" in info.value.details


def test_nodes_ready_stops_at_once_when_a_daemon_died():
    from provisioner.cluster.model.wait import nodes_ready
    c, _ = _cluster([{"node1": "idle", "node2": "down*"}], alive={"slurmctld": True, "slurmd:node2": False})
    with pytest.raises(StartupError) as info:
        nodes_ready(c, timeout=60)
    assert info.value.message == "slurmd:node2 exited during startup"
    assert "fatal: bad config" in info.value.details and "/s/log/slurmd-node2.log" in info.value.hint


def test_poll_until_grows_the_pause_by_factor_up_to_max(monkeypatch):
    from provisioner.cluster.model import wait
    pauses = []
    monkeypatch.setattr(wait.time, "sleep", pauses.append)
    calls = iter([(False, 1)] * 5 + [(True, 2)])
    assert wait.poll_until(lambda: next(calls), timeout=60, first_delay=0.5, max_delay=5, factor=2) == 2
    assert pauses == [0.5, 1.0, 2.0, 4.0, 5]


def test_poll_until_raises_with_the_last_value_seen():
    from provisioner.cluster.model.wait import WaitTimeout, poll_until
    seen = iter(range(1000))
    with pytest.raises(WaitTimeout) as info:
        poll_until(lambda: (False, next(seen)), timeout=0.03, first_delay=0.01, max_delay=0.01)
    assert info.value.last_seen >= 1 and "timed out after" in str(info.value)
