"""Wait strategies: done as soon as the condition holds, a guard aborts at once, timeouts explain."""

from __future__ import annotations

import pytest

from provisioner.cluster.wait import WaitStrategy
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
