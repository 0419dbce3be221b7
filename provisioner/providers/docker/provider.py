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

With `metrics`, the Prometheus exporter is the one process of the cluster on this host
(cluster/services/metrics): its Slurm calls are execs in the controller container, as
`simcluster exec`'s; `delete` stops it by its command line, state or no state.

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

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

from docker.errors import DockerException, NotFound

from provisioner.cluster.lifecycle.steps import Boot
from provisioner.cluster.model.placement import CONTROLLER, Placement
from provisioner.cluster.model.provider import (BootsDaemons, ExtraLogs, Machines, NodeProcesses, Orphans, Pausable,
                                                Provider, Scalable, Stoppable)
from provisioner.cluster.model.state import ClusterState, port_lock, reserved_ports
from provisioner.cluster.services import fakegpus, metrics
from provisioner.config.types import ClusterSpec
from provisioner.errors import UsageError
from provisioner.paths import ClusterLayout
from provisioner.progress import Progress
from provisioner.providers.docker import engine, image
from provisioner.providers.docker.boot import BOOT_DIR, BOOT_MARKS, boot_script
from provisioner.providers.docker.engine import LABEL_CLUSTER, LABEL_STATE, client, explain
from provisioner.providers.docker.exec_runner import DockerExecRunner, forget
from provisioner.providers.docker.node_containers import (CONFIG_MOUNT, CONTAINER_PATHS, CONTAINERS_DIR,
                                                          CONTROLLER_HOST, CONTROLLER_PORT, DBD_PORT, SHARED_MOUNT,
                                                          SLURMD_PORT, STORAGE_PORT, container_config, container_name,
                                                          foreign_gpus_script, network_name)
from provisioner.providers.docker.node_features import (CONTAINERS_OK, MOUNT_PROBE, UNPRIVILEGED_NOTE,
                                                        cgroups_described, cgroups_note, choose_image,
                                                        containers_note, slurm_flag, uses_cgroups)
from provisioner.providers.local import cgroups_v2
from provisioner.providers.local.ports import allocate_ports, check_ports_free
from provisioner.render import AccountingInputs, RenderInputs


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
        if spec.metrics:
            # The exporter runs on this host (cluster/services/metrics): its port is one of
            # this host's, free and held by no other cluster's state, like the local ones.
            with port_lock():
                if spec.metrics_port:
                    check_ports_free([spec.metrics_port])
                state.metrics_port = spec.metrics_port or allocate_ports(1, reserved_ports(exclude=spec.name))[0]
                state.save()  # inside the lock: the next cluster's `up` sees the port taken
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
        state.provider_data["containers_note"] = containers_note(labels, tag, slurm_flag(spec),
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
            cgroup_plugin=cgroups_v2.plugin_without_cgroups(release) if v2 and not use_cgroups else "autodetect",
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
            install_hint=(f"simcluster image build --train{slurm_flag(spec)}, then "
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
        # The metrics exporter is the one process on this host (cluster/services/metrics):
        # found by its command line, so that one the state lost the pid of goes too.
        survivors = metrics.stop_exporters(state.root)
        # The images its jobs unpacked belong to the containers' root (images.py, the plugin):
        # removed from inside, so a host user who is not root can remove the rest.
        if (state.layout.root / "shared" / CONTAINERS_DIR).exists():
            self.runner(state, CONTROLLER).run(["rm", "-rf", f"{SHARED_MOUNT}/{CONTAINERS_DIR}"], timeout=120)
        self._remove(state.name)
        return survivors  # every other process died with its container

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
        for root in filter(None, roots):
            metrics.stop_exporters(root)
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
