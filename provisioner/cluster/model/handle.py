"""A cluster that exists: its state, the provider that made it, its runners, its Slurm client.

Everything after provisioning takes a Cluster: the steps of `up`, status, export-logs,
verify, `down`. Runners are keyed "controller" or by node name; which machine a key
means is the provider's business. One key is the same on every backend: "host" (HOST),
this host, where the daemons that serve its users from here run (the metrics exporter).
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from provisioner.cluster.model.command_runner import HostRunner, Runner
from provisioner.cluster.model.placement import CONTROLLER, HOST, Placement
from provisioner.cluster.model.provider import Provider, ReadOnly
from provisioner.cluster.model.slurm import JOB_VARIABLE_PREFIXES, SlurmClient
from provisioner.cluster.model.state import ClusterState
from provisioner.config.types import ClusterSpec

# Daemons carry the cluster directory in this variable (and so do their children), so the
# local backend's `down` can find every process of a cluster, job steps included.
MARKER_VAR = "SIMCLUSTER_STATE_DIR"


def log_name(key: str) -> str:
    """Daemon key -> its log file's name: "slurmd:node1" -> slurmd-node1; every munged -> munged
    (each machine has one; on the local backend all nodes share it)."""
    return "munged" if key.startswith("munged") else key.replace(":", "-")


def load_placement(state: ClusterState, provider: Provider) -> Placement:
    """The cluster's placement: the one stored in its state file at provision time, read
    without any I/O.

    A state without one is asked of the provider: a state the provider discovered rather
    than provisioned (the SSH provider reads a deployed cluster from its controller), or,
    the legacy path, a state file written before placements were stored (STATE_VERSION 1),
    for which the local provider reads the host as every command did then. The result is
    kept in ``state``, so the next save of a state file (up, start, fault) stores it."""
    if state.placement is not None:
        return Placement.from_dict(state.placement)
    placement = provider.placement(state)  # discovered, or legacy (see the docstring)
    state.placement = placement.to_dict()
    return placement


class Cluster:
    def __init__(self, state: ClusterState, provider: Provider):
        self.state = state
        self.provider = provider
        self.spec: ClusterSpec = state.cluster_spec
        self.placement: Placement = load_placement(state, provider)  # from the state file, no I/O
        self._runners: Dict[str, Runner] = {}

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def paths(self):
        return self.placement.paths

    @property
    def node_names(self) -> List[str]:
        return [n.name for n in self.spec.nodes]

    def runner(self, key: str = CONTROLLER) -> Runner:
        """The machine ``key`` names: the provider's, or HOST (this host, on every backend;
        its environment free of any Slurm job's variables, as the local provider's)."""
        if key not in self._runners:
            if key == HOST:
                self._runners[key] = HostRunner({k: v for k, v in os.environ.items()
                                                 if not k.startswith(JOB_VARIABLE_PREFIXES)})
            else:
                self._runners[key] = self.provider.runner(self.state, key)
        return self._runners[key]

    def daemon_runner(self, daemon: str) -> Runner:
        return self.runner(ClusterState.runner_key(daemon))

    @property
    def client(self) -> SlurmClient:
        return SlurmClient(self.runner(CONTROLLER), {"SLURM_CONF": self.paths.slurm_conf},
                           poll_s=self.provider.poll_s)

    def daemon_env(self) -> Dict[str, str]:
        """What every daemon gets in its environment: the cluster's config and the marker."""
        return {"SLURM_CONF": self.paths.slurm_conf, MARKER_VAR: self.state.root}

    @property
    def marker(self) -> str:
        """The environment line every process of this cluster carries."""
        return f"{MARKER_VAR}={self.state.root}"

    def daemons_alive(self, keys: Optional[List[str]] = None) -> Dict[str, bool]:
        """{daemon key: alive}, asking each machine once (a machine that is gone: all dead).
        A recorded pid counts only while it is still our daemon (its environment carries the
        marker): after a reboot or a container restart it may be another process."""
        keys = list(self.state.pids) if keys is None else keys
        by_runner: Dict[str, List[str]] = {}
        for key in keys:
            by_runner.setdefault(ClusterState.runner_key(key), []).append(key)
        alive: Dict[str, bool] = {}
        for rkey, daemons in by_runner.items():
            pids = [self.state.pids[d] for d in daemons if self.state.pids.get(d)]
            seen = self.runner(rkey).pids_alive(pids, self.marker) if pids else {}
            for d in daemons:
                alive[d] = seen.get(self.state.pids.get(d, 0), False)
        return alive

    def liveness(self) -> Dict[str, bool]:
        """{daemon key: alive} of the whole cluster: its recorded pids asked on their machines
        (daemons_alive), or what a read-only cluster answers (ReadOnly.daemons_alive)."""
        if isinstance(self.provider, ReadOnly):
            return self.provider.daemons_alive(self.state, self.placement)
        return self.daemons_alive()

    def signal_daemons(self, keys: List[str], sig: int) -> List[str]:
        """Send ``sig`` to each of ``keys`` that is alive and ours (never to a stale pid that
        now belongs to another process); return the keys signalled."""
        alive = self.daemons_alive(keys)
        by_runner: Dict[str, List[int]] = {}
        for key in keys:
            if alive.get(key):
                by_runner.setdefault(ClusterState.runner_key(key), []).append(self.state.pids[key])
        for rkey, pids in by_runner.items():
            self.runner(rkey).kill(pids, sig)
        return [k for k in keys if alive.get(k)]

    def daemon_log(self, daemon: str) -> str:
        """A daemon's log file where the daemon runs: on the cluster's machines the
        placement's log directory, on this host (HOST) the state directory's log/."""
        if ClusterState.runner_key(daemon) == HOST:
            return str(self.state.layout.log / f"{log_name(daemon)}.log")
        return self.paths.daemon_log(log_name(daemon))

    def log_tail(self, daemon: str, lines: int = 20) -> str:
        """The last lines of a daemon's log file, read where the daemon runs."""
        path = self.daemon_log(daemon)
        text = self.daemon_runner(daemon).read_text(path)
        if text is None:
            return f"--- {path}: not there ---"
        return f"--- tail of {path} ({self.daemon_runner(daemon).where}) ---\n" + "\n".join(text.splitlines()[-lines:])
