"""What verify's checks run against: a cluster's Slurm client, spec, job files and python.

One target for every provider (local, docker, and deployed clusters over SSH): it is
built from a Cluster (target_of) and never asks which backend that is. The few facts
that differ (where job files go, which python the jobs run, how GPU ids look inside a
node) come from the cluster's Placement and provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from provisioner.cluster.model.command_runner import Runner
from provisioner.cluster.model.jobfiles import JobFiles
from provisioner.cluster.model.provider import NodeProcesses, ReadOnly
from provisioner.cluster.model.slurm import SlurmClient
from provisioner.cluster.services import rest
from provisioner.config.types import ClusterSpec
from provisioner.named_clusters import Injector, load

# Importable by the jobs' python, else the training suite is SKIP (probe run once per module).
_PROBE = ("import importlib.util, json, sys\n"
          "def ok(m):\n"
          "    try:\n"
          "        return importlib.util.find_spec(m) is not None\n"
          "    except (ImportError, ValueError):\n"
          "        return False\n"
          "print(json.dumps({m: ok(m) for m in sys.argv[1:]}))\n")


@dataclass(frozen=True)
class NodeFacts:
    """What the cluster's nodes have of a machine of their own, as its placement says
    (basic.isolation and basic.limits check it; node_facts decides it)."""

    own_network: bool  # a network each (network namespaces, containers, real hosts)
    network: str  # what they have, or why they share this host's network
    cgroups: bool  # cgroups enforce --mem and GPU devices (proctrack/cgroup + task/cgroup)
    limits: str  # how, or why not
    etc_slurm: bool  # the nodes see the cluster's config at /etc/slurm
    etc_slurm_note: str  # what they see there ("" where the placement does not say)
    gpu_device_dir: str = "/dev"  # where the nodes' GPU device files are (gres.conf's File= lines)
    nodes_are_hosts: bool = False  # each node a machine (container, host): others' devices may not exist there
    # cgroups confine GPU devices too (ConstrainDevices; not an ordinary user's nodes: eBPF needs CAP_BPF)
    devices: Optional[bool] = None
    devices_note: str = ""  # why they do not (limits where not said)

    def __post_init__(self) -> None:
        if self.devices is None:
            object.__setattr__(self, "devices", self.cgroups)  # (frozen)

    @classmethod
    def unknown(cls) -> "NodeFacts":
        """For a target built without a placement: nothing is claimed, so nothing is checked."""
        why = "the cluster's placement does not say"
        return cls(False, f"{why} what network its nodes have", False, f"{why} whether cgroups enforce limits",
                   False, f"{why} what the nodes see at /etc/slurm")


def node_facts(placement, fake_gpus: bool = False) -> NodeFacts:
    """The one place that decides what a cluster's nodes have, from its Placement.

    Network: nodes that are hosts (containers, deployed machines: render.nodes_are_hosts)
    have their own; local nodes have their own where the provider gave them a subnet
    (render.node_subnet: a network namespace each), else they share this host's. Limits:
    enforced where the cluster was rendered with cgroups (render.cgroups). /etc/slurm: the
    cluster's config where node_etc_slurm says so, or where it says nothing about
    nodes that are hosts (a deployed cluster: its config is at /etc/slurm by default).
    The placement's notes say what, or why not.
    """
    render = placement.render
    hosts = bool(getattr(render, "nodes_are_hosts", False))
    subnet = getattr(render, "node_subnet", None)
    own_network = hosts or bool(subnet)
    cgroups = bool(getattr(render, "cgroups", False))
    network = placement.node_network or (
        ("every node is a host of its own" if hosts else f"a network namespace each on {subnet}")
        if own_network else "the nodes share this host's network")
    limits = placement.node_cgroups or (
        "enforced: proctrack/cgroup and task/cgroup" if cgroups
        else "this cluster's Slurm does not track jobs with cgroups: --mem and GPU devices are not enforced")
    etc_note = placement.node_etc_slurm or ""
    etc_slurm = etc_note.startswith("the cluster's config") or (not etc_note and hosts)
    if not etc_slurm and not etc_note:
        etc_note = "the cluster's placement does not say what the nodes see at /etc/slurm"
    # As gres.conf names them (render.py's gpu_device_dir): fake GPUs in the cluster's dev directory.
    gpu_dir = render.paths.dev if fake_gpus else "/dev"
    devices = cgroups and bool(getattr(render, "cgroup_devices", True))
    # Cgroups that do not confine devices (an ordinary user's nodes): the limits note says why
    # in its "GPU devices ..." clause.
    devices_note = limits[limits.find("GPU devices"):] if cgroups and not devices and "GPU devices" in limits \
        else limits
    return NodeFacts(own_network, network, cgroups, limits, etc_slurm, etc_note, gpu_dir, hosts, devices,
                     devices_note)


@dataclass
class VerifyTarget:
    """What the checks need to know about the cluster they run on."""

    name: str
    description: str  # "local cluster 'x'", for the header line
    spec: ClusterSpec
    client: SlurmClient
    files: JobFiles
    python_bin: str  # the bin directory with the python/torchrun the jobs run
    gpus_renumbered: bool
    install_hint: str
    logs_hint: str  # where the daemon logs are, for a failed check's hint
    probe_runner: Optional[Runner] = None  # a machine that runs the jobs' python (default: the client's)
    # `verify --suite faults`: kill(node), kill_controller(), stop_accounting(), heal() and
    # ``fast`` (named_clusters.Injector; a deployed cluster's: providers/ssh/faults.SSHFaults);
    # None where simcluster cannot inject faults, and those checks SKIP.
    faults: Optional[object] = None
    # What the nodes have of a machine of their own (network, cgroups, /etc/slurm): node_facts.
    nodes: NodeFacts = field(default_factory=NodeFacts.unknown)
    # rest: true: where this host reaches slurmrestd (cluster/services/rest.py); None: no REST API.
    rest_url: Optional[str] = None
    _modules: Dict[str, bool] = field(default_factory=dict)

    def cluster_path(self, path) -> str:
        return self.files.cluster_path(path)

    def missing_module(self, modules: List[str]) -> Optional[str]:
        """The first of ``modules`` the jobs' python cannot import (None: all there)."""
        unknown = [m for m in modules if m not in self._modules]
        if unknown:
            res = (self.probe_runner or self.client.runner).run([f"{self.python_bin}/python", "-c", _PROBE, *unknown], timeout=120)
            self._modules.update(_parse_probe(res.stdout, unknown))
        return next((m for m in modules if not self._modules.get(m)), None)

    def visible_gpus(self, node: str, count: Optional[int] = None) -> str:
        """CUDA_VISIBLE_DEVICES a job step on ``node`` must see with ``count`` (default all) GPUs:
        physical ids where nodes share a host's GPUs (the TaskProlog's job), 0..n-1 where each
        node is a machine of its own."""
        gpus = self.spec.node(node).gpus
        n = len(gpus) if count is None else min(count, len(gpus))
        return ",".join(str(i) for i in range(n)) if self.gpus_renumbered else ",".join(map(str, gpus[:n]))

    def log_hint(self, daemon: str) -> str:
        return self.logs_hint


def _parse_probe(stdout: str, modules: List[str]) -> Dict[str, bool]:
    try:
        found = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {m: False for m in modules}
    return {m: bool(found.get(m)) for m in modules}


def target_for(name: str) -> VerifyTarget:
    """The verify target for cluster ``name`` of this machine, whichever backend made it."""
    return target_of(load(name))


def target_of(cluster) -> VerifyTarget:
    """The verify target of ``cluster`` (a provisioner.cluster.model.handle.Cluster), whichever
    provider made it: job files, python and GPU numbering from its placement and provider;
    faults where the provider can list a node's processes or has an injector of its own (a
    deployed cluster's, over SSH), else those checks SKIP."""
    pl, provider = cluster.placement, cluster.provider
    nodes = cluster.node_names
    return VerifyTarget(
        name=cluster.name, description=provider.describe(cluster.state, pl), spec=cluster.spec, client=cluster.client,
        files=provider.job_files(cluster.state, pl), python_bin=pl.python_bin, gpus_renumbered=pl.gpus_renumbered,
        install_hint=pl.install_hint, logs_hint=provider.logs_hint(cluster.state, pl),
        faults=Injector(cluster.name) if isinstance(provider, NodeProcesses) else
        provider.fault_injector(cluster) if isinstance(provider, ReadOnly) else None,
        nodes=node_facts(pl, bool(cluster.spec.fake_gpus)),
        # The jobs' python is asked where jobs run: a node (the controller may have none).
        probe_runner=cluster.runner(nodes[0]) if nodes else None,
        # As this machine reaches it (a deployed cluster's: through the SSH connection).
        rest_url=rest.client_url(cluster) if cluster.spec.rest else None)
