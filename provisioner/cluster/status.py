"""One status model for every backend: the same keys in the table and in --json.

Liveness is probed, never assumed: each daemon's pid is asked on its own machine (munged
included), slurmctld is asked with sinfo, accounting with sacctmgr. Backends without
pids to ask (a deployed cluster over SSH) fill the same model from what Slurm and munge
answer (provisioner/providers/ssh).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from provisioner.cluster import accounting
from provisioner.cluster.handle import Cluster
from provisioner.cluster.placement import CONTROLLER


@dataclass
class NodeStatus:
    name: str
    host: str  # where the node's slurmd runs: this host, a container, a hostname
    state: str
    reason: str
    ready: bool
    gpus: List[int]
    cpus: Optional[int]
    memory_mb: Optional[int]
    port: Optional[int]
    slurmd_alive: bool


@dataclass
class DaemonStatus:
    alive: bool
    host: str
    port: Optional[int] = None
    responding: Optional[bool] = None  # slurmctld: answers sinfo


@dataclass
class ClusterStatus:
    name: str
    backend: str
    phase: str  # starting, running, stopped
    healthy: bool
    fake_gpus: bool
    state_dir: str
    slurm_conf: str  # as the cluster's machines see it
    shared_dir: Optional[str]  # on this host: job files every node sees (None: no shared dir)
    controller: DaemonStatus
    munged: DaemonStatus
    accounting: Dict
    nodes: List[NodeStatus] = field(default_factory=list)

    def to_dict(self) -> Dict:
        return asdict(self)


def cluster_status(cluster: Cluster) -> ClusterStatus:
    """Ask every daemon of ``cluster`` whether it lives, and slurmctld what the nodes do."""
    st, spec, pl = cluster.state, cluster.spec, cluster.placement
    machines = cluster.provider.machines_running(st)
    alive = cluster.daemons_alive()
    client = cluster.client
    states = client.node_states() if alive.get("slurmctld") else None
    nodes = []
    for n in spec.nodes:
        ns = (states or {}).get(n.name)
        nodes.append(NodeStatus(
            name=n.name, host=cluster.runner(n.name).where, state=ns.state if ns else "unknown",
            reason=ns.reason if ns else "", ready=bool(ns and ns.ready), gpus=list(n.gpus), cpus=n.cpus,
            memory_mb=n.memory, port=st.node_ports.get(n.name), slurmd_alive=alive.get(f"slurmd:{n.name}", False)))
    munged_keys = [k for k in alive if k.startswith("munged")]
    acct = accounting.health(cluster, alive)
    running = st.phase == "running" and all(machines.values())
    healthy = running and all(alive.values()) and all(x.ready for x in nodes) and acct["healthy"]
    phase = st.phase if any(alive.values()) or st.phase != "running" else "stopped"
    return ClusterStatus(
        name=st.name, backend=st.backend, phase=phase, healthy=healthy, fake_gpus=spec.fake_gpus,
        state_dir=st.root, slurm_conf=pl.paths.slurm_conf,
        shared_dir=str(pl.job_root) if pl.job_root_in_cluster != str(pl.job_root) else None,
        controller=DaemonStatus(alive=alive.get("slurmctld", False), host=cluster.runner(CONTROLLER).where,
                                port=st.controller_port, responding=states is not None),
        munged=DaemonStatus(alive=bool(munged_keys) and all(alive[k] for k in munged_keys),
                            host=", ".join(cluster.runner(k.partition(":")[2] or CONTROLLER).where
                                           for k in munged_keys) or "?"),
        accounting=acct, nodes=nodes)
