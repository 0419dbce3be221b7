"""The one poll loop (cluster/model/poll.py): at once, then backing off, and a timeout that
carries what was last seen."""

from __future__ import annotations

import pytest

from provisioner.cluster.model import poll
from provisioner.cluster.model.poll import WaitTimeout, poll_until


class Clock:
    """time.monotonic and time.sleep of a test: sleeping moves the clock, nothing waits."""

    def __init__(self):
        self.now, self.sleeps = 100.0, []

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(round(s, 6))
        self.now += s


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(poll.time, "monotonic", c.monotonic)
    monkeypatch.setattr(poll.time, "sleep", c.sleep)
    return c


def test_returns_the_value_of_the_first_check_that_holds_without_sleeping(clock):
    assert poll_until(lambda: (True, "ready"), timeout=5) == "ready"
    assert clock.sleeps == []


def test_pauses_grow_by_the_factor_up_to_the_maximum(clock):
    answers = iter([(False, 1)] * 6 + [(True, 7)])
    assert poll_until(lambda: next(answers), timeout=60, first_delay=0.1, max_delay=0.3, factor=2) == 7
    assert clock.sleeps == [0.1, 0.2, 0.3, 0.3, 0.3, 0.3]


def test_timeout_carries_the_last_value_and_the_last_call_is_at_the_deadline(clock):
    seen = []

    def check():
        seen.append(clock.now)
        return False, f"state at {clock.now - 100:.1f}"

    with pytest.raises(WaitTimeout) as exc:
        poll_until(check, timeout=1.0, first_delay=0.4, max_delay=0.4)
    assert exc.value.last_seen == "state at 1.0" and exc.value.waited == pytest.approx(1.0)
    assert seen[-1] - seen[0] == pytest.approx(1.0)  # no sleep past the deadline
    assert "timed out after 1.0s" in str(exc.value)
