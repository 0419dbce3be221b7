"""Slurm's config files of a cluster, from the templates in templates_dir() (Jinja2, StrictUndefined).

One renderer for every backend and `simcluster render`; the Ansible roles render the same
templates from a context of their own (roles/slurm_common/templates/context.json.j2) with
exactly the keys build_context makes. What it holds:

- RenderInputs: what a placement says beyond the spec (host names, ports, addresses, the
  daemons' paths as NodePaths, whether jobs get a TaskProlog); every value is a named
  field, computed by the provider once, at provision time, and kept in the state file;
- build_context / render_all: the template context and the rendered text, {file: text};
- write_files: writes them (password files mode 0600, scripts executable); redact_secrets
  takes the passwords out of a file's text for a bug report;
- TIMEOUTS: Slurm's failure-detection timeouts per spec.failure_detection (also passed to
  the Ansible roles by deploy).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from provisioner.config import nodelines
from provisioner.config.gpus import mig_instances
from provisioner.config.mig import mig_uuid
from provisioner.config.types import ClusterSpec
from provisioner.nodepaths import MUNGE_DEFAULT_SOCKET, NodePaths
from provisioner.paths import templates_dir

if TYPE_CHECKING:
    import jinja2

TEMPLATES = {
    "slurm.conf": "slurm.conf.j2",
    "gres.conf": "gres.conf.j2",
    "cgroup.conf": "cgroup.conf.j2",
    "task_prolog.sh": "task_prolog.sh.j2",
}
TASK_PROLOG = "task_prolog.sh"  # rendered only where the inputs ask for a TaskProlog
# Rendered only where the inputs name a container plugin (cluster/services/containers.py).
# epilog.sh: the cluster's Epilog, which also removes a job's named containers.
PLUGSTACK_TEMPLATES = {"plugstack.conf": "plugstack.conf.j2", "epilog.sh": "epilog.sh.j2"}
# Slurm's own OCI containers (srun --container=BUNDLE, cluster/services/oci.py), rendered with them:
# oci.conf beside slurm.conf, where slurmstepd reads it, and the runtime script it names.
OCI_TEMPLATES = {"oci.conf": "oci.conf.j2", "oci_runtime.sh": "oci_runtime.sh.j2"}

# Rendered only for clusters with the cluster's own health check (healthCheck: without a program).
HEALTH_CHECK_TEMPLATES = {"health_check.sh": "health_check.sh.j2"}
# Where the health check's helper lies in the config directory (fakegpus.health_check_path).
HEALTH_CHECKER = "bin/gpu-health-check"

# Rendered only for clusters with accounting: true.
ACCOUNTING_TEMPLATES = {"slurmdbd.conf": "slurmdbd.conf.j2"}
# Files that hold a password: created mode 0600 (slurmdbd refuses a readable slurmdbd.conf).
SECRET_FILES = {"slurmdbd.conf"}
_SECRET_LINE = re.compile(r"^(\s*StoragePass\s*=).*$", re.IGNORECASE | re.MULTILINE)

# Ports used when nothing is running yet (`simcluster render`): Slurm's defaults.
DEFAULT_CONTROLLER_PORT = 6817
DEFAULT_FIRST_NODE_PORT = 6818


@dataclass(frozen=True)
class AccountingInputs:
    """Where slurmdbd and its database listen; defaults are Slurm's and MySQL's own."""

    dbd_port: int = 6819
    storage_port: int = 3306
    # The database password is made by each `up` and written only into slurmdbd.conf
    # (mode 0600), never into the state file: write_configs passes it in a copy of these.
    storage_pass: str = "change-me"
    dbd_host: str = "localhost"  # slurmdbd.conf DbdHost: slurmdbd checks it names its own host
    dbd_addr: str = "127.0.0.1"  # where slurmctld and the client commands reach slurmdbd
    storage_host: str = "127.0.0.1"
    storage_user: str = "slurm"
    storage_loc: str = "slurm_acct_db"


@dataclass(frozen=True)
class RenderInputs:
    """Facts about where the cluster runs that are not part of the spec."""

    paths: NodePaths  # every path a config names, as the daemons see it
    hostname: str
    slurm_user: str
    controller_port: int
    node_ports: Dict[str, int]
    node_addr: str = "127.0.0.1"
    # Local backend: each node's own loopback address (nodes not named here get node_addr).
    node_addrs: Dict[str, str] = field(default_factory=dict)
    # Jobs resolve node names through libnss_wrapper and paths.hosts_file (None: they need not).
    nss_wrapper_lib: Optional[str] = None
    # Docker backend: every node is its own host, reachable by its name (no per-node TmpFS,
    # no loopback-only MPI).
    nodes_are_hosts: bool = False
    # Local backend in namespaces: each node's UTS namespace has the node's name as its host
    # name (providers/local/names.py), so slurm.conf says so (NodeHostname=<node>; NodeAddr
    # stays the address that reaches it). slurmctld finds where to send an srun's step
    # messages by matching srun's host name among the NodeHostnames: an srun in a job runs
    # on a node, and with this host's name there none matched (it sent to 0.0.0.0). False:
    # the nodes share this host's name (libnss_wrapper), and NodeHostname is that.
    node_hostnames: bool = False
    # Local backend as root: the ports an srun listens on for slurmctld (SrunPortRange), which
    # the controller's network namespace passes on to this host (network.forward_srun); ""
    # leaves Slurm's choice (any free port).
    srun_port_range: str = ""
    controller_addr: Optional[str] = "127.0.0.1"
    # A TaskProlog for every job step (the TaskProlog= line and task_prolog.sh); False: none.
    task_prolog: bool = True
    # accounting: true: slurmdbd's and the database's addresses (None: the defaults above).
    accounting: Optional[AccountingInputs] = None
    # CPUs the nodes' machine really has (None: unknown, e.g. `simcluster render`): nodes
    # that advertise no more than that get CPU binding (task/affinity).
    host_cpus: Optional[int] = None
    # Local backend as root: every node its own cgroups (providers/local/cgroups.py), so
    # Slurm tracks and limits jobs with them (proctrack/cgroup, task/cgroup, cgroup.conf).
    cgroups: bool = False
    # With cgroups: whether Slurm confines GPU devices (ConstrainDevices: eBPF on cgroup v2,
    # which an ordinary user may not attach) and cores (ConstrainCores: the cpuset controller,
    # which a user's systemd may not delegate). Where devices are not confined every node sees
    # all of the host's GPUs, and the TaskProlog maps Slurm's indices to the node's own.
    cgroup_devices: bool = True
    cgroup_cores: bool = True
    # Local backend: the nodes' own network (a namespace each on this subnet, "198.18.4.0/24");
    # None: they share this host's, each on a loopback address.
    node_subnet: Optional[str] = None
    # cgroup v2 without systemd (providers/local/cgroups_v2.py v2_without_systemd): slurmd makes
    # its slurmstepd scope itself (cgroup.conf IgnoreSystemd=yes) instead of asking systemd.
    cgroup_ignore_systemd: bool = False
    # cgroup.conf's CgroupPlugin: slurmd loads one whatever ProctrackType and TaskPlugin say;
    # where the nodes use no cgroups on a cgroup v2 host, one that asks nothing of the
    # host's cgroups (providers/local/cgroups_v2.py slurm_plugin).
    cgroup_plugin: str = "autodetect"
    # The SPANK plugin that gives jobs pyxis's --container-* options, where the nodes can run
    # it (local as root with the plugin built, cluster/services/containers.py; docker: in the image,
    # providers/docker/node_features.py); None: Slurm knows no such options.
    containers_plugin: Optional[str] = None
    # Why a cluster has no container options, one line (`up` and `status` say it, and
    # oci_runtime.sh refuses `srun --container` with it); "" where it has them or where no
    # provider said.
    containers_note: str = ""

    def to_dict(self) -> Dict[str, Any]:
        """For the state file (the accounting password is left out: see AccountingInputs)."""
        data = asdict(self)
        if data["accounting"] is not None:
            data["accounting"].pop("storage_pass")
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "RenderInputs":
        data = dict(data)
        data["paths"] = NodePaths.from_dict(data["paths"])
        if data.get("accounting") is not None:
            data["accounting"] = AccountingInputs(**data["accounting"])
        return cls(**data)


# Slurm's failure-detection timeouts (seconds) per spec.failure_detection; docs/faults.md
# has the measurements and the trade-off. slurmctld pings every SlurmdTimeout/3 s, but a
# ping to a dead slurmd fails only after MessageTimeout+1 s (Slurm keeps retrying the
# refused connection), and the next ping waits for it; the node is DOWN after two failed
# pings. So MessageTimeout, not SlurmdTimeout, sets the pace: with "fast" a killed node
# is DOWN in ~12 s (MessageTimeout=5 took 16 s).
TIMEOUTS = {
    "normal": {"slurmctld": 30, "slurmd": 60, "message": 10, "cred_expire": None},
    # cred_expire (AuthInfo): a requeued job waits cred_expire+1 s before it may start
    # again (Slurm's default 120 s); 10 s is still far more than a job launch takes here.
    "fast": {"slurmctld": 30, "slurmd": 5, "message": 3, "cred_expire": 10},
}


def _default_accounting(inputs: RenderInputs) -> AccountingInputs:
    """Slurm's and MySQL's default ports, moved up past any port a node or slurmctld has."""
    used = {inputs.controller_port, *inputs.node_ports.values()}
    dbd_port = 6819
    while dbd_port in used:
        dbd_port += 1
    return AccountingInputs(dbd_port=dbd_port)


def default_ports(spec: ClusterSpec) -> Dict[str, int]:
    """Deterministic node ports for rendering without a running cluster."""
    return {n.name: n.port or DEFAULT_FIRST_NODE_PORT + i for i, n in enumerate(spec.nodes)}


def _environment() -> "jinja2.Environment":
    # lazy: every command imports this module (the placement's render inputs), only those
    # that render need jinja2 (~25 ms of each start).
    import jinja2
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    # The same filters the Ansible roles get from ansible/filter_plugins/simcluster.py.
    env.filters["simcluster_node_lines"] = nodelines.node_lines
    env.filters["simcluster_host_list"] = nodelines.host_list
    return env


def shape_is_real(spec: ClusterSpec, host_cpus: Optional[int]) -> bool:
    """True if every node advertises no more CPUs than its machine has: binding a task to
    CPU 40 of a node that claims 112 CPUs on a 2-core host fails, so a simulated
    (config_overrides) production shape keeps task/none."""
    return bool(host_cpus) and all(n.cpus <= host_cpus for n in spec.nodes)


def _task_plugin(cgroups: bool, real_shape: bool) -> str:
    """task/cgroup where the nodes have cgroups; task/affinity binds tasks where the shape is real."""
    plugins = (["task/cgroup"] if cgroups else []) + (["task/affinity"] if real_shape else [])
    return ",".join(plugins) or "task/none"


def build_context(spec: ClusterSpec, inputs: RenderInputs) -> Dict:
    """The templates' variables (the Ansible roles' context.json.j2 makes the same keys)."""
    paths = inputs.paths
    real_shape = shape_is_real(spec, inputs.host_cpus)
    nodes: List[Dict] = [
        {
            "name": n.name,
            "hostname": n.name if inputs.nodes_are_hosts or inputs.node_hostnames else inputs.hostname,
            "addr": n.name if inputs.nodes_are_hosts else inputs.node_addrs.get(n.name, inputs.node_addr),
            "port": inputs.node_ports[n.name],
            "cpus": n.cpus,
            "memory": n.memory,
            "gpus": list(n.gpus),
            "gpu_type": n.gpu_type,
            "features": list(n.features),
            "options": [list(o) for o in n.options],
            # Fake-GPU sharing: MIG instances per GPU ({gpu: index on the node, profile, gi}),
            # shards and MPS per GPU (provisioner/config/gpus.py: mig_instances).
            "mig": [{"gpu": g, "profile": i.profile, "gi": i.gi} for g, i in mig_instances(n)],
            "shards": n.shards,
            "mps": n.mps,
        }
        for n in spec.nodes
    ]
    def_mem = max(1, min(n.memory // n.cpus for n in spec.nodes)) if spec.nodes else 1
    ctx = {
        "cluster_name": spec.name,
        "controller": {"hostname": inputs.hostname, "addr": inputs.controller_addr,
                       "port": inputs.controller_port},
        "slurm_user": inputs.slurm_user,
        "slurmd_user": inputs.slurm_user,
        # munge's default socket needs no AuthInfo=socket= (client commands find it too).
        "munge_socket": "" if paths.munge_socket == MUNGE_DEFAULT_SOCKET else paths.munge_socket,
        "paths": {"state_save": paths.state_save, "spool": paths.spool, "run": paths.run, "log": paths.log},
        "proctrack_type": "proctrack/cgroup" if inputs.cgroups else "proctrack/linuxproc",
        "task_plugin": _task_plugin(inputs.cgroups, real_shape),
        # Cores are pinned only where the nodes claim no more CPUs than the host has.
        "constrain_cores": real_shape and inputs.cgroup_cores,
        "constrain_cores_why": "" if inputs.cgroup_cores else
        "No cpuset controller is delegated to the nodes (an ordinary user's): their cores are not pinned by cgroups.",
        "constrain_devices": inputs.cgroup_devices,
        "cgroup_ignore_systemd": inputs.cgroup_ignore_systemd,
        "srun_port_range": inputs.srun_port_range,
        "cgroup_plugin": inputs.cgroup_plugin,
        # Several nodes on one host (not containers): per-node TmpFS; Open MPI's TCP over the
        # nodes' own network, or over loopback where they share the host's.
        "tmp_fs": "" if inputs.nodes_are_hosts else f"{paths.root}/tmp/%n",
        "mpi_tcp_if": "" if inputs.nodes_are_hosts else (inputs.node_subnet or "lo"),
        # The TaskProlog maps node-local GPU indices to physical ids only where every node
        # sees all of the host's GPUs: with device cgroups a job sees only its own, as
        # Slurm numbers them (0..n-1), as in production.
        "gpu_map": not (inputs.cgroups and inputs.cgroup_devices),
        "task_prolog": paths.task_prolog if inputs.task_prolog else "",
        "def_mem_per_cpu": def_mem,
        "config_overrides": True,
        "nodes": nodes,
        "partitions": [{"name": p.name, "nodes": list(p.nodes), "default": p.default,
                        "max_time": p.max_time, "options": [list(o) for o in p.options]}
                       for p in spec.partitions],
        "extra_lines": list(spec.slurm_conf_extra),
        "gpu_device_dir": paths.dev if spec.fake_gpus else "/dev",
        # MIG nodes: the UUIDs of their MIG devices in Slurm's order, which the TaskProlog
        # gives jobs in CUDA_VISIBLE_DEVICES as NVML-detecting Slurm does.
        # Some node has shards or MPS (GresTypes lists them): gres.conf's MIG lines then take
        # File=, not MultipleFiles= (configs/templates/gres.conf.j2 says why).
        "shared_gpus": any(n.shards or n.mps for n in spec.nodes),
        "mig_uuids": {n.name: [mig_uuid(spec.name, n.name, g, i.gi) for g, i in mig_instances(n)]
                      for n in spec.nodes if n.mig and n.gpus},
        "hosts_file": paths.hosts_file if inputs.nss_wrapper_lib else "",
        "nss_wrapper_lib": inputs.nss_wrapper_lib or "",
        "state_dir": paths.root,
        "accounting": asdict(inputs.accounting or _default_accounting(inputs)) if spec.accounting else None,
        "timeouts": dict(TIMEOUTS[spec.failure_detection]),
    }
    # rest: true only (the Ansible context adds it where it deploys REST): JWT as a second
    # auth type, for slurmrestd's clients; the templates test `rest is defined`.
    if spec.rest:
        ctx["rest"] = {"jwt_key": paths.jwt_key}
    # healthCheck: only (the Ansible context never has it): slurm.conf's HealthCheck lines;
    # the templates test `health_check is defined`.
    if spec.health_check:
        hc = spec.health_check
        ctx["health_check"] = {"program": hc.program or f"{paths.etc}/health_check.sh", "interval": hc.interval,
                               "node_state": hc.node_state, "ours": hc.program is None,
                               "checker": f"{paths.etc}/{HEALTH_CHECKER}", "config_dir": paths.etc,
                               "slurm_conf": paths.slurm_conf}
    # Only where a plugin is named, so the Ansible roles' context (context.json.j2), which
    # never loads one, keeps exactly these keys; the templates test `containers is defined`.
    if inputs.containers_plugin:
        ctx["containers"] = {"plugin": inputs.containers_plugin, "plugstack": f"{paths.etc}/plugstack.conf",
                             "state_dir": f"{paths.root}/containers", "epilog": f"{paths.etc}/epilog.sh"}
    # oci.conf wherever a provider judged container support, also where it found none: Slurm
    # silently runs `srun --container` outside any container when there is no oci.conf, so
    # there the runtime script refuses the step with the provider's one line instead.
    if inputs.containers_plugin or inputs.containers_note:
        ctx["oci"] = {"runtime": f"{paths.etc}/oci_runtime.sh", "state_dir": f"{paths.run}/crun",
                      "slurm_conf": paths.slurm_conf,
                      "unavailable": "" if inputs.containers_plugin else inputs.containers_note}
    return ctx


def render_all(spec: ClusterSpec, inputs: RenderInputs) -> Dict[str, str]:
    """Return {file name: text} for every config file of the cluster (task_prolog.sh only
    where the inputs ask for a TaskProlog, slurmdbd.conf only with accounting, plugstack.conf
    only with a container plugin, oci.conf and oci_runtime.sh where a provider judged
    container support, with or without it, health_check.sh with the cluster's own health check)."""
    env = _environment()
    ctx = build_context(spec, inputs)
    templates = {**TEMPLATES, **(ACCOUNTING_TEMPLATES if spec.accounting else {}),
                 **(PLUGSTACK_TEMPLATES if inputs.containers_plugin else {}),
                 **(OCI_TEMPLATES if "oci" in ctx else {}),
                 **(HEALTH_CHECK_TEMPLATES if spec.health_check and spec.health_check.program is None else {})}
    if not inputs.task_prolog:
        templates.pop(TASK_PROLOG)
    return {out: env.get_template(tpl).render(**ctx) for out, tpl in templates.items()}


def gres_per_node(spec: ClusterSpec, inputs: RenderInputs) -> Dict[str, str]:
    """{node: gres.conf with that node's lines only} for every node (none for a node without
    GPUs): the template rendered for one node at a time (the local backend shows each node
    its own)."""
    env = _environment()
    ctx = build_context(spec, inputs)
    template = env.get_template(TEMPLATES["gres.conf"])
    return {node["name"]: template.render(**dict(ctx, nodes=[node])) for node in ctx["nodes"]}


def redact_secrets(text: str) -> str:
    """A config file's text with its passwords replaced, fit for a bug report."""
    return _SECRET_LINE.sub(r"\1<redacted>", text)


def write_files(files: Dict[str, str], out_dir: Path) -> List[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = out_dir / name
        if "/" in name:  # a file of a subdirectory (names.NODE_GRES_DIR, ...)
            path.parent.mkdir(parents=True, exist_ok=True)
        if name in SECRET_FILES:  # never readable by others, not even for a moment
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
        else:
            path.write_text(text)
        if name.endswith(".sh"):
            path.chmod(0o755)
        written.append(path)
    return written
