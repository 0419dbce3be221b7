"""Clusters by name, on whichever backend made them: find, load, up, down, stop, start,
list, and the fault injector; open_cluster also reaches a deployed cluster over SSH.

This is where the provider registry (provisioner.providers) meets the shared cluster
model (provisioner.cluster): it sits above both, so cluster/ never imports a provider.
The CLI, the pytest plugin, `check --run`, verify and the scripts call these.

Locking (the one rule, cluster/lifecycle/create.py has it in full): every function here that
changes a cluster takes the cluster's lock and loads the cluster inside it; what it calls
in cluster/ runs under that lock and never takes it again. `load` and `find_state` only
read, and lock nothing.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Dict, Iterator, List, Optional

from provisioner.cluster.faults.registry import FAULTS, Fault, fault_named, undo_first_faults
from provisioner.cluster.lifecycle import create as lifecycle
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.provider import Orphans, machines_running
from provisioner.cluster.model.state import ClusterState, all_states, locked
from provisioner.cluster.services import metrics
from provisioner.config.types import ClusterSpec
from provisioner.errors import ClusterConflict, ClusterNotFound, SimclusterError, UsageError
from provisioner.paths import ClusterLayout, shared_home, shared_umask
from provisioner.progress import stderr as progress_stderr
from provisioner.providers import Provider, provider_named, registered_providers


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


def shared_state(name: str) -> Optional[ClusterState]:
    """Cluster ``name`` among root's clusters (paths.SYSTEM_HOME), for a user whose own
    $SIMCLUSTER_HOME has none of that name (paths.shared_home); else None."""
    home = shared_home()
    return ClusterState.load(ClusterLayout.for_name(name, home)) if home is not None else None


def _not_yours(name: str, command: str) -> None:
    """Raise a clear error when cluster ``name`` is root's, not this user's: only its owner
    may run ``command`` (down, stop, start) on it."""
    st = shared_state(name)
    if st is not None:
        sudo_hint = f"; a user with passwordless sudo: simcluster down --sudo --name {name}" if command == "down" else ""
        raise UsageError(f"cluster '{name}' is {st.user}'s ({st.root}): only {st.user} may '{command}' it",
                         f"as {st.user}: sudo simcluster {command} --name {name}{sudo_hint}")


def load(name: str) -> Cluster:
    """Cluster ``name`` on whichever backend made it: this user's own, else root's
    (shared_state), which every local user may use."""
    st = find_state(name) or shared_state(name)
    if st is None:
        raise ClusterNotFound(f"no cluster named '{name}'", "see 'simcluster list', or create it with 'simcluster up'")
    return Cluster(st, provider_named(st.backend))


@contextlib.contextmanager
def open_cluster(name: str, ssh: Optional[str] = None, ssh_key: Optional[str] = None,
                 known_hosts: Optional[str] = None, insecure_host_key: bool = False) -> Iterator[Cluster]:
    """Cluster ``name`` of this machine; or, with ``ssh`` (USER@HOST[:PORT]), the cluster
    `simcluster deploy` made whose controller that is, read over SSH by the ssh provider
    (the connection closes when the block ends). Either way a Cluster for the same
    status, export-logs and verify code."""
    if ssh:
        # lazy: paramiko loads only when a command is given --ssh
        from provisioner.providers.ssh import open_cluster as open_deployed
        with open_deployed(ssh, ssh_key, known_hosts, insecure_host_key) as cluster:
            yield cluster
    else:
        yield load(name)


def up(spec: ClusterSpec, provider: Provider, retain: bool = False, recreate: bool = False,
       progress: Callable[[str], None] = progress_stderr) -> str:
    """Create cluster ``spec`` and wait until it is ready; return the summary line.

    On an existing cluster with the same spec, `up` repairs it in place (dead daemons start
    again with their ports, files and saved state; nothing is deleted, even if the repair
    fails). A different spec is a conflict. Only --recreate (or `down`) wipes a cluster."""
    layout = ClusterLayout.for_name(spec.name)
    with locked(spec.name), shared_umask():
        # Only the spec's own backend is asked: asking the others (an engine round trip for
        # docker) would slow down every local `up`.
        existing = find_state(spec.name, [provider])
        if existing is not None and not recreate:
            if existing.cluster_spec.identity() != spec.identity():
                raise ClusterConflict(f"cluster '{spec.name}' already exists with a different spec",
                                      f"run 'simcluster down --name {spec.name}' first, add --recreate to "
                                      "replace it (its jobs and state are lost), or pick another --name")
            if existing.phase in ("running", "stopped"):
                c = Cluster(existing, provider_named(existing.backend))
                return _undone_first(c, lambda: lifecycle.repair_in_place(c, progress, spec.wait, "repaired"))
        provider.sanity_checks(spec)
        if existing is not None or layout.root.exists():
            # --recreate, or a cluster whose first `up` never finished: clear it away first.
            progress(f" - removing cluster '{spec.name}' (--recreate)" if recreate and existing is not None
                     else f" - replacing the half-made cluster '{spec.name}'")
            if existing is not None:
                provider_named(existing.backend).delete(existing)
            lifecycle.remove_dir(layout)
        return lifecycle.create(spec, provider, retain, progress)


def _existing(name: str, what: str) -> Cluster:
    st = ClusterState.load(ClusterLayout.for_name(name))
    if st is None:
        _not_yours(name, {"stopped": "stop", "started": "start"}.get(what, what))
        raise UsageError(f"no cluster named '{name}'", "see 'simcluster list'")
    if st.phase not in ("running", "stopped"):
        raise UsageError(f"cluster '{name}' was never fully created, so it cannot be {what}",
                         f"run 'simcluster up --name {name} --recreate' or 'simcluster down --name {name}'")
    return Cluster(st, provider_named(st.backend))


def stop(name: str, grace: float = 15.0) -> str:
    """Stop every daemon of cluster ``name`` gracefully and keep all of its state."""
    with locked(name):
        c = _existing(name, "stopped")
        if c.state.phase == "stopped" and not any(c.daemons_alive().values()):
            raise UsageError(f"cluster '{name}' is already stopped", f"start it: simcluster start --name {name}")
        return _undone_first(c, lambda: lifecycle.stop(c, grace))


def start(name: str, progress: Callable[[str], None] = progress_stderr, timeout: Optional[float] = None) -> str:
    """Start a stopped cluster (or one whose daemons died, e.g. after a reboot) in place."""
    with locked(name), shared_umask():
        c = _existing(name, "started")
        if c.state.phase == "running" and lifecycle.is_running(c):
            raise UsageError(f"cluster '{name}' is already running", "see 'simcluster status'")
        return _undone_first(c, lambda: lifecycle.repair_in_place(c, progress, timeout or c.spec.wait, "started"))


def _undone_first(c: Cluster, then: Callable[[], str]) -> str:
    """Undo the faults a stop or a repair must not meet (a node off the network: the
    registry's undo_first rows), then ``then()``; the summary says what was undone."""
    undone = undo_first_faults(c)
    done = then()
    return done + (f" (fault undone first: {'; '.join(undone)})" if undone else "")


def down(name: str) -> str:
    """Stop every process or container of cluster ``name`` and delete its state."""
    layout = ClusterLayout.for_name(name)
    with locked(name):
        t0 = time.monotonic()
        st = find_state(name)
        if st is None:
            orphan = next((p for p in registered_providers(available_only=True) if isinstance(p, Orphans) and name in p.orphans()), None)
            if orphan is None and not layout.root.exists():
                _not_yours(name, "down")
                raise ClusterNotFound(f"no cluster named '{name}'", "see 'simcluster list'")
            if orphan is not None:
                orphan.delete_orphan(name)
            # A metrics exporter runs on this host whatever the backend: one whose state file
            # is gone goes with the directory it serves.
            survivors: List[int] = metrics.stop_exporters(str(layout.root))
        else:
            survivors = provider_named(st.backend).delete(st)
        lifecycle.remove_dir(layout)
    note = f" ({len(survivors)} processes would not die: {survivors})" if survivors else ""
    return f"cluster '{name}' removed in {time.monotonic() - t0:.2f}s{note}"


def list_clusters(with_shared: bool = False) -> List[Dict]:
    """Every cluster on this machine: name, backend, nodes, running/stopped/degraded; with
    ``with_shared`` also root's clusters another user may use (``shared``: True), unless a
    cluster of their own has that name."""
    result = []
    names = set()
    home = shared_home() if with_shared else None
    own = all_states()
    shared = [st for st in all_states(home) if st.name not in {o.name for o in own}] if home is not None else []
    for st in own + shared:
        cluster = Cluster(st, provider_named(st.backend))
        try:
            machines = machines_running(cluster.provider, st)
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
                       "state_dir": st.root, "owner": st.user, "shared": st in shared})
        names.add(st.name)
    for provider in registered_providers(available_only=True):
        for name in provider.orphans() if isinstance(provider, Orphans) else ():
            if name not in names:
                result.append({"name": name, "backend": provider.name, "nodes": None, "status": "orphaned",
                               "state_dir": None, "owner": None, "shared": False})
    return result


class Injector:
    """The faults of cluster/faults/registry.py for cluster ``name``, as `simcluster fault`,
    `verify --suite faults` and the pytest plugin's ``slurm_faults`` use them: one method per
    fault (``kill(node)``, ``drain(node, reason)``, ``kill_controller()``, ``heal(timeout)``,
    ``time_limit(job_id, seconds)`` ...), made from its row. Each call loads the cluster
    afresh; a cluster fault holds the cluster's lock while it runs, a job fault does not
    (cluster/faults/job.py says why)."""

    def __init__(self, name: str):
        self.name = name

    def inject(self, verb: str, *args, **kwargs) -> str:
        """Fault ``verb`` (its row's inject function) with ``args`` on the cluster."""
        fault = fault_named(verb)
        if not fault.locked:
            return fault.inject(load(self.name), *args, **kwargs)
        with locked(self.name):
            return fault.inject(load(self.name), *args, **kwargs)

    @property
    def fast(self) -> bool:
        """True when the cluster detects dead nodes fast (up --fast-failure)."""
        return load(self.name).spec.failure_detection == "fast"


def _injector_method(fault: Fault) -> Callable[..., str]:
    def method(self: Injector, *args, **kwargs) -> str:
        return self.inject(fault.verb, *args, **kwargs)
    method.__name__ = method.__qualname__ = fault.method
    method.__doc__ = fault.help.splitlines()[0]
    return method


for _fault in FAULTS:  # Injector.kill, Injector.kill_controller ...: one per row
    setattr(Injector, _fault.method, _injector_method(_fault))
