"""Docker provider: a controller container and one container per node on a private network.

Provisioning makes the containers without starting them (with an image that can boot);
the shared steps write the configs, then start them (BootsDaemons: boot_machines), and
each container's entrypoint starts munged and slurmctld or slurmd from the steps' own plan
at its first start, while the others still start; the steps adopt those daemons and start
the rest (the accounting database, a restarted container's daemons) through
DockerExecRunner, as on every backend (docs/docker.md: the containers' boot). Container
hostnames are the node names (and "slurmctld" for the controller), so MASTER_ADDR from
`scontrol show hostnames` resolves through Docker's DNS. Configs are mounted read-only at
/etc/simcluster, and at /etc/slurm where Slurm's commands find them without SLURM_CONF, as
on a production node; a shared directory at /shared in every container holds job files.
Nodes with fake GPUs get simcluster's nvidia-smi mounted at /usr/local/bin/nvidia-smi
(cluster/services/fakegpus).

Containers and the network are labelled (io.simcluster.cluster=<name>, role, node,
state-dir), so clusters made by an older simcluster (no state file) are still found and
removed (orphans).

Limits: `--privileged` node containers get a private cgroup namespace, so each node's
slurmd sees its container's cgroup as the root and manages the subtree below it as on a
production node (proctrack/cgroup, task/cgroup, cgroup.conf: --mem, GPU devices, cores):
on a cgroup v1 host in every hierarchy; on a cgroup v2 host through Slurm's cgroup/v2
plugin, with no systemd in the container (cgroup.conf IgnoreSystemd=yes) and the tree
systemd would have made there made by the entrypoint (docker/entrypoint.sh). Unprivileged
containers cannot (their cgroup filesystems are read-only): nothing is enforced, `status`
says why, and on cgroup v2 slurmd loads a cgroup plugin that asks nothing of the tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

from docker.errors import DockerException, NotFound
from docker.types import DeviceRequest, Mount

from provisioner.cluster.lifecycle.steps import Boot
from provisioner.cluster.model.placement import CONTROLLER, Placement
from provisioner.cluster.model.provider import (BootsDaemons, ExtraLogs, Machines, NodeProcesses, Orphans, Pausable,
                                                Provider, Scalable, Stoppable)
from provisioner.cluster.model.state import ClusterState
from provisioner.cluster.services import fakegpus
from provisioner.config.types import ClusterSpec
from provisioner.errors import UsageError
from provisioner.nodepaths import MUNGE_DEFAULT_SOCKET, NodePaths
from provisioner.paths import ClusterLayout
from provisioner.progress import Progress
from provisioner.providers.docker import engine, image
from provisioner.providers.docker.engine import (LABEL_CLUSTER, LABEL_FAKE, LABEL_GPUS, LABEL_NODE, LABEL_ROLE,
                                                 LABEL_SPEC, LABEL_SPEC_JSON, LABEL_STATE, client, explain)
from provisioner.providers.docker.exec_runner import DockerExecRunner, boot_id, forget
from provisioner.providers.local import cgroups
from provisioner.render import AccountingInputs, RenderInputs, shape_is_real

CONTROLLER_HOST = "slurmctld"
CONFIG_MOUNT = "/etc/simcluster"
# The same directory again where Slurm's commands look when SLURM_CONF is not set, as on a
# production node (the image's own /etc/slurm, from the Debian packages, is covered).
ETC_SLURM = "/etc/slurm"
SHARED_MOUNT = "/shared"
# The container plugin's state directory below it (render.py): images unpacked, step layers.
CONTAINERS_DIR = "containers"
# Slurm's and MySQL's default ports: each container has its own network namespace.
CONTROLLER_PORT, SLURMD_PORT, DBD_PORT, STORAGE_PORT = 6817, 6818, 6819, 3306
CONTAINER_PATHS = NodePaths(etc=CONFIG_MOUNT, log="/var/log/slurm", run="/run/slurm", spool="/var/spool/slurmd",
                            state_save="/var/spool/slurmctld", munge_key=f"{CONFIG_MOUNT}/munge.key",
                            munge_socket=MUNGE_DEFAULT_SOCKET,  # munge's default: client commands find it
                            munge_dir="/run/munge", dev="/dev", db_dir="/var/lib/simcluster-db", root=SHARED_MOUNT)


# The boot scripts (boot_script) in the config directory: /etc/simcluster/boot/<machine>.sh.
BOOT_DIR = "boot"
# Where the controller's boot says its slurmctld takes connections, for the nodes' boots
# (each container has its own network; the shared directory is the one they all see).
BOOT_MARKS = ".simcluster-boot"
CONTROLLER_READY = f"{SHARED_MOUNT}/{BOOT_MARKS}/slurmctld-listening"
# How long a boot waits for each thing it needs (60 s in steps of 10 ms).
BOOT_WAIT_STEPS = 6000


def boot_script(key: str, boots: List[Boot], ready: str = CONTROLLER_READY) -> str:
    """The shell script with which container ``key``'s entrypoint starts its daemons (its
    first argument: the boot directory, BOOT_STATE in the container). Each daemon is
    started as DockerExecRunner.start_daemon starts it (setsid, its log appended to, the
    launch's environment added to the container's) once what it needs exists; its pid is
    written to <boot_id>.pid (whole, by rename) once the process is the daemon itself
    (its command line is the daemon's, not the shell's or setsid's), which is what
    start_daemon adopts. A wait that runs out ends the script: the steps then start what is
    left, and report what is wrong. ``ready``: the file the controller's boot makes once
    slurmctld listens (Boot.port), which the nodes' boots wait for (Boot.after_controller)."""
    lines = [
        "#!/bin/sh",
        f"# Written by `simcluster up`: the daemons of machine {key}, as the steps of `up` start them",
        "# (provisioner/cluster/lifecycle/steps.py: boot_plan; docs/docker.md). $1: the boot directory.",
        'd="$1"',
        f'await() {{ n=0; while [ ! -e "$1" ]; do n=$((n+1)); if [ $n -gt {BOOT_WAIT_STEPS} ]; then '
        'echo "gave up waiting for $1" >&2; exit 1; fi; sleep 0.01; done; }',
        # /proc/net/tcp: no connection is made, so the daemon logs nothing (Runner.listening).
        'listening() { awk -v p="$1" \'{ split($2, a, ":"); if (a[2] == p && $4 == "0A") f = 1 } END { exit !f }\' '
        '/proc/net/tcp /proc/net/tcp6 2>/dev/null; }',
        # $1 id, $2 pid, $3 the daemon's program: the pid is written once the process runs it.
        'started() { n=0; while [ -e "/proc/$2" ] && [ $n -le 1000 ]; do '
        'case "$(tr "\\0" " " <"/proc/$2/cmdline" 2>/dev/null)" in "$3 "*) break;; esac; '
        'n=$((n+1)); sleep 0.002; done; '
        'echo "$2" >"$d/$1.tmp" && mv "$d/$1.tmp" "$d/$1.pid"; }',
    ]
    for boot in boots:
        launch = boot.launch
        lines.append(f"# {launch.key}")
        for need in boot.needs:
            lines.append(f"await {shlex.quote(need)}")
        if boot.after_controller:
            lines.append(f"await {shlex.quote(ready)}")
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in launch.env.items())
        lines.append(f"env {env} setsid {' '.join(map(shlex.quote, launch.argv))} >>{shlex.quote(launch.log)} 2>&1 "
                     "</dev/null &")
        lines.append(f"started {boot_id(launch.argv, launch.log, launch.env)} $! {shlex.quote(launch.argv[0])}")
        if boot.port:
            lines.append(f"n=0; until listening {boot.port:04X}; do n=$((n+1)); "
                         f"[ $n -le {BOOT_WAIT_STEPS} ] || exit 1; sleep 0.01; done")
            lines.append(f": >{shlex.quote(ready)}")
    return "\n".join(lines) + "\n"


# Why a cluster's nodes get no cgroup limits (Placement.node_cgroups), by cause.
UNPRIVILEGED_NOTE = ("not enforced: unprivileged containers cannot manage their cgroups "
                     "('up --privileged' enforces --mem, GPU devices and cores)")
UNKNOWN_CGROUPS_NOTE = "not enforced: the docker engine does not say its host's cgroup version"
# The image feature (io.simcluster.features) of an entrypoint that prepares a node's cgroup
# v2 tree for Slurm (docker/entrypoint.sh).
CGROUP2_FEATURE = "cgroup2"


def cgroups_note(privileged: bool, cgroup_version: Optional[str], features: Optional[List[str]] = None,
                 tag: str = "") -> str:
    """"" where the node containers can run Slurm's cgroup plugins (privileged: a private
    cgroup namespace each, writable; cgroup v1, or v2 with an image whose entrypoint
    prepares the tree), else why not. ``cgroup_version`` is what the engine reports ("1",
    "2"; None: not said); ``features``: the image's (None: not asked)."""
    if not privileged:
        return UNPRIVILEGED_NOTE
    if cgroup_version == "2" and features is not None and CGROUP2_FEATURE not in features:
        return (f"not enforced: image {tag} was built before cgroup v2 support (the docker engine's host has "
                "cgroup v2); rebuild it: simcluster image build")
    return "" if cgroup_version in ("1", "2") else UNKNOWN_CGROUPS_NOTE


def uses_cgroups(state: ClusterState) -> bool:
    """Does this cluster enforce cgroup limits (decided at provision time, kept in its state)?"""
    return bool(state.provider_data.get("cgroups"))


def container_name(cluster: str, node: Optional[str] = None) -> str:
    return f"simcluster-{cluster}-{node or 'ctl'}"


def network_name(cluster: str) -> str:
    return f"simcluster-{cluster}"


def spec_digest(spec: ClusterSpec) -> str:
    return hashlib.sha256(json.dumps(spec.identity(), sort_keys=True).encode()).hexdigest()[:16]


def container_config(spec: ClusterSpec, layout: ClusterLayout, image_tag: str, node: Optional[str],
                     cgroups: bool = False, apparmor: bool = False) -> Dict:
    """The SDK's containers.run() arguments for the controller (``node`` None) or a node.
    ``cgroups``: the nodes enforce limits (cgroups_note): each node container gets a cgroup
    namespace of its own, so its slurmd sees the container's cgroup as the root.
    Nodes get CAP_SYS_ADMIN for the container options' mounts (a mount namespace, an overlay
    and binds per step, docs/containers.md); ``apparmor``: the engine confines containers
    with AppArmor, whose docker-default profile denies every mount, so nodes run unconfined."""
    labels = {LABEL_CLUSTER: spec.name, LABEL_ROLE: "node" if node else "controller", LABEL_SPEC: spec_digest(spec),
              LABEL_STATE: str(layout.root), LABEL_FAKE: str(spec.fake_gpus).lower()}
    config: Dict = dict(
        image=image_tag, name=container_name(spec.name, node), hostname=node or CONTROLLER_HOST,
        network=network_name(spec.name), detach=True, init=True,  # docker-init reaps exec'd daemons
        # SIMCLUSTER_MACHINE: the runner key, which names the container's boot script.
        environment={"SLURM_CONF": f"{CONFIG_MOUNT}/slurm.conf", "SIMCLUSTER_MACHINE": node or CONTROLLER},
        volumes={str(layout.etc): {"bind": CONFIG_MOUNT, "mode": "ro"},
                 str(layout.root / "shared"): {"bind": SHARED_MOUNT, "mode": "rw"}},
        mounts=[Mount(ETC_SLURM, str(layout.etc), type="bind", read_only=True)],
        privileged=spec.privileged)
    if node:
        gpus = spec.node(node).gpus
        labels[LABEL_NODE] = node
        labels[LABEL_GPUS] = ",".join(map(str, gpus))
        if cgroups:
            config["cgroupns"] = "private"
        if not spec.privileged:  # --privileged has every capability and no AppArmor profile
            config["cap_add"] = ["SYS_ADMIN"]
            # Slurm's own `srun --container` runs crun, which needs pivot_root and a session
            # keyring: docker's default seccomp profile refuses both even with CAP_SYS_ADMIN
            # (checked on this engine). kind's nodes run --privileged for the same reasons.
            config["security_opt"] = ["seccomp=unconfined"] + (["apparmor=unconfined"] if apparmor else [])
        if gpus and spec.fake_gpus:  # simcluster's nvidia-smi, on every PATH (provisioner/cluster/services/fakegpus)
            config["mounts"].append(Mount(fakegpus.CONTAINER_SHIM, str(fakegpus.shim_path(layout.etc)), type="bind",
                                          read_only=True))
        if gpus and not spec.fake_gpus:  # only this node's GPUs: inside they are 0..n-1
            config["device_requests"] = [DeviceRequest(device_ids=[",".join(map(str, gpus))],
                                                       capabilities=[["gpu"]])]
    else:
        labels[LABEL_SPEC_JSON] = json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"))
    config["labels"] = labels
    return config


def choose_image(spec: ClusterSpec, progress: Progress) -> str:
    """The image to run: --image as it is, else the default one of the spec's Slurm
    release, built when missing and rebuilt when an older simcluster built it from other
    docker/ files."""
    release = spec.slurm_release or image.DEFAULT_SLURM
    tag = spec.image or image.default_image(release)
    labels = image.image_labels(tag)
    ours = tag in (image.image_tag(False, release), image.image_tag(True, release))
    if labels is None and spec.image and not ours:
        raise UsageError(f"image {tag} not found", "build it, or leave out --image to use simcluster's own")
    if labels is not None and spec.image and spec.slurm and image.image_slurm(labels) != spec.slurm:
        raise UsageError(f"image {tag} carries Slurm {image.image_slurm(labels)}, not {spec.slurm}",
                         f"leave out --image, or build one: simcluster image build --slurm {spec.slurm}")
    stale = labels is not None and not spec.image and not image.is_current(labels)
    build_flags = f"{' --train' if tag.endswith('-train') else ''}" + \
                  (f" --slurm {release}" if release != image.DEFAULT_SLURM else "")
    if labels is None or stale:
        progress(f" - image {tag} was built from older build files: rebuilding it" if stale else
                 f" - image {tag} not found: building it (once; later builds are cached)")
        tag = image.build_image(progress, train=tag.endswith("-train"), slurm=release)
        labels = image.image_labels(tag) or {}
    if spec.accounting and "accounting" not in image.image_features(labels):
        raise UsageError(f"image {tag} was built before accounting support (it has no slurmdbd)",
                         f"rebuild it: simcluster image build{build_flags}")
    return tag


# What the container plugin needs of a node container (spank/simcluster_pyxis.c): a mount
# namespace of its own, a tmpfs, and an overlay with its upper directory on it.
MOUNT_PROBE = ('d=$(mktemp -d) && trap \'rm -rf "$d"\' EXIT && unshare --mount sh -c \'mount -t tmpfs none "$1" '
               '&& mkdir "$1/l" "$1/u" "$1/w" "$1/m" && mount -t overlay overlay '
               '-o "lowerdir=$1/l,upperdir=$1/u,workdir=$1/w" "$1/m"\' sh "$d"')
CONTAINERS_OK = "container options: srun --container-image=FILE.sqsh|dockerd://IMAGE ... (docs/containers.md)"


def containers_note(labels: Dict[str, str], tag: str, slurm_flag: str, probe) -> str:
    """"" where the nodes can run container jobs, else the one line that says why not and
    what fixes it. ``probe()`` runs MOUNT_PROBE in a node: (ok, its error output)."""
    what = "container options (--container-image, ...)"
    if "containers" not in image.image_features(labels):
        return f"{what}: image {tag} has no container plugin; rebuild it: simcluster image build{slurm_flag}"
    ok, err = probe()
    if not ok:
        err = (err.strip().splitlines() or ["refused"])[-1]
        return (f"{what}: the node containers cannot mount ({err[:120]}; the engine's seccomp, AppArmor or "
                "SELinux policy refuses CAP_SYS_ADMIN's mounts): up --privileged gives the nodes every privilege")
    return ""


def cgroups_described(spec: ClusterSpec, host_cpus: Optional[int], v2: bool = False) -> str:
    """Placement.node_cgroups of a cluster that enforces limits."""
    cores = ", cores)" if shape_is_real(spec, host_cpus) else \
        "; cores not pinned: the nodes claim more CPUs than the engine's host has)"
    return ("enforced: proctrack/cgroup and task/cgroup" + (" (cgroup v2)" if v2 else "") +
            " in each node container's own cgroup namespace (--mem, GPU devices" + cores)


def foreign_gpus_script(own: List[int]) -> str:
    """Removes the /dev/nvidiaN nodes of GPUs that are not ``own``: a --privileged container
    gets every device of the host, and a node must hold only its own GPUs (Slurm's device
    cgroups deny only the node's GPUs that a job was not given)."""
    keep = "|".join(map(str, own)) or "none"
    return (f'for d in /dev/nvidia[0-9]*; do [ -e "$d" ] || continue; '
            f'case "${{d#/dev/nvidia}}" in {keep}) ;; *) rm -f "$d";; esac; done')


def _slurm_flag(spec: ClusterSpec) -> str:
    release = spec.slurm_release or image.DEFAULT_SLURM
    return "" if release == image.DEFAULT_SLURM else f" --slurm {release}"


class DockerProvider(Provider, Machines, Stoppable, NodeProcesses, Pausable, Orphans, ExtraLogs, Scalable,
                     BootsDaemons):
    name = "docker"
    poll_s = 0.5  # each poll is an exec round trip

    def available(self) -> bool:
        return engine.engine_version() is not None

    def sanity_checks(self, spec: ClusterSpec) -> None:
        engine.require_engine()
        if any(n.name == CONTROLLER_HOST for n in spec.nodes):
            raise UsageError(f"node name '{CONTROLLER_HOST}' is reserved for the controller container")
        if spec.all_gpus and not spec.fake_gpus and not engine.has_nvidia_runtime():
            raise UsageError("real GPUs on the docker backend need the NVIDIA container runtime",
                             "install nvidia-container-toolkit, or add --fake-gpus")

    # -- provisioning ---------------------------------------------------------------------------
    def provision(self, spec: ClusterSpec, state: ClusterState, progress: Progress) -> None:
        tag = choose_image(spec, progress)
        t0 = time.monotonic()
        layout = state.layout
        layout.etc.mkdir(exist_ok=True)
        # Fake GPUs: nvidia-smi and its data, before the node containers that mount it.
        fakegpus.install(spec, layout.etc)
        shared = layout.root / "shared"
        shared.mkdir(exist_ok=True)
        os.chmod(shared, 0o777)  # jobs run as root in containers, the host user reads and writes too
        keys = [CONTROLLER, *(n.name for n in spec.nodes)]
        state.controller_port = CONTROLLER_PORT
        state.node_ports = {n.name: SLURMD_PORT for n in spec.nodes}
        if spec.accounting:
            state.mariadb_port, state.slurmdbd_port = STORAGE_PORT, DBD_PORT
        state.provider_data = {"image": tag, "network": network_name(spec.name),
                               "containers": {k: container_name(spec.name, None if k == CONTROLLER else k)
                                              for k in keys}}
        # cgroup limits where the containers can manage their own cgroups (cgroups_note);
        # decided once, here, and kept in the state: placement() reads no engine.
        facts = engine.host_facts()
        labels = image.image_labels(tag) or {}
        note = cgroups_note(spec.privileged, facts.get("cgroup_version"), image.image_features(labels), tag)
        state.provider_data["cgroups"] = not note
        state.provider_data["cgroups_note"] = note
        state.provider_data["cgroup_version"] = facts.get("cgroup_version")
        if not note and (facts.get("cpus") or "").isdigit():
            state.provider_data["host_cpus"] = int(facts["cpus"])  # every container sees all of them
        state.save()  # before anything exists: a failed or interrupted up is found by `down`
        docker = client()
        try:
            docker.networks.create(network_name(spec.name), labels={LABEL_CLUSTER: spec.name})
        except DockerException as exc:
            raise explain(exc, f"creating network {network_name(spec.name)}") from None

        apparmor = "apparmor" in (facts.get("security") or "").split(",")
        # Images that can boot (the entrypoint starts the daemons `up` plans for it) are only
        # made here; the "machines" step starts them once the configs are written
        # (boot_machines). Older images are started at once, their daemons by the steps.
        boot = "boot" in image.image_features(labels)
        state.provider_data["boot"] = boot

        def create(key: str):
            config = container_config(spec, layout, tag, None if key == CONTROLLER else key, cgroups=not note,
                                      apparmor=apparmor)
            try:
                if boot:
                    config.pop("detach")
                    return docker.containers.create(**config)
                return docker.containers.run(**config)
            except DockerException as exc:
                raise explain(exc, f"{'making' if boot else 'starting'} container {config['name']}") from None

        # All at once: the daemons start later, so no container waits for another.
        with ThreadPoolExecutor(max_workers=min(16, len(keys))) as pool:
            made = list(pool.map(create, keys))
        state.provider_data["containers"] = {k: c.id for k, c in zip(keys, made)}
        if not boot:
            self._drop_foreign_gpus(state, [n.name for n in spec.nodes])

        first = spec.nodes[0].name
        # Asked once per engine, image and privileges (engine.probe_cached): a node's mounts
        # succeed or fail alike in every cluster made so.
        probe_key = "|".join(["mount", facts.get("engine") or "", made[-1].attrs.get("Image") or tag,
                              f"privileged={spec.privileged}", f"apparmor={apparmor}", MOUNT_PROBE])

        def probe():
            if boot:  # not asked before: the first node starts now to answer (it boots nothing)
                self.start_machines(state, [first])
            res = self.runner(state, first).run(["sh", "-c", MOUNT_PROBE], timeout=30)
            return res.ok, res.stderr
        state.provider_data["containers_note"] = containers_note(labels, tag, _slurm_flag(spec),
                                                                 lambda: engine.probe_cached(probe_key, probe))
        state.placement = self.placement(state).to_dict()
        progress(f" - network and {len(keys)} containers from {tag}{' (made, not started)' if boot else ''} ... "
                 f"done ({time.monotonic() - t0:.2f}s)")

    # -- the daemons started by the containers themselves (BootsDaemons) -------------------------
    def boots(self, state: ClusterState) -> bool:
        return bool(state.provider_data.get("boot"))

    def boot_machines(self, state: ClusterState, plan: Dict[str, List[Boot]]) -> None:
        """Write each container's boot script (boot_script) where its entrypoint looks, and
        start the containers: each starts its daemons as its first start. A container that
        is running already (provision's probe started it) boots nothing: the steps start
        its daemons."""
        boot_dir = state.layout.etc / BOOT_DIR
        boot_dir.mkdir(exist_ok=True)
        (state.layout.root / "shared" / BOOT_MARKS).mkdir(exist_ok=True)
        for key, boots in plan.items():
            path = boot_dir / f"{key}.sh"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(boot_script(key, boots))
            os.replace(tmp, path)  # whole or not at all for an entrypoint that looks now
        keys = [CONTROLLER, *(n.name for n in state.cluster_spec.nodes)]
        api = client().api

        def start(key: str) -> None:
            name = container_name(state.name, None if key == CONTROLLER else key)
            try:
                api.start(name)  # made, never started (the engine answers 304 for the probe's node)
            except DockerException as exc:
                raise explain(exc, f"starting container {name}") from None
        with ThreadPoolExecutor(max_workers=min(16, len(keys))) as pool:
            list(pool.map(start, keys))
        self._drop_foreign_gpus(state, keys)

    def add_machines(self, state: ClusterState, spec: ClusterSpec, nodes: List[str], progress: Progress) -> None:
        """A node container for each of ``nodes``, as provision makes them (container_config:
        labels, mounts, capabilities, GPUs), on the cluster's network: Docker's DNS resolves
        its name in every container at once, the running ones too. The image is the one the
        cluster's containers run, by id, even where its tag was rebuilt since `up`."""
        layout, data = state.layout, state.provider_data
        if not spec.fake_gpus and any(spec.node(n).gpus for n in nodes) and not engine.has_nvidia_runtime():
            raise UsageError("real GPUs on the docker backend need the NVIDIA container runtime",
                             "install nvidia-container-toolkit, or add the nodes without GPUs: --gpus none")
        old_spec, old_ports = state.spec, dict(state.node_ports)
        docker = client()
        image_id = self._container(state, CONTROLLER).attrs.get("Image") or data["image"]
        facts = engine.host_facts()
        apparmor = "apparmor" in (facts.get("security") or "").split(",")
        for name in nodes:
            state.node_ports[name] = SLURMD_PORT
        state.spec = spec.to_dict()
        # Fake GPUs: nvidia-smi, mounted into the new containers, exists before them.
        fakegpus.install(spec, layout.etc)
        # A node of that name that `up` made and `scale` removed left its boot script: the new
        # container must not start the old node's daemons (the scale steps start its own).
        for name in nodes:
            (layout.etc / BOOT_DIR / f"{name}.sh").unlink(missing_ok=True)
        made: Dict[str, str] = {}

        def create(node: str) -> None:
            config = container_config(spec, layout, image_id, node, cgroups=uses_cgroups(state), apparmor=apparmor)
            try:
                made[node] = docker.containers.run(**config).id
            except DockerException as exc:
                raise explain(exc, f"starting container {config['name']}") from None
        try:
            with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
                list(pool.map(create, nodes))
        except BaseException:
            # Nothing half-joined: the containers made go, the state is as before.
            self._remove_nodes(state, [n for n in nodes if n in made])
            state.spec, state.node_ports = old_spec, old_ports
            raise
        data.setdefault("containers", {}).update(made)
        self._drop_foreign_gpus(state, nodes)
        state.placement = self.placement(state).to_dict()

    def remove_machines(self, state: ClusterState, spec: ClusterSpec, nodes: List[str]) -> None:
        """Remove the containers of ``nodes`` (drained, their slurmds stopped) and their
        entries in the state: their names leave Docker's DNS with them."""
        self._remove_nodes(state, nodes)
        for name in nodes:
            state.node_ports.pop(name, None)
            state.provider_data.get("containers", {}).pop(name, None)
        state.spec = spec.to_dict()
        state.placement = self.placement(state).to_dict()

    def _remove_nodes(self, state: ClusterState, nodes: List[str]) -> None:
        """Force-remove the node containers of ``nodes`` (any that is gone already is skipped)."""
        def remove(node: str) -> None:
            forget(container_name(state.name, node))
            try:
                client().containers.get(container_name(state.name, node)).remove(force=True, v=True)
            except NotFound:
                pass
            except DockerException as exc:
                raise explain(exc, f"removing the container of {node}") from None
        if nodes:
            with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
                list(pool.map(remove, nodes))

    def placement(self, state: ClusterState) -> Placement:
        """Every path is the containers' own (CONTAINER_PATHS); nothing is read from the host."""
        spec, layout = state.cluster_spec, state.layout
        use_cgroups = uses_cgroups(state)
        # Older states did not record the decision: nothing was enforced then.
        cg_note = state.provider_data.get("cgroups_note")
        if cg_note is None:
            cg_note = UNPRIVILEGED_NOTE if not spec.privileged else "not enforced: made by an older simcluster"
        # With cgroups, the CPUs every container sees: nodes that claim no more get their
        # cores pinned (ConstrainCores, task/affinity).
        host_cpus = state.provider_data.get("host_cpus") if use_cgroups else None
        # cgroup v2 (older states did not record the version: v1, all they enforced on): the
        # nodes have no systemd, so slurmd makes its slurmstepd scope itself; without limits
        # it loads a cgroup plugin that asks nothing of the container's read-only tree
        # (autodetect's cgroup/v2 stops slurmd there).
        v2 = state.provider_data.get("cgroup_version") == "2"
        release = spec.slurm_release or image.DEFAULT_SLURM
        # The container plugin, where provision found the nodes able to run it (older
        # states did not look: none).
        no_containers = state.provider_data.get("containers_note", "container options (--container-image, ...): "
                                                "the cluster was made by an older simcluster (down, up makes it anew)")
        # slurm_user root, no TaskProlog (each container sees only its own GPUs), names
        # resolve through Docker's DNS (no hosts file, no nss_wrapper).
        render = RenderInputs(
            paths=CONTAINER_PATHS, hostname=CONTROLLER_HOST, slurm_user="root",
            controller_port=state.controller_port, node_ports=dict(state.node_ports), nodes_are_hosts=True,
            controller_addr=None, task_prolog=False, cgroups=use_cgroups, host_cpus=host_cpus,
            cgroup_ignore_systemd=use_cgroups and v2,
            cgroup_plugin=cgroups.plugin_without_cgroups(release) if v2 and not use_cgroups else "autodetect",
            accounting=AccountingInputs(dbd_port=state.slurmdbd_port or DBD_PORT,
                                        storage_port=state.mariadb_port or STORAGE_PORT,
                                        dbd_host=CONTROLLER_HOST, dbd_addr=CONTROLLER_HOST) if spec.accounting
            else None,
            containers_plugin=None if no_containers else image.PLUGIN_IN_IMAGE, containers_note=no_containers)
        return Placement(
            render=render, daemon_user="root", munged_on=[CONTROLLER, *(n.name for n in spec.nodes)],
            config_dir=layout.etc, job_root=layout.root / "shared", job_root_in_cluster=SHARED_MOUNT,
            python_bin=f"{image.IMAGE_VENV}/bin", gpus_renumbered=True,
            client_env={"SIMCLUSTER_CLUSTER": state.name, "SIMCLUSTER_BACKEND": "docker"},
            dbd_port=state.slurmdbd_port, storage_port=state.mariadb_port,
            controller_where=f"container {container_name(state.name)}",
            node_etc_slurm=f"the cluster's config (mounted read-only, as {CONFIG_MOUNT} too)",
            node_network=f"a container each on docker network {network_name(state.name)} (own address and ports)",
            node_cgroups=cgroups_described(spec, host_cpus, v2) if use_cgroups else cg_note,
            shortfalls=[] if use_cgroups else [f"limits: {cg_note}"],
            usage=(f"use it: simcluster exec --name {state.name} -- sinfo   (job files: {layout.root / 'shared'} "
                   f"= {SHARED_MOUNT} in every node)\n" + (no_containers or CONTAINERS_OK)),
            install_hint=(f"simcluster image build --train{_slurm_flag(spec)}, then "
                          f"up --image {image.image_tag(True, spec.slurm_release or image.DEFAULT_SLURM)}"))

    def _drop_foreign_gpus(self, state: ClusterState, keys: List[str]) -> None:
        """GPUs in --privileged node containers (which get every GPU of a GPU host): each
        keeps only its own device nodes (foreign_gpus_script); at every start, as a started
        container's /dev is made anew. Fake GPUs are made later, in their node only."""
        spec = state.cluster_spec
        if not spec.privileged or not spec.all_gpus:
            return
        nodes = [k for k in keys if k != CONTROLLER]

        def drop(node: str) -> None:
            self.runner(state, node).run(["sh", "-c", foreign_gpus_script(list(spec.node(node).gpus))], timeout=30)
        if nodes:
            with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
                list(pool.map(drop, nodes))

    def runner(self, state: ClusterState, key: str) -> DockerExecRunner:
        boots = self.boots(state)
        if key == CONTROLLER:  # the users' commands run there: it unpacks their dockerd:// images
            return DockerExecRunner(container_name(state.name), (str(state.layout.root / "shared"), SHARED_MOUNT),
                                    boots=boots)
        return DockerExecRunner(container_name(state.name, key), boots=boots)

    def machines_running(self, state: ClusterState) -> Dict[str, bool]:
        found = {c.name: c.status == "running" for c in engine.containers_of(state.name)}
        keys = [CONTROLLER, *(n.name for n in state.cluster_spec.nodes)]
        return {k: found.get(container_name(state.name, None if k == CONTROLLER else k), False) for k in keys}

    # -- stop, start and faults ------------------------------------------------------------------
    def _container(self, state: ClusterState, key: str):
        try:
            return client().containers.get(container_name(state.name, None if key == CONTROLLER else key))
        except DockerException as exc:
            raise explain(exc, f"finding the container of {key}") from None

    def start_machines(self, state: ClusterState, keys: List[str]) -> None:
        def start(key: str) -> None:
            c = self._container(state, key)
            try:
                if c.status == "paused":
                    c.unpause()
                elif c.status != "running":
                    forget(c.name)  # its processes are numbered anew
                    c.start()
            except DockerException as exc:
                raise explain(exc, f"starting container {c.name}") from None
        if keys:
            with ThreadPoolExecutor(max_workers=min(16, len(keys))) as pool:
                list(pool.map(start, keys))
            self._drop_foreign_gpus(state, keys)

    def stop_machines(self, state: ClusterState) -> None:
        """Stop the containers (their files stay: StateSaveLocation, the database, logs)."""
        def stop(c) -> None:
            try:
                if c.status == "paused":
                    c.unpause()
                forget(c.name)
                c.stop(timeout=5)
            except NotFound:
                pass
            except DockerException as exc:
                raise explain(exc, f"stopping container {c.name}") from None
        found = engine.containers_of(state.name)
        if found:
            with ThreadPoolExecutor(max_workers=min(16, len(found))) as pool:
                list(pool.map(stop, found))

    def node_pids(self, state: ClusterState, node: str) -> List[int]:
        """slurmd, slurmstepd and job processes (SLURM_JOB_ID in their environment) in the node's container."""
        script = ('for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] && continue; '
                  'c=$({ tr "\\0" " " <$d/cmdline; } 2>/dev/null); '
                  'case "$c" in "slurmd "*|slurmstepd*) echo $p; continue;; esac; '
                  '{ tr "\\0" "\\n" <$d/environ; } 2>/dev/null | grep -q "^SLURM_JOB_ID=" && echo $p; done; true')
        res = self.runner(state, node).run(["sh", "-c", script], timeout=20)
        return sorted(int(x) for x in res.stdout.split() if x.isdigit())

    def pause_machine(self, state: ClusterState, node: str) -> bool:
        c = self._container(state, node)
        try:
            c.pause()
        except DockerException as exc:
            raise explain(exc, f"pausing container {c.name}") from None
        return True

    def unpause_machine(self, state: ClusterState, node: str) -> bool:
        c = self._container(state, node)
        try:
            if c.status == "paused":
                c.unpause()
        except DockerException as exc:
            raise explain(exc, f"unpausing container {c.name}") from None
        return True

    # -- removal --------------------------------------------------------------------------------
    def delete(self, state: ClusterState) -> List[int]:
        # The images its jobs unpacked belong to the containers' root (images.py, the plugin):
        # removed from inside, so a host user who is not root can remove the rest.
        if (state.layout.root / "shared" / CONTAINERS_DIR).exists():
            self.runner(state, CONTROLLER).run(["rm", "-rf", f"{SHARED_MOUNT}/{CONTAINERS_DIR}"], timeout=120)
        self._remove(state.name)
        return []  # every process died with its container

    def _remove(self, name: str) -> None:
        """Remove every container and network labelled with cluster ``name`` (in parallel)."""
        def remove(container) -> None:
            forget(container.name)
            try:
                container.remove(force=True, v=True)
            except NotFound:
                pass
            except DockerException as exc:
                raise explain(exc, f"removing container {container.name}") from None
        found = engine.containers_of(name)
        if found:
            with ThreadPoolExecutor(max_workers=min(16, len(found))) as pool:
                list(pool.map(remove, found))
        for net in engine.networks_of(name):
            try:
                net.remove()
            except NotFound:
                pass
            except DockerException as exc:
                raise explain(exc, f"removing network {net.name}") from None

    def discover(self, name: str) -> Optional[ClusterState]:
        return None  # containers without a state file are orphans: removed, not adopted

    def orphans(self) -> List[str]:
        """Clusters whose containers exist without a state file (made by an older simcluster)."""
        if not self.available():
            return []
        names = set()
        for c in engine.containers_of():
            name = c.labels.get(LABEL_CLUSTER)
            if name and not ClusterLayout.for_name(name).state_file.exists():
                names.add(name)
        return sorted(names)

    def delete_orphan(self, name: str) -> None:
        roots = {c.labels.get(LABEL_STATE) for c in engine.containers_of(name)}
        self._remove(name)
        for root in filter(None, roots):  # the old layout's configs and shared directory
                shutil.rmtree(root, ignore_errors=True)

    # -- bug reports ----------------------------------------------------------------------------
    def extra_logs(self, state: ClusterState, out_dir: Path) -> List[Path]:
        """docker-inspect.json and each container's own output (the daemon logs are in the shared bundle)."""
        written: List[Path] = []
        found = engine.containers_of(state.name)
        inspect = out_dir / "docker-inspect.json"
        inspect.write_text(json.dumps([c.attrs for c in found], indent=2, sort_keys=True) + "\n")
        written.append(inspect)
        for c in found:
            path = out_dir / "containers" / f"{c.name}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                path.write_bytes(c.logs(stdout=True, stderr=True))
            except DockerException as exc:
                path.write_text(f"(could not read the container's log: {exc})\n")
            written.append(path)
        return written

    def versions(self) -> Dict[str, str]:
        return {"docker": engine.engine_version() or "(no engine answers)"}
