"""The validated, fully resolved cluster spec every other module works from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

from provisioner.config.versions import DEFAULT_SLURM

API_VERSION = "simcluster/v1"
KIND = "Cluster"


@dataclass(frozen=True)
class NodeSpec:
    """One virtual node: its Slurm name, the physical GPU ids it owns, its advertised shape."""

    name: str
    gpus: Tuple[int, ...]
    cpus: int
    memory: int  # MB, as Slurm's RealMemory
    port: Optional[int] = None  # slurmd port; None = pick a free one at `up`


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    nodes: Tuple[str, ...]
    default: bool = False
    max_time: str = "INFINITE"


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    backend: str
    nodes: Tuple[NodeSpec, ...]
    partitions: Tuple[PartitionSpec, ...]
    fake_gpus: bool = False
    controller_port: Optional[int] = None
    slurm_conf_extra: Tuple[str, ...] = field(default_factory=tuple)
    wait: float = 60.0
    image: Optional[str] = None  # docker backend: node image (default: the built one)
    privileged: bool = False  # docker backend: run containers --privileged
    accounting: bool = False  # slurmdbd + a private MariaDB: sacct, sacctmgr, fair-share
    failure_detection: str = "normal"  # "fast": a dead node is DOWN in ~12 s (docs/faults.md)
    # Slurm release ("22.05", "24.11", "26.05"; provisioner/config/versions.py). None: the
    # backend's own (local: this host's Slurm; docker: DEFAULT_SLURM).
    slurm: Optional[str] = None

    @property
    def slurm_release(self) -> Optional[str]:
        """The release this cluster runs when the backend decides it (docker); None for local's host Slurm."""
        return self.slurm or (DEFAULT_SLURM if self.backend == "docker" else None)

    @property
    def all_gpus(self) -> List[int]:
        return [g for n in self.nodes for g in n.gpus]

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_dict(self) -> Dict:
        """Plain data, stable across runs: stored in the state file, compared by `up`."""
        return asdict(self)

    def identity(self) -> Dict:
        """What makes two specs 'the same cluster' for an idempotent `up` (not --wait)."""
        d = self.to_dict()
        d.pop("wait", None)
        d["slurm"] = self.slurm_release  # docker: no version given = the default one, given or not
        return d

    @classmethod
    def from_dict(cls, d: Dict) -> "ClusterSpec":
        nodes = tuple(
            NodeSpec(name=n["name"], gpus=tuple(n["gpus"]), cpus=n["cpus"],
                     memory=n["memory"], port=n.get("port"))
            for n in d["nodes"]
        )
        parts = tuple(
            PartitionSpec(name=p["name"], nodes=tuple(p["nodes"]), default=p["default"],
                          max_time=p["max_time"])
            for p in d["partitions"]
        )
        return cls(name=d["name"], backend=d["backend"], nodes=nodes, partitions=parts,
                   fake_gpus=d["fake_gpus"], controller_port=d.get("controller_port"),
                   slurm_conf_extra=tuple(d.get("slurm_conf_extra", ())),
                   wait=d.get("wait", 60.0), image=d.get("image"), privileged=d.get("privileged", False),
                   accounting=d.get("accounting", False),
                   failure_detection=d.get("failure_detection", "normal"), slurm=d.get("slurm"))
