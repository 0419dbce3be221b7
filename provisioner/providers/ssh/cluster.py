"""What a deployed cluster is, read from its controller: nodes, GPUs, partitions, configs.

A cluster made by `simcluster deploy` keeps no state file here: everything `status --ssh`,
`verify --ssh` and `export-logs --ssh` know comes from what the controller answers
(scontrol, gres.conf); provider.py turns it into the cluster's state and placement.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from provisioner.cluster.model.partitions import covering_partitions
from provisioner.cluster.model.slurm import SlurmClient, parse_oneliner, parse_show_config
from provisioner.config import hostlist
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.errors import SimclusterError

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
# gres.conf lines as configs/templates/gres.conf.j2 writes them.
_GRES_LINE = re.compile(r"^\s*NodeName=(\S+)\s+Name=gpu(?:\s+Type=\S+)?\s+File=(\S*?nvidia(\d+))\s*$")


class ControllerUnavailable(SimclusterError):
    """slurmctld on the controller does not answer (exit 1)."""


@dataclass
class GresGpus:
    """The GPUs gres.conf gives each node: ids, and the device files behind them."""

    ids: Dict[str, List[int]] = field(default_factory=dict)
    files: Dict[str, List[str]] = field(default_factory=dict)


def parse_gres_conf(text: str) -> GresGpus:
    """{node: [gpu ids]} and {node: [device files]} from 'NodeName=n Name=gpu File=/dev/nvidiaN' lines
    (NodeName= a name or a host list)."""
    gpus = GresGpus()
    for line in text.splitlines():
        m = _GRES_LINE.match(line)
        if m:
            # One line may name several nodes alike (node[1-4]: provisioner/config/nodelines.py).
            for node in hostlist.expand(m.group(1)):
                gpus.ids.setdefault(node, []).append(int(m.group(3)))
                gpus.files.setdefault(node, []).append(m.group(2))
    return gpus


parse_config = parse_show_config  # the one parser, in cluster/model/slurm.py


def _int(value: Optional[str]) -> Optional[int]:
    return int(value) if value and value.isdigit() else None


@dataclass
class DeployedCluster:
    """The controller's view of a deployed cluster: enough for status and a verify spec."""

    client: SlurmClient
    config: Dict[str, str]  # scontrol show config
    nodes: List[Dict[str, str]]  # scontrol show nodes --oneliner, in Slurm's order
    partitions: List[Dict[str, str]]  # scontrol show partition --oneliner
    gres: GresGpus

    @property
    def name(self) -> str:
        return self.config.get("ClusterName", "?")

    @property
    def slurm_conf(self) -> str:
        return self.config.get("SLURM_CONF", DEFAULT_SLURM_CONF)

    @property
    def node_names(self) -> List[str]:
        return [n["NodeName"] for n in self.nodes if n.get("NodeName")]

    @property
    def accounting(self) -> bool:
        """Deployed with accounting: true (slurmctld stores jobs through slurmdbd)."""
        return self.config.get("AccountingStorageType") == "accounting_storage/slurmdbd"

    @property
    def rest(self) -> bool:
        """Deployed with rest: true (JWT as a second auth type, slurmrestd on the controller)."""
        return "auth/jwt" in self.config.get("AuthAltTypes", "")

    @property
    def task_prolog(self) -> bool:
        """The roles install the GPU-id TaskProlog where there are no device cgroups."""
        return self.config.get("TaskProlog", "(null)") not in ("", "(null)")

    def hostnames(self, expression: str) -> List[str]:
        """A Slurm hostlist expression ('node[1-2]') expanded by the controller."""
        if not expression or expression == "(null)":
            return []
        res = self.client.run(["scontrol", "show", "hostnames", expression], timeout=15)
        return res.stdout.split() if res.ok else []

    def device_files_fake(self) -> bool:
        """gres File= paths outside /dev are simulated GPUs (mknod'ed in a state directory)."""
        return any(not f.startswith("/dev/") for files in self.gres.files.values() for f in files)

    def spec(self, fake_gpus: bool) -> ClusterSpec:
        """The cluster as a ClusterSpec (what verify's checks read), rebuilt from the controller."""
        nodes = tuple(NodeSpec(name=n["NodeName"], gpus=tuple(self.gres.ids.get(n["NodeName"], [])),
                               cpus=_int(n.get("CPUTot")) or 1, memory=_int(n.get("RealMemory")) or 1,
                               port=_int(n.get("Port")))
                      for n in self.nodes if n.get("NodeName"))
        parts: List[PartitionSpec] = []
        for p in self.partitions:
            if not p.get("PartitionName"):
                continue
            members = tuple(self.hostnames(p.get("Nodes", "")))
            parts.append(PartitionSpec(name=p["PartitionName"], nodes=members, default=p.get("Default") == "YES",
                                       max_time=p.get("MaxTime", "INFINITE") or "INFINITE"))
        return ClusterSpec(name=self.name, backend="ssh", nodes=nodes, partitions=tuple(parts), fake_gpus=fake_gpus,
                           controller_port=_int(self.config.get("SlurmctldPort")), accounting=self.accounting,
                           rest=self.rest)


def read_cluster(client: SlurmClient, where: str) -> DeployedCluster:
    """Ask the controller (through ``client``) what the cluster is; ControllerUnavailable if it cannot say."""
    res = client.run(["scontrol", "show", "config"], timeout=20)
    if not res.ok:
        raise ControllerUnavailable(f"slurmctld on {where} does not answer: {res.error_line()}",
                                    "is the cluster deployed and slurmctld running? ('simcluster deploy' starts it)")
    config = parse_config(res.stdout)
    return read_cluster_with(client, config)


def read_cluster_with(client: SlurmClient, config: Dict[str, str]) -> DeployedCluster:
    """The rest of read_cluster, once `scontrol show config` answered (or not: status goes on)."""
    conf_dir = posixpath.dirname(config.get("SLURM_CONF", DEFAULT_SLURM_CONF))
    gres = client.runner.read_text(posixpath.join(conf_dir, "gres.conf")) or ""
    parts = client.run(["scontrol", "show", "partition", "--oneliner"], timeout=20)
    return DeployedCluster(client=client, config=config, nodes=client.show_nodes(timeout=20),
                           partitions=parse_oneliner(parts.stdout) if parts.ok else [], gres=parse_gres_conf(gres))


def node_groups(spec: ClusterSpec) -> List[Tuple[Optional[str], List[str]]]:
    """(partition, nodes) pairs that together reach every node: one srun each (a job runs in
    one partition). The default partition first; nodes in no partition cannot be reached."""
    return [(p, nodes) for p, nodes in covering_partitions(spec) if p is not None]


def srun_on_nodes(client: SlurmClient, part: Optional[str], nodes: List[str], argv: List[str],
                  stdin: Optional[str] = None, timeout: float = 60.0, label: bool = False):
    """One task on each of ``nodes`` running ``argv`` (stdin, if any, goes to every task)."""
    cmd = ["srun", "--quiet", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}", "--ntasks-per-node=1",
           "--mem=16M", "--time=5", "--job-name=simcluster-ssh-io"]
    if part:
        cmd.append(f"--partition={part}")
    if stdin is not None:
        cmd.append("--input=all")
    if label:
        cmd.append("--label")
    return client.run(cmd + list(argv), stdin=stdin, timeout=timeout)


def probe_gpus_fake(cluster: DeployedCluster, spec: ClusterSpec) -> Optional[bool]:
    """Are the GPU nodes' devices simulated? A real GPU host has the NVIDIA driver loaded
    (/proc/driver/nvidia/version); the roles' fake GPUs (slurm_fake_gpus: mknod /dev/nvidiaN
    c 195 N on a host without one) are device files with no driver behind them. Asked on
    the nodes themselves with one srun; None when they do not answer."""
    if cluster.device_files_fake():
        return True
    with_gpus = [n.name for n in spec.nodes if n.gpus]
    if not with_gpus:
        return False
    answers: Dict[str, str] = {}
    for part, members in node_groups(spec):
        nodes = [n for n in members if n in with_gpus and n not in answers]
        if not nodes:
            continue
        res = srun_on_nodes(cluster.client, part, nodes, [
            "sh", "-c", 'if [ -e /proc/driver/nvidia/version ]; then echo "$SLURMD_NODENAME real"; '
                        'else echo "$SLURMD_NODENAME fake"; fi'], timeout=30)
        answers.update(dict(line.split()[:2] for line in res.stdout.splitlines() if len(line.split()) >= 2))
    if set(with_gpus) - set(answers):
        return None
    return any(v == "fake" for v in answers.values())
