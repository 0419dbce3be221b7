"""Create, find, list and delete clusters, the same way on every backend.

`up` validates everything before it creates anything, provisions the machines through
the spec's provider, runs the shared step list, and on failure deletes what it made
unless --retain (kind's create). On a cluster that exists with the same spec, `up`
repairs it in place (cluster/repair.py), never wiping it; one with a different spec is a
one-line conflict; --recreate or `down` wipe. `stop`/`start` keep every file.
"""

from __future__ import annotations

import os
import getpass
import socket
import sys
import time
from typing import Callable, Dict, List, Optional

from provisioner.cluster.handle import Cluster
from provisioner.cluster.state import ClusterState, all_states, locked
from provisioner.cluster.steps import UpRun, run_steps
from provisioner.config.types import ClusterSpec
from provisioner.cluster.repair import repair
from provisioner.errors import ClusterConflict, ClusterNotFound, UsageError, SimclusterError
from provisioner.paths import ClusterLayout
from provisioner.providers import Provider, provider_named, registered_providers


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers): fall back to the uid
        return str(os.getuid())


def find_state(name: str, providers: Optional[List[Provider]] = None) -> Optional[ClusterState]:
    """The state of cluster ``name``: its state file, else one of ``providers`` (default: every
    backend that answers here) that still finds it."""
    st = ClusterState.load(ClusterLayout.for_name(name))
    if st is not None:
        return st
    for provider in registered_providers(available_only=True) if providers is None else providers:
        st = provider.discover(name)
        if st is not None:
            return st
    return None


def load(name: str) -> Cluster:
    """Cluster ``name`` on whichever backend made it."""
    st = find_state(name)
    if st is None:
        raise ClusterNotFound(f"no cluster named '{name}'", "see 'simcluster list', or create it with 'simcluster up'")
    return Cluster(st, provider_named(st.backend))


def is_running(cluster: Cluster) -> bool:
    return (cluster.state.phase == "running" and all(cluster.provider.machines_running(cluster.state).values())
            and all(cluster.daemons_alive().values()))


def up(spec: ClusterSpec, provider: Provider, retain: bool = False, recreate: bool = False,
       progress: Callable[[str], None] = _stderr) -> str:
    """Create cluster ``spec`` and wait until it is ready; return the summary line.

    On an existing cluster with the same spec, `up` repairs it in place (dead daemons start
    again with their ports, files and saved state; nothing is deleted, even if the repair
    fails). A different spec is a conflict. Only --recreate (or `down`) wipes a cluster."""
    layout = ClusterLayout.for_name(spec.name)
    with locked(spec.name):
        # Only the spec's own backend is asked: asking the others (an engine round trip for
        # docker) would slow down every local `up`.
        existing = find_state(spec.name, [provider])
        if existing is not None and not recreate:
            if existing.cluster_spec.identity() != spec.identity():
                raise ClusterConflict(f"cluster '{spec.name}' already exists with a different spec",
                                      f"run 'simcluster down --name {spec.name}' first, add --recreate to "
                                      "replace it (its jobs and state are lost), or pick another --name")
            if existing.phase in ("running", "stopped"):
                return _repair_message(Cluster(existing, provider_named(existing.backend)), progress, spec.wait,
                                       "repaired")
        provider.sanity_checks(spec)
        if existing is not None or layout.root.exists():
            # --recreate, or a cluster whose first `up` never finished: clear it away first.
            progress(f" - removing cluster '{spec.name}' (--recreate)" if recreate and existing is not None
                     else f" - replacing the half-made cluster '{spec.name}'")
            if existing is not None:
                provider_named(existing.backend).delete(existing)
            _remove_dir(layout)
        t0 = time.monotonic()
        state = ClusterState(name=spec.name, backend=provider.name, spec=spec.to_dict(), root=str(layout.root),
                             hostname=socket.gethostname().split(".")[0], user=_user(), controller_port=0,
                             node_ports={})
        layout.root.mkdir(parents=True, exist_ok=True)
        os.chmod(layout.root, 0o700)
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
                _remove_dir(layout)
            raise
    took = time.monotonic() - t0
    gpus = spec.all_gpus
    gpu_note = f", GPUs {','.join(map(str, gpus))}{' (fake)' if spec.fake_gpus else ''}" if gpus else ""
    acct_note = ", accounting ready (sacct, sshare)" if spec.accounting else ""
    where = cluster.placement.controller_where
    return (f"cluster '{spec.name}' is up ({provider.name}{'' if where == 'this host' else ', ' + where}): "
            f"{len(spec.nodes)} nodes idle{gpu_note}{acct_note} in {took:.2f}s\n{cluster.placement.usage}")


def _repair_message(cluster: Cluster, progress: Callable[[str], None], timeout: float, verb: str) -> str:
    t0 = time.monotonic()
    restarted = repair(cluster, progress, timeout)
    if not restarted:
        return f"cluster '{cluster.name}' is already running with this spec (nothing to do)"
    shown = ", ".join(restarted[:12]) + (f" and {len(restarted) - 12} more" if len(restarted) > 12 else "")
    return (f"cluster '{cluster.name}' {verb} in {time.monotonic() - t0:.2f}s: restarted {shown}; "
            f"same ports, state and jobs\n{cluster.placement.usage}")


def _existing(name: str, what: str) -> Cluster:
    st = ClusterState.load(ClusterLayout.for_name(name))
    if st is None:
        raise UsageError(f"no cluster named '{name}'", "see 'simcluster list'")
    if st.phase not in ("running", "stopped"):
        raise UsageError(f"cluster '{name}' was never fully created, so it cannot be {what}",
                         f"run 'simcluster up --name {name} --recreate' or 'simcluster down --name {name}'")
    return Cluster(st, provider_named(st.backend))


# Stopped in this order: nodes first (no new work), slurmctld (it saves its state on SIGTERM),
# then accounting, munged last (the others still talk to it while they shut down).
STOP_ORDER = ("slurmd:", "slurmctld", "slurmdbd", "mariadbd", "munged")


def stop(name: str, grace: float = 15.0) -> str:
    """Stop every daemon of cluster ``name`` gracefully and keep all of its state."""
    import signal
    from provisioner.cluster import faults
    with locked(name):
        c = _existing(name, "stopped")
        t0 = time.monotonic()
        if c.state.phase == "stopped" and not any(c.daemons_alive().values()):
            raise UsageError(f"cluster '{name}' is already stopped", f"start it: simcluster start --name {name}")
        for f in faults.active(c, "pause"):
            faults.resume_node(c, f["node"])
        for prefix in STOP_ORDER:
            keys = [k for k in c.state.pids if k.startswith(prefix)]
            if not keys:
                continue
            c.signal_daemons(keys, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(c.daemons_alive(keys).values()):
                time.sleep(0.05)
            c.signal_daemons(keys, signal.SIGKILL)  # stragglers
        c.provider.stop_machines(c.state)
        c.state.phase = "stopped"
        c.state.faults = [f for f in c.state.faults if f.get("what") == "drain"]  # kept by slurmctld's state
        c.state.save()
    return (f"cluster '{name}' stopped in {time.monotonic() - t0:.2f}s (state kept in {c.state.root}; "
            f"'simcluster start --name {name}' brings it back)")


def start(name: str, progress: Callable[[str], None] = _stderr, timeout: Optional[float] = None) -> str:
    """Start a stopped cluster (or one whose daemons died, e.g. after a reboot) in place."""
    with locked(name):
        c = _existing(name, "started")
        if c.state.phase == "running" and is_running(c):
            raise UsageError(f"cluster '{name}' is already running", "see 'simcluster status'")
        return _repair_message(c, progress, timeout or c.spec.wait, "started")


def _remove_dir(layout: ClusterLayout) -> None:
    import shutil
    shutil.rmtree(layout.root, ignore_errors=True)


def down(name: str) -> str:
    """Stop every process or container of cluster ``name`` and delete its state."""
    layout = ClusterLayout.for_name(name)
    with locked(name):
        t0 = time.monotonic()
        st = find_state(name)
        if st is None:
            orphan = next((p for p in registered_providers(available_only=True) if name in p.orphans()), None)
            if orphan is None and not layout.root.exists():
                raise ClusterNotFound(f"no cluster named '{name}'", "see 'simcluster list'")
            if orphan is not None:
                orphan.delete_orphan(name)
            survivors: List[int] = []
        else:
            survivors = provider_named(st.backend).delete(st)
        _remove_dir(layout)
    note = f" ({len(survivors)} processes would not die: {survivors})" if survivors else ""
    return f"cluster '{name}' removed in {time.monotonic() - t0:.2f}s{note}"


def list_clusters() -> List[Dict]:
    """Every cluster on this machine: name, backend, nodes, running/stopped/degraded."""
    result = []
    names = set()
    for st in all_states():
        cluster = Cluster(st, provider_named(st.backend))
        try:
            machines = cluster.provider.machines_running(st)
            alive = cluster.daemons_alive()
        except SimclusterError as exc:  # e.g. docker clusters while no engine runs: list the rest
            machines, alive = {}, {}
            status = f"unknown ({exc.message})"
        else:
            up_count = sum(alive.values())
            if up_count == len(alive) and st.phase == "running" and all(machines.values()):
                status = "running"
            else:
                status = "stopped" if up_count == 0 else "degraded"
        result.append({"name": st.name, "backend": st.backend, "nodes": len(cluster.spec.nodes), "status": status,
                       "state_dir": st.root})
        names.add(st.name)
    for provider in registered_providers(available_only=True):
        for name in provider.orphans():
            if name not in names:
                result.append({"name": name, "backend": provider.name, "nodes": None, "status": "orphaned",
                               "state_dir": None})
    return result
