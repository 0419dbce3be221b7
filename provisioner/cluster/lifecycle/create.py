"""Create, repair and stop one cluster, given its provider: the same way on every backend.

`create` provisions the machines through the provider, runs the shared step list and on
failure deletes what it made unless --retain (kind's create). `repair_in_place` brings a
cluster that exists back without wiping it (cluster/lifecycle/repair.py); `stop` stops its daemons
and keeps every file. Clusters by *name* (find, load, up, down, start, list: the provider
registry, and the lock) are one level up, in provisioner/named_clusters.py: nothing in
cluster/ imports the providers, which build on cluster/.

Locking, one rule for lifecycle and faults: whatever takes a cluster *name* and changes
the cluster (provisioner/named_clusters.py: up, down, stop, start, and every `Injector` method,
the `simcluster fault` commands) takes the cluster's lock (state.locked) and loads the
cluster inside it. Everything that takes a `Cluster` or a provider (this module,
faults.py, repair.py, steps.py) runs under the lock its caller holds and never takes it.
So each command locks exactly once, at its top, and the state it loaded cannot change
under it.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import time
from typing import TYPE_CHECKING, Callable, List

from provisioner.cluster.lifecycle.repair import paused_nodes, repair, unpause
from provisioner.cluster.lifecycle.steps import UpRun, run_steps
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.provider import Stoppable, machines_running
from provisioner.cluster.model.state import ClusterState
from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.config.types import ClusterSpec
from provisioner.paths import ClusterLayout, state_dir_mode

if TYPE_CHECKING:  # typing only: providers build on cluster/, never the other way round
    from provisioner.cluster.model.provider import Provider


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers): fall back to the uid
        return str(os.getuid())


def is_running(cluster: Cluster) -> bool:
    return (cluster.state.phase == "running" and all(machines_running(cluster.provider, cluster.state).values())
            and all(cluster.liveness().values()))



def id_ranges(ids) -> str:
    """GPU ids as a short list: runs of three or more become ranges ('0-23', '6,7', '0-3,8')."""
    out, run = [], []
    for i in list(ids) + [None]:
        if run and i is not None and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) >= 3 else ",".join(map(str, run)))
        run = [i] if i is not None else []
    return ",".join(out)

def create(spec: ClusterSpec, provider: "Provider", retain: bool, progress: Callable[[str], None]) -> str:
    """Make cluster ``spec`` on ``provider`` from nothing and wait until it is ready; return
    `up`'s summary line. On failure what was made is deleted again, unless ``retain``.
    The caller holds the lock and has cleared away any earlier cluster of that name."""
    layout = ClusterLayout.for_name(spec.name)
    t0 = time.monotonic()
    state = ClusterState(name=spec.name, backend=provider.name, spec=spec.to_dict(), root=str(layout.root),
                         hostname=socket.gethostname().split(".")[0], user=_user(), controller_port=0,
                         node_ports={})
    layout.root.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.root, state_dir_mode())  # root's: readable by every local user (docs/users.md)
    try:
        provider.provision(spec, state, progress)
        state.save()  # from here on, `down` can find and remove whatever gets started
        cluster = Cluster(state, provider)
        run_steps(UpRun(cluster, progress, spec.wait))
    except BaseException:
        # Only a cluster this same `up` created is deleted on failure.
        if retain:
            state.save()
            progress(f"keeping the failed cluster for inspection (--retain): {layout.root}")
        else:
            provider.delete(state)
            remove_dir(layout)
        raise
    took = time.monotonic() - t0
    gpus = spec.all_gpus
    gpu_note = f", GPUs {id_ranges(gpus)}{' (fake)' if spec.fake_gpus else ''}" if gpus else ""
    acct_note = ", accounting ready (sacct, sshare)" if spec.accounting else ""
    where = cluster.placement.controller_where
    short = "".join(f"\nunlike a production host here: {line}" for line in cluster.placement.shortfalls)
    return (f"cluster '{spec.name}' is up ({provider.name}{'' if where == 'this host' else ', ' + where}): "
            f"{len(spec.nodes)} nodes idle{gpu_note}{acct_note} in {took:.2f}s{short}\n{cluster.placement.usage}")


def repair_in_place(cluster: Cluster, progress: Callable[[str], None], timeout: float, verb: str) -> str:
    """`up` on a cluster that exists with the same spec, and `start`: restart what is dead."""
    t0 = time.monotonic()
    restarted = repair(cluster, progress, timeout)
    if not restarted:
        return f"cluster '{cluster.name}' is already running with this spec (nothing to do)"
    shown = ", ".join(restarted[:12]) + (f" and {len(restarted) - 12} more" if len(restarted) > 12 else "")
    return (f"cluster '{cluster.name}' {verb} in {time.monotonic() - t0:.2f}s: restarted {shown}; "
            f"same ports, state and jobs\n{cluster.placement.usage}")


# Stopped in this order: the metrics exporter and the REST API first (no new requests), nodes (no new work), slurmctld (it saves its state on SIGTERM),
# then accounting, munged last (the others still talk to it while they shut down).
STOP_ORDER = ("metrics", "slurmrestd", "slurmd:", "slurmctld", "slurmdbd", "mariadbd", "munged")


def terminate(c: Cluster, keys: List[str], grace: float = 15.0) -> None:
    """Stop the daemons ``keys`` of ``c``: SIGTERM (slurmctld and slurmd write their state),
    then SIGKILL what is still alive after ``grace`` s."""
    if not keys:
        return
    c.signal_daemons(keys, signal.SIGTERM)
    try:
        poll_until(lambda: (not any(c.daemons_alive(keys).values()), None), grace, first_delay=0.02,
                   max_delay=0.1)
    except WaitTimeout:
        c.signal_daemons(keys, signal.SIGKILL)


def stop(c: Cluster, grace: float = 15.0) -> str:
    """Stop every daemon of ``c`` gracefully (SIGTERM, SIGKILL after ``grace`` s) and keep
    all of its state; paused nodes are resumed first (a stopped process takes no SIGTERM)."""
    t0 = time.monotonic()
    for node in paused_nodes(c):
        unpause(c, node)
    for prefix in STOP_ORDER:
        terminate(c, [k for k in c.state.pids if k.startswith(prefix)], grace)
    if isinstance(c.provider, Stoppable):
        c.provider.stop_machines(c.state)
    c.state.phase = "stopped"
    # Drains are kept by slurmctld's state; a GPU fault (gpu-faults.json) outlives a stop.
    c.state.faults = [f for f in c.state.faults if f.get("what") in ("drain", "gpu")]
    c.state.save()
    return (f"cluster '{c.name}' stopped in {time.monotonic() - t0:.2f}s (state kept in {c.state.root}; "
            f"'simcluster start --name {c.name}' brings it back)")


def remove_dir(layout: ClusterLayout) -> None:
    shutil.rmtree(layout.root, ignore_errors=True)


__all__: List[str] = ["create", "is_running", "remove_dir", "repair_in_place", "stop", "STOP_ORDER"]
