"""`simcluster status --ssh`: a deployed cluster's ClusterStatus, from what its controller answers.

The same model (provisioner/cluster/status.py) as local and docker clusters, so the table
and --json have the same keys. There are no pids to ask here, so liveness is what Slurm
and munge say: nodes and states from sinfo, shapes from `scontrol show nodes`, GPU ids
from gres.conf, slurmctld from `scontrol ping`, munged from a `munge -n | unmunge` round
trip, slurmd from the node state (a node whose slurmd stopped answering is down or `*`).
"""

from __future__ import annotations

from typing import Dict

from provisioner.cluster.slurm import SlurmClient
from provisioner.cluster.status import ClusterStatus, DaemonStatus, NodeStatus
from provisioner.providers.ssh.cluster import _int, parse_config, probe_gpus_fake, read_cluster_with
from provisioner.providers.ssh.runner import SSHRunner
from provisioner.providers.ssh.session import SSHSession

# Deployed clusters have no accounting (the roles install no slurmdbd); the same keys as
# provisioner/cluster/accounting.py:health() gives for a cluster without it.
ACCOUNTING_DISABLED: Dict = {"enabled": False, "healthy": True, "registered": None, "account": None,
                             "slurmdbd": {"alive": None, "port": None}, "mariadb": {"alive": None, "port": None}}


def slurmd_answers(state: str) -> bool:
    """A node state in which slurmd answers slurmctld ('*' = not responding)."""
    base = state.lower()
    return not base.endswith("*") and not base.startswith(("down", "unknown", "future"))


def ssh_cluster_status(client: SlurmClient, target: str) -> ClusterStatus:
    """The status of the cluster whose controller ``client`` runs on (``target`` names it: user@host)."""
    host = client.runner.where
    config_res = client.run(["scontrol", "show", "config"], timeout=20)
    config = parse_config(config_res.stdout) if config_res.ok else {}
    responding = client.ping(timeout=20)
    munge = client.run(["sh", "-c", "munge -n | unmunge >/dev/null"], timeout=20)
    states = client.node_states(timeout=20) if responding else None
    cluster = read_cluster_with(client, config)
    spec = cluster.spec(fake_gpus=False)
    fake = bool(probe_gpus_fake(cluster, spec)) if responding else cluster.device_files_fake()

    nodes = []
    for info in cluster.nodes:
        name = info.get("NodeName")
        if not name:
            continue
        ns = (states or {}).get(name)
        state = ns.state if ns else info.get("State", "unknown").lower()
        nodes.append(NodeStatus(
            name=name, host=info.get("NodeAddr", name), state=state,
            reason=ns.reason if ns else info.get("Reason", ""), ready=bool(ns and ns.ready),
            gpus=cluster.gres.ids.get(name, []), cpus=_int(info.get("CPUTot")), memory_mb=_int(info.get("RealMemory")),
            port=_int(info.get("Port")) or _int(config.get("SlurmdPort")), slurmd_alive=bool(ns) and slurmd_answers(ns.state)))
    healthy = responding and munge.ok and states is not None and bool(nodes) and all(n.ready for n in nodes)
    return ClusterStatus(
        name=config.get("ClusterName", "?"), backend="ssh", phase="running" if responding else "stopped",
        healthy=healthy, fake_gpus=fake, state_dir=f"{target}: {cluster.config.get('StateSaveLocation', '?')}",
        slurm_conf=cluster.slurm_conf, shared_dir=None, slurm_version=config.get("SLURM_VERSION", ""),
        # slurmctld runs where it answers; when it does not, SSH cannot tell "dead" from "hung".
        controller=DaemonStatus(alive=responding, host=host, port=_int(config.get("SlurmctldPort")),
                                responding=responding),
        munged=DaemonStatus(alive=munge.ok, host=host),
        accounting=dict(ACCOUNTING_DISABLED), nodes=nodes)


def status_over_ssh(session: SSHSession) -> ClusterStatus:
    """`status --ssh`: the status of the cluster whose controller ``session`` is connected to."""
    return ssh_cluster_status(SlurmClient(SSHRunner(session)), str(session.target))
