"""Docker backend: a controller container and one container per node on a private network.

Containers are labelled (io.simcluster.cluster=<name>, role, node) and found by label, so
`list`, `status` and `down` need no state file. Container hostnames are the node names, so
MASTER_ADDR from `scontrol show hostnames` resolves through Docker's DNS. Configs come from
the same templates as the local backend, mounted read-only at /etc/simcluster; a shared
directory is mounted at /shared in every container for job files.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from provisioner.actions import mariadb
from provisioner.actions.accounting import accounts_file, parse_registered_port, registered_port_argv
from provisioner.config.types import ClusterSpec
from provisioner.dockercmd import (LABEL_CLUSTER, LABEL_FAKE, LABEL_GPUS, LABEL_NODE, LABEL_ROLE, LABEL_SPEC,
                                   LABEL_SPEC_JSON, LABEL_STATE, DockerError, containers, docker, has_nvidia_runtime,
                                   labelled_spec, require_engine)
from provisioner.errors import ClusterConflict, ClusterNotFound, StartupError, UsageError
from provisioner.image import build_image, default_image, image_features, image_labels, is_current
from provisioner.paths import ClusterLayout
from provisioner.render import AccountingInputs, RenderInputs, render_all, write_files
from provisioner.slurm import SINFO_NODE_ARGS, NodeState, format_node_table, parse_sinfo
from provisioner.wait import WaitTimeout, poll_until

CONTROLLER_HOST = "slurmctld"
SHARED_MOUNT = "/shared"
# Slurm's and MySQL's default ports: each container has its own network namespace.
CONTROLLER_PORT, SLURMD_PORT, DBD_PORT, STORAGE_PORT = 6817, 6818, 6819, 3306
CONTAINER_PATHS = {"state_save": "/var/spool/slurmctld", "spool": "/var/spool/slurmd",
                   "run": "/run/slurm", "log": "/var/log/slurm"}


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def container_name(cluster: str, node: Optional[str] = None) -> str:
    return f"simcluster-{cluster}-{node or 'ctl'}"


def network_name(cluster: str) -> str:
    return f"simcluster-{cluster}"


@dataclass(frozen=True)
class ClusterRecord:
    """A running docker cluster as its containers' labels describe it (no state file)."""

    spec: ClusterSpec
    image: str
    state_dir: Path

    @property
    def shared_dir(self) -> Path:
        """The host directory mounted at SHARED_MOUNT in every container."""
        return self.state_dir / "shared"


def cluster_record(name: str) -> ClusterRecord:
    """Spec, image and state directory of docker cluster ``name``, read from its controller's labels."""
    found = [c for c in containers(name) if c["Config"]["Labels"].get(LABEL_ROLE) == "controller"]
    if not found:
        raise ClusterNotFound(f"no docker cluster named '{name}' (or its controller container is gone)",
                              "see 'simcluster list'")
    ctl = found[0]
    labels = ctl["Config"]["Labels"]
    if not ctl["State"]["Running"]:
        raise ClusterNotFound(f"the controller container of '{name}' is not running",
                              f"see 'docker logs {container_name(name)}'; recreate with 'simcluster down' + 'up'")
    if LABEL_SPEC_JSON not in labels:
        raise UsageError(f"cluster '{name}' was made by an older simcluster (no spec label)",
                         f"recreate it: simcluster down --name {name}, then up again")
    return ClusterRecord(ClusterSpec.from_dict(json.loads(labels[LABEL_SPEC_JSON])), ctl["Config"]["Image"],
                         Path(labels[LABEL_STATE]))


def spec_digest(spec: ClusterSpec) -> str:
    import hashlib
    return hashlib.sha256(json.dumps(spec.identity(), sort_keys=True).encode()).hexdigest()[:16]


class DockerProvider:
    name = "docker"

    def __init__(self, image: Optional[str] = None, privileged: bool = False):
        self.image = image
        self.privileged = privileged

    # -- checks -----------------------------------------------------------------------------
    def sanity_checks(self, spec: ClusterSpec) -> None:
        require_engine()
        if any(n.name == CONTROLLER_HOST for n in spec.nodes):
            raise UsageError(f"node name '{CONTROLLER_HOST}' is reserved for the controller container")
        if spec.all_gpus and not spec.fake_gpus and not has_nvidia_runtime():
            raise UsageError("real GPUs on the docker backend need the NVIDIA container runtime",
                             "install nvidia-container-toolkit, or add --fake-gpus")

    # -- up ---------------------------------------------------------------------------------
    def up(self, spec: ClusterSpec, retain: bool = False, progress: Callable[[str], None] = _progress) -> str:
        self.sanity_checks(spec)
        t0 = time.monotonic()
        existing = containers(spec.name)
        if existing:
            running = all(c["State"]["Running"] for c in existing)
            same = all(c["Config"]["Labels"].get(LABEL_SPEC) == spec_digest(spec) for c in existing)
            if running and same and len(existing) == len(spec.nodes) + 1:
                return f"cluster '{spec.name}' is already running with this spec (nothing to do)"
            if running:
                raise ClusterConflict(f"cluster '{spec.name}' is already running with a different spec",
                                      f"run 'simcluster down --name {spec.name}' first, or pick another --name")
            self._remove(spec.name)
        image = self.image or default_image()
        labels = image_labels(image)
        # The default image built by an older simcluster: its entrypoint may not match these
        # configs, so it is rebuilt (only the changed layers). An --image is used as it is.
        stale = labels is not None and not self.image and not is_current(labels)
        if labels is None or stale:
            progress(f" - image {image} was built from older docker/ files: rebuilding it" if stale else
                     f" - image {image} not found: building it (once; later builds are cached)")
            image = build_image(progress, train=image.endswith("-train"))
            labels = image_labels(image) or {}
        if spec.accounting and "accounting" not in image_features(labels):
            raise UsageError(f"image {image} was built before accounting support (it has no slurmdbd)",
                             f"rebuild it: simcluster image build{' --train' if image.endswith('-train') else ''}")
        layout = ClusterLayout.for_name(spec.name)
        try:
            self._create(spec, layout, image, progress)
        except BaseException:
            if retain:
                progress(f"keeping the failed cluster for inspection (--retain): containers labelled "
                         f"{LABEL_CLUSTER}={spec.name}, files in {layout.root}")
            else:
                self._remove(spec.name)
            raise
        return (f"cluster '{spec.name}' is up (docker, image {image}): {len(spec.nodes)} nodes idle "
                f"in {time.monotonic() - t0:.2f}s\n"
                f"use it: simcluster exec --name {spec.name} -- sinfo   (job files: {layout.root / 'shared'} "
                f"= {SHARED_MOUNT} in every node)")

    def _render(self, spec: ClusterSpec, layout: ClusterLayout) -> None:
        etc = layout.etc
        if layout.root.exists():
            shutil.rmtree(layout.root)
        etc.mkdir(parents=True)
        os.chmod(layout.root, 0o700)
        (layout.root / "shared").mkdir()
        os.chmod(layout.root / "shared", 0o777)
        # accounting: MariaDB and slurmdbd run in the controller container (docker/entrypoint.sh),
        # on Slurm's and MySQL's default ports: each container has its own network namespace.
        accounting = AccountingInputs(dbd_port=DBD_PORT, storage_port=STORAGE_PORT, storage_pass=secrets.token_hex(16),
                                      dbd_host=CONTROLLER_HOST, dbd_addr=CONTROLLER_HOST) if spec.accounting else None
        inputs = RenderInputs(
            layout=ClusterLayout(Path("/nonexistent")), hostname=CONTROLLER_HOST, slurm_user="root",
            controller_port=CONTROLLER_PORT, node_ports={n.name: SLURMD_PORT for n in spec.nodes}, nodes_are_hosts=True,
            controller_addr=None, accounting=accounting,
            extra_context={"munge_socket": "", "paths": CONTAINER_PATHS, "task_prolog": "",
                           "gpu_device_dir": "/dev", "hosts_file": "", "state_dir": SHARED_MOUNT})
        files = render_all(spec, inputs)
        files.pop("task_prolog.sh")  # each container sees only its own GPUs: no mapping needed
        if accounting:  # what the entrypoint's `sacctmgr load` registers, as on the local backend
            files["accounts.cfg"] = accounts_file(spec.name, "root")
        write_files(files, etc)
        key = etc / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(1024))

    def _run_args(self, spec: ClusterSpec, layout: ClusterLayout, image: str, node: Optional[str]) -> List[str]:
        role = "node" if node else "controller"
        labels = {LABEL_CLUSTER: spec.name, LABEL_ROLE: role, LABEL_SPEC: spec_digest(spec),
                  LABEL_STATE: str(layout.root), LABEL_FAKE: str(spec.fake_gpus).lower()}
        args = ["run", "-d", "--name", container_name(spec.name, node), "--hostname", node or CONTROLLER_HOST,
                "--network", network_name(spec.name), "--init", "-e", "SLURM_CONF=/etc/simcluster/slurm.conf",
                "-v", f"{layout.etc}:/etc/simcluster:ro", "-v", f"{layout.root / 'shared'}:{SHARED_MOUNT}"]
        if node:
            gpus = spec.node(node).gpus
            labels[LABEL_NODE] = node
            labels[LABEL_GPUS] = ",".join(map(str, gpus))
            if gpus and spec.fake_gpus:
                args += ["-e", f"SIMCLUSTER_FAKE_GPUS={' '.join(map(str, gpus))}"]
            elif gpus:
                args += ["--gpus", f'"device={",".join(map(str, gpus))}"']
        else:
            labels[LABEL_SPEC_JSON] = json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"))
            if spec.accounting:  # the same MariaDB options as the local backend's
                args += ["-e", f"SIMCLUSTER_MARIADB_OPTS={' '.join(mariadb.SERVER_OPTIONS)}",
                         "-e", f"SIMCLUSTER_MARIADB_BOOTSTRAP_OPTS={' '.join(mariadb.BOOTSTRAP_OPTIONS)}"]
        if self.privileged:
            args.append("--privileged")
        for k, v in labels.items():
            args += ["--label", f"{k}={v}"]
        return args + [image, role]

    def _create(self, spec: ClusterSpec, layout: ClusterLayout, image: str, progress) -> None:
        step = time.monotonic()

        def done(text: str) -> None:
            nonlocal step
            progress(f" - {text} ... done ({time.monotonic() - step:.2f}s)")
            step = time.monotonic()

        self._render(spec, layout)
        docker(["network", "create", "--label", f"{LABEL_CLUSTER}={spec.name}", network_name(spec.name)])
        done(f"configs, munge key and network {network_name(spec.name)}")
        # Nodes first: slurmctld resolves every node name at start-up (docker DNS knows only
        # running containers); each node's slurmd waits until the controller answers.
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda n: docker(self._run_args(spec, layout, image, n.name)), spec.nodes))
        done(f"starting {len(spec.nodes)} node containers")
        docker(self._run_args(spec, layout, image, None))
        ctl = container_name(spec.name)
        done("starting the controller container")
        names = [n.name for n in spec.nodes]

        def ready() -> Tuple[bool, Dict[str, NodeState]]:
            proc = self._exec(ctl, SINFO_NODE_ARGS)
            states = parse_sinfo(proc.stdout) if proc.returncode == 0 else {}
            return all(n in states and states[n].ready for n in names), states

        self._wait(ready, spec, spec.wait, "nodes not ready")
        done(f"waiting for {len(names)} nodes to be idle")
        if spec.accounting:
            # Until slurmctld has registered with slurmdbd, job records queue inside it and
            # sacct shows nothing: `up` is not done before that.
            def registered() -> Tuple[bool, Optional[int]]:
                port = self.registered_port(spec.name)
                return port == CONTROLLER_PORT, port
            self._wait(registered, spec, spec.wait, "slurmctld not registered with slurmdbd (sacctmgr show cluster)")
            done("waiting for slurmctld to register with slurmdbd")

    def _wait(self, check, spec: ClusterSpec, timeout: float, what: str):
        def guarded():
            dead = [c["Name"].lstrip("/") for c in containers(spec.name) if not c["State"]["Running"]]
            if dead:
                raise StartupError(f"container {dead[0]} exited during startup", f"see 'docker logs {dead[0]}'",
                                   details=self._logs_tail(dead[0]))
            return check()
        try:
            return poll_until(guarded, timeout, first_delay=0.05, max_delay=0.5)
        except WaitTimeout as exc:
            seen = exc.last_seen
            if seen is None or isinstance(seen, dict):  # node states
                names = [n.name for n in spec.nodes]
                bad = [n for n in names if n not in (seen or {}) or not seen[n].ready]
                details = format_node_table(seen or {}, bad[:20])
            else:
                details = f"last seen: {seen}"
            details += "\n" + self._logs_tail(container_name(spec.name))
            raise StartupError(f"cluster '{spec.name}' not ready after {exc.waited:.0f}s: {what}",
                               "raise --wait, or see 'simcluster export-logs'", details=details) from None

    def registered_port(self, name: str) -> Optional[int]:
        """slurmctld's port as slurmdbd recorded it (accounting clusters); None if not yet."""
        proc = self._exec(container_name(name), registered_port_argv(name), timeout=15)
        return parse_registered_port(proc.stdout, name) if proc.returncode == 0 else None

    def _logs_tail(self, container: str, lines: int = 20) -> str:
        proc = docker(["logs", "--tail", str(lines), container], check=False)
        return f"--- docker logs {container} ---\n{proc.stdout}{proc.stderr}"

    def _exec(self, container: str, argv: List[str], timeout: float = 30):
        return docker(["exec", container, *argv], check=False, timeout=timeout)

    # -- down / status / list -----------------------------------------------------------------
    def _remove(self, name: str) -> int:
        found = containers(name)
        if found:
            docker(["rm", "-f", "-v", *[c["Id"] for c in found]], timeout=120)
        nets = docker(["network", "ls", "-q", "--filter", f"label={LABEL_CLUSTER}={name}"]).stdout.split()
        if nets:
            docker(["network", "rm", *nets], check=False)
        roots = {c["Config"]["Labels"].get(LABEL_STATE) for c in found} | {str(ClusterLayout.for_name(name).root)}
        for root in filter(None, roots):
            shutil.rmtree(root, ignore_errors=True)
        return len(found)

    def down(self, name: str) -> str:
        require_engine()
        t0 = time.monotonic()
        if not containers(name):
            raise ClusterNotFound(f"no docker cluster named '{name}'", "see 'simcluster list'")
        count = self._remove(name)
        return f"cluster '{name}' removed ({count} containers, network) in {time.monotonic() - t0:.2f}s"

    def status(self, name: str) -> Dict:
        found = containers(name)
        if not found:
            raise ClusterNotFound(f"no docker cluster named '{name}'", "see 'simcluster list'")
        by_role = {c["Config"]["Labels"].get(LABEL_NODE) or "ctl": c for c in found}
        ctl = by_role.get("ctl")
        ctl_running = bool(ctl and ctl["State"]["Running"])
        states: Optional[Dict[str, NodeState]] = None
        if ctl_running:
            proc = self._exec(container_name(name), SINFO_NODE_ARGS)
            states = parse_sinfo(proc.stdout) if proc.returncode == 0 else None
        nodes = []
        for key, c in sorted(by_role.items()):
            if key == "ctl":
                continue
            ns = (states or {}).get(key)
            labels = c["Config"]["Labels"]
            nodes.append({"name": key, "state": ns.state if ns else "unknown", "reason": ns.reason if ns else "",
                          "ready": bool(ns and ns.ready), "container": c["Name"].lstrip("/"),
                          "gpus": [int(g) for g in labels.get(LABEL_GPUS, "").split(",") if g],
                          "slurmd_alive": c["State"]["Running"], "cpus": None, "memory_mb": None, "port": SLURMD_PORT})
        labels = (ctl or found[0])["Config"]["Labels"]
        healthy = ctl_running and states is not None and all(n["ready"] and n["slurmd_alive"] for n in nodes)
        accounting = {"enabled": False}
        if ctl and labelled_spec(ctl).get("accounting"):
            accounting = self._accounting_health(name, ctl_running)
            healthy = healthy and accounting["healthy"]
        return {"name": name, "backend": "docker", "phase": "running" if ctl_running else "stopped",
                "healthy": healthy, "fake_gpus": labels.get(LABEL_FAKE) == "true", "accounting": accounting,
                "state_dir": labels.get(LABEL_STATE), "shared_dir": str(Path(labels.get(LABEL_STATE, "")) / "shared"),
                "controller": {"port": CONTROLLER_PORT, "alive": ctl_running, "responding": states is not None,
                               "container": container_name(name)},
                "munged": {"alive": ctl_running, "socket": "/run/munge/munge.socket.2"},
                "nodes": nodes}

    def _accounting_health(self, name: str, ctl_running: bool) -> Dict:
        """The same fields as the local backend's accounting health, from inside the controller."""
        alive = set()
        if ctl_running:
            proc = self._exec(container_name(name), ["sh", "-c", "for d in slurmdbd mariadbd; do "
                                                     "pgrep -x $d >/dev/null && echo $d; done"])
            alive = set(proc.stdout.split())
        port = self.registered_port(name) if {"slurmdbd", "mariadbd"} <= alive else None
        registered = port == CONTROLLER_PORT
        return {"enabled": True, "healthy": {"slurmdbd", "mariadbd"} <= alive and registered,
                "registered": registered, "account": "simcluster",
                "slurmdbd": {"alive": "slurmdbd" in alive, "port": DBD_PORT},
                "mariadb": {"alive": "mariadbd" in alive, "port": STORAGE_PORT}}

    def list_clusters(self) -> List[Dict]:
        groups: Dict[str, List[dict]] = {}
        for c in containers():
            groups.setdefault(c["Config"]["Labels"][LABEL_CLUSTER], []).append(c)
        result = []
        for name, cs in sorted(groups.items()):
            up = sum(c["State"]["Running"] for c in cs)
            result.append({"name": name, "backend": "docker", "nodes": len(cs) - 1,
                           "status": "running" if up == len(cs) else ("stopped" if up == 0 else "degraded"),
                           "state_dir": cs[0]["Config"]["Labels"].get(LABEL_STATE)})
        return result

    def exec_argv(self, name: str, argv: List[str], interactive: bool = False, workdir: str = SHARED_MOUNT) -> List[str]:
        flags = ["-i"] + (["-t"] if interactive else [])
        return ["docker", "exec", *flags, "-w", workdir, container_name(name), *argv]

    def client_env(self, name: str) -> Dict[str, str]:
        return {"SIMCLUSTER_CLUSTER": name, "SIMCLUSTER_BACKEND": "docker"}

    def collect_logs(self, name: str, out_dir: Path) -> List[Path]:
        from provisioner.logs_docker import export_docker_logs
        return export_docker_logs(self, name, out_dir)
