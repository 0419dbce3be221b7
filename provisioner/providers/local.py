"""Local backend: every daemon is a process on this host, one slurmd per virtual node."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Dict, List, Optional

from provisioner.actions import accounting, daemons, files, preflight
from provisioner.actions.context import UpContext
from provisioner.actions.wait_ready import wait_nodes_ready
from provisioner.config.types import ClusterSpec
from provisioner.errors import ClusterConflict, ClusterNotFound
from provisioner.paths import ClusterLayout
from provisioner.ports import allocate_ports
from provisioner.procs import cluster_pids, pid_alive, terminate
from provisioner.slurm import node_states
from provisioner.state import ClusterState, all_states, locked, port_lock, reserved_ports


def _print_err(msg: str) -> None:
    import sys
    print(msg, file=sys.stderr, flush=True)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers): fall back to the uid
        return str(os.getuid())


def load_state(name: str) -> ClusterState:
    st = ClusterState.load(ClusterLayout.for_name(name))
    if st is None:
        raise ClusterNotFound(f"no cluster named '{name}'", "see 'simcluster list', or create it with 'simcluster up'")
    return st


def daemons_alive(st: ClusterState) -> Dict[str, bool]:
    return {key: pid_alive(pid) for key, pid in st.pids.items()}


def stop_processes(root: Path, known_pids: List[int]) -> List[int]:
    """Stop every process of the cluster in ``root``; return any that would not die.

    SIGKILL at once: the cluster's state is deleted next, so a graceful slurmctld shutdown
    (saving state) is wasted time. Sweep again in case a slurmd forked a stepd meanwhile.
    """
    survivors: List[int] = []
    for _ in range(3):
        pids = cluster_pids(root, known_pids)
        if not pids:
            return []
        survivors = terminate(pids, grace=0)
        known_pids = []
    return survivors


class LocalProvider:
    name = "local"

    def sanity_checks(self, spec: ClusterSpec) -> str:
        nss = preflight.run_preflight(spec, ClusterLayout.for_name(spec.name))
        if spec.accounting:
            accounting.check_prerequisites()
        return nss

    # -- up -------------------------------------------------------------------------------
    def up(self, spec: ClusterSpec, retain: bool = False, progress=None) -> str:
        layout = ClusterLayout.for_name(spec.name)
        with locked(spec.name):
            existing = ClusterState.load(layout)
            if existing is not None and all(daemons_alive(existing).values()) and existing.phase == "running":
                if existing.cluster_spec.identity() == spec.identity():
                    return f"cluster '{spec.name}' is already running with this spec (nothing to do)"
                raise ClusterConflict(
                    f"cluster '{spec.name}' is already running with a different spec",
                    f"run 'simcluster down --name {spec.name}' first, or pick another --name")
            nss = self.sanity_checks(spec)
            if existing is not None or layout.root.exists():
                # A stopped or half-made cluster of this name: clear it away first.
                (progress or _print_err)(f" - replacing the stopped or degraded cluster '{spec.name}'")
                stop_processes(layout.root, list(existing.pids.values()) if existing else [])
                shutil.rmtree(layout.root, ignore_errors=True)
            ctx = self._new_context(spec, layout, nss, progress)
            try:
                self._create(ctx)
            except BaseException:
                if retain:
                    ctx.state.save()
                    ctx.progress(f"keeping the failed cluster for inspection (--retain): {layout.root}")
                else:
                    stop_processes(layout.root, list(ctx.state.pids.values()))
                    shutil.rmtree(layout.root, ignore_errors=True)
                raise
        took = time.monotonic() - ctx.started_at
        gpus = ctx.spec.all_gpus
        gpu_note = f", GPUs {','.join(map(str, gpus))}{' (fake)' if spec.fake_gpus else ''}" if gpus else ""
        acct_note = ", accounting ready (sacct, sshare)" if spec.accounting else ""
        return (f"cluster '{spec.name}' is up: {len(spec.nodes)} nodes idle{gpu_note}{acct_note} in {took:.2f}s\n"
                f'use it: eval "$(simcluster env --name {spec.name})"; sinfo')

    def _new_context(self, spec: ClusterSpec, layout: ClusterLayout, nss: str, progress) -> UpContext:
        with port_lock():
            needed = [n for n in spec.nodes if n.port is None]
            count = len(needed) + (0 if spec.controller_port else 1) + (2 if spec.accounting else 0)
            free = iter(allocate_ports(count, reserved=reserved_ports(exclude=spec.name))) if count else iter(())
            controller_port = spec.controller_port or next(free)
            node_ports = {n.name: n.port or next(free) for n in spec.nodes}
            state = ClusterState(name=spec.name, backend=self.name, spec=spec.to_dict(), root=str(layout.root),
                                 hostname=socket.gethostname().split(".")[0], user=_user(),
                                 controller_port=controller_port, node_ports=node_ports,
                                 nss_wrapper_lib=nss)
            if spec.accounting:
                state.mariadb_port, state.slurmdbd_port = next(free), next(free)
            ctx = UpContext(spec=spec, state=state)
            if progress is not None:
                ctx.progress = progress
            files.create_dirs(ctx)
            state.save()  # from here on, `down` can find and remove whatever gets started
        return ctx

    def _create(self, ctx: UpContext) -> None:
        n = len(ctx.spec.nodes)
        acct = accounting.plan(ctx) if ctx.spec.accounting else None
        with ctx.step("writing configs and munge key"):
            files.write_munge_key(ctx)
            files.write_configs(ctx, accounting=acct)
            files.make_fake_gpus(ctx)
        with ctx.step("starting munged"):
            daemons.start_munged(ctx)
        if acct is not None:
            accounting.start(ctx, acct)  # database, slurmdbd, associations: before slurmctld
        with ctx.step(f"starting slurmctld on port {ctx.state.controller_port}"):
            daemons.start_slurmctld(ctx)
        with ctx.step(f"starting {n} slurmd"):
            daemons.start_slurmds(ctx)
            ctx.state.save()
        with ctx.step(f"waiting for {n} nodes to be idle"):
            wait_nodes_ready(ctx, ctx.spec.wait)
        if acct is not None:
            with ctx.step("waiting for slurmctld to register with slurmdbd"):
                accounting.wait_registered(ctx, ctx.spec.wait)
        ctx.state.phase = "running"
        ctx.state.save()

    # -- down / status / list ------------------------------------------------------------
    def down(self, name: str) -> str:
        layout = ClusterLayout.for_name(name)
        with locked(name):
            st = ClusterState.load(layout)
            if st is None and not layout.root.exists():
                raise ClusterNotFound(f"no cluster named '{name}'", "see 'simcluster list'")
            t0 = time.monotonic()
            survivors = stop_processes(layout.root, list(st.pids.values()) if st else [])
            shutil.rmtree(layout.root, ignore_errors=True)
        note = f" ({len(survivors)} processes would not die: {survivors})" if survivors else ""
        return f"cluster '{name}' removed in {time.monotonic() - t0:.2f}s{note}"

    def status(self, name: str) -> Dict:
        st = load_state(name)
        spec = st.cluster_spec
        alive = daemons_alive(st)
        states = node_states(st.layout.slurm_conf) if alive.get("slurmctld") else None
        nodes = []
        for n in spec.nodes:
            ns = (states or {}).get(n.name)
            nodes.append({"name": n.name, "state": ns.state if ns else "unknown", "reason": ns.reason if ns else "",
                          "ready": bool(ns and ns.ready), "gpus": list(n.gpus), "cpus": n.cpus,
                          "memory_mb": n.memory, "port": st.node_ports.get(n.name),
                          "slurmd_alive": alive.get(f"slurmd:{n.name}", False)})
        acct = accounting.health(st)
        healthy = (st.phase == "running" and all(alive.values()) and all(x["ready"] for x in nodes)
                   and acct.get("healthy", True))
        return {"name": st.name, "backend": st.backend, "phase": st.phase, "healthy": healthy,
                "fake_gpus": spec.fake_gpus, "state_dir": st.root, "slurm_conf": str(st.layout.slurm_conf),
                "controller": {"port": st.controller_port, "alive": alive.get("slurmctld", False),
                               "responding": states is not None},
                "munged": {"alive": alive.get("munged", False), "socket": str(st.layout.munge_socket)},
                "accounting": acct, "nodes": nodes}

    def list_clusters(self) -> List[Dict]:
        result = []
        for st in all_states():
            alive = daemons_alive(st)
            up = sum(alive.values())
            health = "running" if up == len(alive) and st.phase == "running" else ("stopped" if up == 0 else "degraded")
            result.append({"name": st.name, "backend": st.backend, "nodes": len(st.node_ports),
                           "status": health, "state_dir": st.root})
        return result

    def client_env(self, name: str) -> Dict[str, str]:
        st = load_state(name)
        return {"SLURM_CONF": str(st.layout.slurm_conf), "SIMCLUSTER_CLUSTER": st.name}

    def collect_logs(self, name: str, out_dir: Path) -> List[Path]:
        from provisioner.logs import export_logs
        return export_logs(load_state(name), out_dir)


def find_state(name: str) -> Optional[ClusterState]:
    return ClusterState.load(ClusterLayout.for_name(name))
