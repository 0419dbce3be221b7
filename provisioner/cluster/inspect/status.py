"""One status model for every backend: the same keys in the table and in --json.

Liveness is probed, never assumed: each daemon's pid is asked on its own machine (munged
included), slurmctld is asked with sinfo, accounting with sacctmgr. A read-only provider
(capabilities.ReadOnly: a deployed cluster over SSH) has no pids to ask: its
daemons_alive says what Slurm and munge answer, and status gives no repair hints
(simcluster did not start those daemons; `simcluster deploy` does).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from provisioner.cluster.faults.registry import node_problems
from provisioner.cluster.lifecycle.repair import hung_nodes
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.placement import CONTROLLER
from provisioner.cluster.model.provider import ReadOnly, machines_running
from provisioner.cluster.services import accounting
from provisioner.cluster.services import metrics
from provisioner.cluster.services import rest


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
    # Why the node is not well and what to do (a slurmd alive but not answering, a fault).
    problem: str = ""


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
    # Faults injected with `simcluster fault` and still in effect: {what, node, since, ...}.
    faults: List[Dict] = field(default_factory=list)
    hints: List[str] = field(default_factory=list)
    # The exact Slurm version of the cluster's own commands ("24.11.5"), asked where they run.
    slurm_version: str = ""
    # What the nodes see at /etc/slurm (Slurm's default config, for commands without
    # SLURM_CONF): the cluster's config, or why not; "" where not known.
    node_etc_slurm: str = ""
    # What the nodes have of a host's network and limits (Placement.node_network and
    # node_cgroups): their own network namespaces or the host's shared network, and the
    # cgroup limits enforced or why none; "" where not known.
    node_network: str = ""
    node_cgroups: str = ""
    # The nodes' boot time (Placement.node_boot_time); "" where not known.
    node_boot_time: str = ""
    # pyxis's container options (docs/containers.md): what to run, or why the cluster has none.
    containers: str = ""
    # Slurm's REST API (rest: true): slurmrestd alive, its URL, the API versions it serves.
    rest: Dict = field(default_factory=dict)
    # The Prometheus exporter (metrics: true): alive, its URL.
    metrics: Dict = field(default_factory=dict)
    # A deployed cluster on systemd hosts: {host: {unit: state}} as systemd reports them
    # (`systemctl is-active`); {} elsewhere.
    services: Dict[str, Dict[str, str]] = field(default_factory=dict)

    def to_dict(self) -> Dict:
        return asdict(self)


def cluster_status(cluster: Cluster) -> ClusterStatus:
    """Ask every daemon of ``cluster`` whether it lives, and slurmctld what the nodes do."""
    st, spec, pl = cluster.state, cluster.spec, cluster.placement
    machines = machines_running(cluster.provider, st)
    alive = cluster.liveness()
    managed = not isinstance(cluster.provider, ReadOnly)  # simcluster runs the daemons: it says how to fix them
    client = cluster.client
    states = client.node_states() if alive.get("slurmctld") else None
    nodes = []
    for n in spec.nodes:
        ns = (states or {}).get(n.name)
        nodes.append(NodeStatus(
            name=n.name, host=cluster.runner(n.name).where, state=ns.state if ns else "unknown",
            reason=ns.reason if ns else "", ready=bool(ns and ns.ready), gpus=list(n.gpus), cpus=n.cpus,
            memory_mb=n.memory, port=st.node_ports.get(n.name), slurmd_alive=alive.get(f"slurmd:{n.name}", False)))
    faulted = node_problems(st.faults)  # what a fault in effect makes of a node (a pause)
    hints: List[str] = []
    hung = set(hung_nodes(cluster, alive, states)) if states is not None else set()
    for ns in nodes if managed else ():
        if ns.name in faulted:
            ns.problem = faulted[ns.name]
        elif ns.name in hung:
            ns.problem = "slurmd alive but not answering slurmctld"
        elif not ns.slurmd_alive and st.phase == "running":
            ns.problem = "slurmd is dead"
    if hung:
        hints.append(f"slurmd of {', '.join(sorted(hung))} runs but does not answer: 'simcluster up --name "
                     f"{st.name}' (or 'simcluster fault heal') restarts it; its log: "
                     f"{pl.paths.daemon_log('slurmd-' + sorted(hung)[0])}")
    if st.phase == "running" and not all(alive.values()):
        hints.append(f"dead daemons ({', '.join(k for k, ok in alive.items() if not ok)[:200]}): "
                     f"'simcluster up --name {st.name}' restarts them in place, keeping jobs and state")
    if st.faults:
        hints.append(f"faults in effect: 'simcluster fault heal --name {st.name}' undoes them")
    munged_keys = [k for k in alive if k.startswith("munged")]
    acct = accounting.health(cluster, alive)
    api = rest.health(cluster, alive)
    exporter = metrics.health(cluster, alive)
    running = st.phase == "running" and all(machines.values())
    healthy = running and all(alive.values()) and bool(nodes) and all(x.ready for x in nodes) and acct["healthy"] \
        and api["healthy"] \
        and exporter["healthy"]
    phase = st.phase if any(alive.values()) or st.phase != "running" else "stopped"
    healthy = healthy and not hung
    return ClusterStatus(
        name=st.name, backend=st.backend, phase=phase, healthy=healthy, fake_gpus=spec.fake_gpus,
        state_dir=st.root, slurm_conf=pl.paths.slurm_conf,
        shared_dir=str(pl.job_root) if pl.job_root_in_cluster != str(pl.job_root) else None,
        controller=DaemonStatus(alive=alive.get("slurmctld", False), host=cluster.runner(CONTROLLER).where,
                                port=st.controller_port, responding=states is not None),
        munged=DaemonStatus(alive=bool(munged_keys) and all(alive[k] for k in munged_keys),
                            host=", ".join(cluster.runner(k.partition(":")[2] or CONTROLLER).where
                                           for k in munged_keys) or "?"),
        services=cluster.provider.host_services(st, pl, [n.name for n in nodes if n.slurmd_alive])
        if not managed and states is not None else {},
        accounting=acct, rest=api, metrics=exporter, nodes=nodes, faults=[dict(f) for f in st.faults], node_etc_slurm=pl.node_etc_slurm,
        node_network=pl.node_network, node_cgroups=pl.node_cgroups,
        node_boot_time=pl.node_boot_time, containers=containers_line(pl.render),
        slurm_version=_slurm_version(client) if any(machines.values()) or (not managed and states is not None) else "",
        hints=[] if not managed else hints if phase != "stopped" else
        [f"stopped: 'simcluster start --name {st.name}' brings it back"])


def containers_line(render) -> str:
    """Whether jobs of the cluster get the container options, in one line: how to use them,
    or why not (the provider's note; a cluster whose provider said nothing has none)."""
    if render.containers_plugin:
        return "yes: srun --container-image=FILE.sqsh|dockerd://IMAGE ... (docs/containers.md)"
    return render.containers_note or "no: the cluster was made without the container plugin (docs/containers.md)"


def _slurm_version(client) -> str:
    """'24.11.5' from `sinfo --version` ("slurm-wlm 24.11.5") run where the cluster's commands are."""
    text = client.version()
    return text.split()[-1] if text and not text.startswith("(unknown") else ""
