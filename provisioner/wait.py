"""Wait strategies: poll a condition with backoff until it holds, fails hard, or times out.

Modelled on testcontainers: the timeout error says what was last seen, and callers attach
the daemon logs that explain it.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Tuple, TypeVar

T = TypeVar("T")


class WaitTimeout(Exception):
    def __init__(self, waited: float, last_seen: object):
        super().__init__(f"timed out after {waited:.1f}s")
        self.waited = waited
        self.last_seen = last_seen


def poll_until(check: Callable[[], Tuple[bool, T]], timeout: float, first_delay: float = 0.005,
               max_delay: float = 0.1, on_poll: Optional[Callable[[T], None]] = None) -> T:
    """Call ``check`` until it returns (True, value); back off from ``first_delay`` to ``max_delay``.

    ``check`` may raise to abort at once (a daemon died). No fixed sleeps: a fast cluster is
    seen ready within a few milliseconds of being ready.
    """
    start = time.monotonic()
    delay = first_delay
    last: Optional[T] = None
    while True:
        done, last = check()
        if done:
            return last
        if on_poll:
            on_poll(last)
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            raise WaitTimeout(elapsed, last)
        time.sleep(min(delay, max(0.0, timeout - elapsed)))
        delay = min(delay * 1.5, max_delay)
