"""Create, find, list and delete clusters, the same way on every backend.

`up` validates everything before it creates anything, provisions the machines through
the spec's provider, runs the shared step list, and on failure deletes what it made
unless --retain (kind's create). A cluster that already runs with the same spec is left
alone; one with a different spec is a one-line conflict.
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
from provisioner.errors import ClusterConflict, ClusterNotFound, SimclusterError
from provisioner.paths import ClusterLayout
from provisioner.providers import Provider, provider_named, registered_providers


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers): fall back to the uid
        return str(os.getuid())


def find_state(name: str) -> Optional[ClusterState]:
    """The state of cluster ``name``: its state file, else a backend that still finds it."""
    st = ClusterState.load(ClusterLayout.for_name(name))
    if st is not None:
        return st
    for provider in registered_providers(available_only=True):
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


def up(spec: ClusterSpec, provider: Provider, retain: bool = False,
       progress: Callable[[str], None] = _stderr) -> str:
    """Create cluster ``spec`` and wait until it is ready; return the summary line."""
    layout = ClusterLayout.for_name(spec.name)
    with locked(spec.name):
        existing = find_state(spec.name)
        if existing is not None:
            old = Cluster(existing, provider_named(existing.backend))
            if is_running(old):
                if existing.cluster_spec.identity() == spec.identity():
                    return f"cluster '{spec.name}' is already running with this spec (nothing to do)"
                raise ClusterConflict(f"cluster '{spec.name}' is already running with a different spec",
                                      f"run 'simcluster down --name {spec.name}' first, or pick another --name")
        provider.sanity_checks(spec)
        if existing is not None or layout.root.exists():
            # A stopped or half-made cluster of this name: clear it away first.
            progress(f" - replacing the stopped or degraded cluster '{spec.name}'")
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
