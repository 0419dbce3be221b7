"""Wait strategies (after testcontainers): poll a condition until it holds, fails hard, or times out.

A WaitStrategy has a timeout and a poll interval (backing off from ``first_delay`` to
``max_delay``), an optional guard that raises as soon as the thing waited for died, and
on timeout raises a StartupError that says what was waited for, what was last seen, and
the log tails that explain it. No fixed sleeps: a fast cluster is seen ready within
milliseconds of being ready.

Every poll in simcluster that waits for something to happen goes through here
(``poll_until``, in cluster/model/poll.py so that the runners below can use it too, or a
``WaitStrategy``), so each has a timeout and says on timeout what it
last saw. ``nodes_ready`` is the one "every node answers / is idle" wait; ``daemons_guard``
is the "it died" guard the daemon waits share.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, Generic, List, Optional, Tuple, TypeVar

from provisioner.cluster.model.handle import Cluster, log_name
from provisioner.cluster.model.poll import WaitTimeout, poll_until
from provisioner.cluster.model.slurm import NodeState, format_node_table
from provisioner.errors import StartupError

T = TypeVar("T")


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


def daemon_died(cluster: Cluster, key: str) -> StartupError:
    """The error for a daemon that exited: its log tails say why."""
    name = log_name(key)
    runner = cluster.daemon_runner(key)
    parts = [cluster.log_tail(key)]
    out = runner.read_text(f"{cluster.paths.log}/{name}.out")
    if out and out.strip():
        parts.append(f"--- tail of {cluster.paths.log}/{name}.out ---\n" + "\n".join(out.splitlines()[-20:]))
    return StartupError(f"{key} exited during startup", f"see {cluster.paths.daemon_log(name)} ({runner.where})",
                        details="\n".join(parts))


def daemons_guard(cluster: Cluster, keys: Optional[List[str]] = None) -> Callable[[], None]:
    """A wait guard: raise StartupError naming the first of ``keys`` (default all) that died."""
    def check() -> None:
        for key, alive in cluster.daemons_alive(keys).items():
            if not alive:
                raise daemon_died(cluster, key)
    return check


def throttled(check: Callable[[], None], every: float = 0.5) -> Callable[[], None]:
    """Run ``check`` at most every ``every`` seconds, the first time ``every`` seconds in
    (asking a docker cluster's machines is not free: one exec each, ~50 ms; the daemons were
    just started, and a wait that is done within ``every`` needs no check at all)."""
    last = [time.monotonic()]

    def run() -> None:
        if time.monotonic() - last[0] >= every:
            last[0] = time.monotonic()
            check()
    return run


def idle(state: NodeState) -> bool:
    """The default readiness: the node answers and takes jobs (idle, mixed, allocated)."""
    return state.ready


def nodes_ready(cluster: Cluster, timeout: float, ready: Callable[[NodeState], bool] = idle,
                adjective: str = "idle", guard: bool = True) -> Dict[str, NodeState]:
    """THE "nodes ready" wait: until ``ready(state)`` holds for every node of ``cluster`` in
    sinfo; return the states last seen. `up`, a repair, `fault heal` and the pytest
    plugin's heal all wait here. With ``guard``, a dead daemon of the cluster ends the
    wait at once (its log tails say why); on timeout the error lists the nodes that are not
    ``adjective`` with their state and reason, and the tails of slurmctld's log and of the
    first two such nodes' slurmd logs."""
    names = cluster.node_names
    client = cluster.client

    def not_ready(states: Optional[Dict[str, NodeState]]) -> List[str]:
        return [n for n in names if not states or n not in states or not ready(states[n])]

    def check() -> Tuple[bool, Optional[Dict[str, NodeState]]]:
        states = client.node_states()
        return states is not None and not not_ready(states), states

    def describe(states: Optional[Dict[str, NodeState]]) -> str:
        if states is None:
            return "slurmctld did not answer sinfo"
        bad = not_ready(states)
        return f"nodes not {adjective} ({len(bad)} of {len(names)}):\n" + format_node_table(states, bad[:20])

    def logs() -> str:
        bad = not_ready(client.node_states() or {})
        return "\n".join([cluster.log_tail("slurmctld", 15)] + [cluster.log_tail(f"slurmd:{n}", 15) for n in bad[:2]])

    # Bigger clusters: each sinfo costs more, so poll a little less often.
    return WaitStrategy(f"{len(names)} nodes to be {adjective}", check, timeout, first_delay=0.01,
                        max_delay=0.05 if len(names) <= 16 else 0.25,
                        guard=throttled(daemons_guard(cluster)) if guard else None, describe=describe, logs=logs,
                        headline=lambda states: f"{len(not_ready(states))} of {len(names)} nodes are not {adjective}"
                        ).wait()
