"""The one poll loop: call a check until it holds or a timeout passes (no cluster needed).

A leaf module, so that everything in cluster/ (runners included) can poll through it;
cluster/model/wait.py builds the wait strategies (guards, log tails, readable timeouts) on it.
"""

from __future__ import annotations

import time
from typing import Callable, Tuple, TypeVar

T = TypeVar("T")


class WaitTimeout(Exception):
    def __init__(self, waited: float, last_seen: object):
        super().__init__(f"timed out after {waited:.1f}s")
        self.waited = waited
        self.last_seen = last_seen


def poll_until(check: Callable[[], Tuple[bool, T]], timeout: float, first_delay: float = 0.005,
               max_delay: float = 0.1, factor: float = 1.5) -> T:
    """Call ``check`` until it returns (True, value); raise WaitTimeout with the last value.
    The pause between calls starts at ``first_delay`` and grows ``factor`` times up to
    ``max_delay``; the first call is at once, the last one at ``timeout``."""
    start = time.monotonic()
    delay = first_delay
    while True:
        done, last = check()
        if done:
            return last
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            raise WaitTimeout(elapsed, last)
        time.sleep(min(delay, max(0.0, timeout - elapsed)))
        delay = min(delay * factor, max_delay)
