"""The validated, fully resolved cluster spec every other module works from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

# Ordered (Slurm key, value) pairs, e.g. (("PriorityTier", "10"), ("PreemptMode", "REQUEUE")):
# hashable and stable in the state file (asdict makes them lists; from_dict makes them pairs).
Options = Tuple[Tuple[str, str], ...]


def _options(raw) -> Options:
    return tuple((str(k), str(v)) for k, v in (raw or ()))

from provisioner.config.versions import DEFAULT_SLURM

API_VERSION = "simcluster/v1"
KIND = "Cluster"
# The backends a spec's ``backend:`` may name: those `up` creates clusters with. Their
# providers are registered under these names (provisioner/providers/__init__.py: PROVIDERS).
BACKENDS: Tuple[str, ...] = ("local", "docker")
# Providers that only read clusters `up` did not make (`simcluster deploy`'s, over SSH):
# registered too, never a spec's backend.
READ_ONLY_BACKENDS: Tuple[str, ...] = ("ssh",)


@dataclass(frozen=True)
class NodeSpec:
    """One virtual node: its Slurm name, the physical GPU ids it owns, its advertised shape."""

    name: str
    gpus: Tuple[int, ...]
    cpus: int
    memory: int  # MB, as Slurm's RealMemory
    port: Optional[int] = None  # slurmd port; None = pick a free one at `up`
    # The GPUs' Slurm type (Gres=gpu:h100:8, gres.conf Type=h100); None: untyped (Gres=gpu:8).
    gpu_type: Optional[str] = None
    # The model name nvidia-smi shows on fake GPUs ("NVIDIA H100 80GB HBM3"); None: the
    # name known for gpu_type (provisioner/config/gpus.py), or a generic one.
    gpu_model: Optional[str] = None
    features: Tuple[str, ...] = ()  # Slurm node features (Features=ib,h100): -C/--constraint
    # Further NodeName options that jobs can see (Sockets, CoresPerSocket, ThreadsPerCore,
    # Boards, SocketsPerBoard, Weight, TmpDisk): validate.NODE_OPTIONS.
    options: Options = ()
    # GPU sharing on fake GPUs (docs/gpus.md#mig-shards-and-mps), per GPU of the node: its MIG
    # layout ((profile, GPU instances), ...; provisioner/config/mig.py), Slurm shards, MPS share.
    mig: Tuple[Tuple[str, int], ...] = ()
    shards: int = 0
    mps: int = 0


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    nodes: Tuple[str, ...]
    default: bool = False
    max_time: str = "INFINITE"
    # Further PartitionName options (DefaultTime, MaxNodes, PriorityTier, PreemptMode, QOS,
    # AllowAccounts, AllowQos, OverSubscribe, DefMemPerGPU ...): validate.PARTITION_OPTIONS.
    options: Options = ()

    def option(self, key: str) -> Optional[str]:
        """The value of a PartitionName option (any case), or None."""
        for k, v in self.options:
            if k.lower() == key.lower():
                return v
        return None


@dataclass(frozen=True)
class AccountSpec:
    """An account in the accounting database (sacctmgr add account), with its users."""

    name: str
    parent: Optional[str] = None  # None: root
    users: Tuple[str, ...] = ()  # besides the cluster's own user, who is in every account
    fairshare: Optional[int] = None
    qos: Tuple[str, ...] = ()  # QoS its associations may use (empty: every QoS of the spec)
    default_qos: Optional[str] = None


@dataclass(frozen=True)
class QosSpec:
    """A QoS (sacctmgr add qos): priority, preemption, and any limits sacctmgr takes."""

    name: str
    priority: Optional[int] = None
    preempt: Tuple[str, ...] = ()  # QoS this one may preempt
    preempt_mode: Optional[str] = None  # cancel, requeue, suspend, off (None: the cluster's)
    grace_time: Optional[int] = None  # seconds
    flags: Tuple[str, ...] = ()
    # Further sacctmgr qos options (MaxWall, MaxTRESPerUser, MaxJobsPerUser, UsageFactor ...)
    limits: Options = ()


@dataclass(frozen=True)
class HealthCheckSpec:
    """slurm.conf's HealthCheckProgram/Interval/NodeState (healthCheck: in the spec;
    docs/faults.md). ``program`` None: the cluster's own GPU health check (health_check.sh);
    a path: that program (a production one kept by --like)."""

    interval: int = 10  # seconds
    node_state: str = "ANY"
    program: Optional[str] = None


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
    accounts: Tuple[AccountSpec, ...] = ()  # accounting only: made with sacctmgr at `up`
    qos: Tuple[QosSpec, ...] = ()  # accounting only
    rest: bool = False  # slurmrestd with JWT auth (docs/rest.md)
    # A Prometheus exporter of the cluster (docs/metrics.md); its port: None = one picked free.
    metrics: bool = False
    metrics_port: Optional[int] = None
    # Local users of this host who use the cluster (docs/users.md): each must exist; with
    # accounting each gets an account of their own.
    users: Tuple[str, ...] = ()
    # slurmd runs a health check every interval (healthCheck: in the spec); None: none.
    health_check: Optional[HealthCheckSpec] = None

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
                     memory=n["memory"], port=n.get("port"), gpu_type=n.get("gpu_type"),
                     gpu_model=n.get("gpu_model"), features=tuple(n.get("features", ())),
                     options=_options(n.get("options")),
                     mig=tuple((str(p), int(c)) for p, c in n.get("mig", ())), shards=n.get("shards", 0),
                     mps=n.get("mps", 0))
            for n in d["nodes"]
        )
        parts = tuple(
            PartitionSpec(name=p["name"], nodes=tuple(p["nodes"]), default=p["default"],
                          max_time=p["max_time"], options=_options(p.get("options")))
            for p in d["partitions"]
        )
        accounts = tuple(
            AccountSpec(name=a["name"], parent=a.get("parent"), users=tuple(a.get("users", ())),
                        fairshare=a.get("fairshare"), qos=tuple(a.get("qos", ())),
                        default_qos=a.get("default_qos"))
            for a in d.get("accounts", ())
        )
        qos = tuple(
            QosSpec(name=q["name"], priority=q.get("priority"), preempt=tuple(q.get("preempt", ())),
                    preempt_mode=q.get("preempt_mode"), grace_time=q.get("grace_time"),
                    flags=tuple(q.get("flags", ())), limits=_options(q.get("limits")))
            for q in d.get("qos", ())
        )
        return cls(name=d["name"], backend=d["backend"], nodes=nodes, partitions=parts,
                   fake_gpus=d["fake_gpus"], controller_port=d.get("controller_port"),
                   slurm_conf_extra=tuple(d.get("slurm_conf_extra", ())),
                   wait=d.get("wait", 60.0), image=d.get("image"), privileged=d.get("privileged", False),
                   accounting=d.get("accounting", False),
                   failure_detection=d.get("failure_detection", "normal"), slurm=d.get("slurm"),
                   accounts=accounts, qos=qos, rest=d.get("rest", False), users=tuple(d.get("users", ())),
                   metrics=d.get("metrics", False), metrics_port=d.get("metrics_port"),
                   health_check=HealthCheckSpec(**d["health_check"]) if d.get("health_check") else None)
