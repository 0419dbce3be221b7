"""Wait strategies (after testcontainers): poll a condition until it holds, fails hard, or times out.

A WaitStrategy has a timeout and a poll interval (backing off from ``first_delay`` to
``max_delay``), an optional guard that raises as soon as the thing waited for died, and
on timeout raises a StartupError that says what was waited for, what was last seen, and
the log tails that explain it. No fixed sleeps: a fast cluster is seen ready within
milliseconds of being ready.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Generic, Optional, Tuple, TypeVar

from provisioner.errors import StartupError

T = TypeVar("T")


class WaitTimeout(Exception):
    def __init__(self, waited: float, last_seen: object):
        super().__init__(f"timed out after {waited:.1f}s")
        self.waited = waited
        self.last_seen = last_seen


def poll_until(check: Callable[[], Tuple[bool, T]], timeout: float, first_delay: float = 0.005,
               max_delay: float = 0.1) -> T:
    """Call ``check`` until it returns (True, value); raise WaitTimeout with the last value."""
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
        delay = min(delay * 1.5, max_delay)


@dataclass
class WaitStrategy(Generic[T]):
    """Wait for ``what`` (e.g. "2 nodes to be idle") to hold.

    ``check`` returns (done, seen). ``guard`` runs before every check and raises (a
    StartupError naming the dead daemon) when waiting longer cannot help. On timeout the
    error carries ``describe(seen)`` and ``logs()`` (log tails) as details.
    """

    what: str
    check: Callable[[], Tuple[bool, T]]
    timeout: float
    first_delay: float = 0.01
    max_delay: float = 0.1
    guard: Optional[Callable[[], None]] = None
    describe: Callable[[Optional[T]], str] = lambda seen: f"last seen: {seen}"
    logs: Callable[[], str] = lambda: ""
    hint: str = "raise --wait, or look at the logs below"
    headline: Optional[Callable[[Optional[T]], str]] = None  # one-line summary of what was last seen

    def wait(self) -> T:
        def guarded() -> Tuple[bool, T]:
            if self.guard is not None:
                self.guard()
            return self.check()

        try:
            return poll_until(guarded, self.timeout, self.first_delay, self.max_delay)
        except WaitTimeout as exc:
            details = "\n".join(x for x in (self.describe(exc.last_seen), self.logs()) if x)
            summary = f": {self.headline(exc.last_seen)}" if self.headline else ""
            raise StartupError(f"timed out after {exc.waited:.0f}s waiting for {self.what}{summary}", self.hint,
                               details=details) from None
