"""Local provider: the cluster's machines are directories on this host, its runner is this host.

Provisioning picks free ports, checks binaries, libnss_wrapper, GPUs and paths, and makes
the state directory; the shared steps then start munged, slurmctld and `slurmd -N` per
node here. Every node has a loopback address of its own, and node names resolve inside
jobs through the cluster's own hosts file (names.py; no change to the host's /etc/hosts);
a TaskProlog maps Slurm's node-local GPU index to the node's physical GPU ids (every node
shares this host's GPUs) and, where the GPUs are fake, puts simcluster's nvidia-smi first
on jobs' PATH (cluster/services/fakegpus).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from provisioner.cluster.model.command_runner import HostRunner, find_binary
from provisioner.cluster.model.placement import CONTROLLER, NODE_TOKEN, NodePaths, Placement
from provisioner.cluster.model.poll import WaitTimeout, poll_until
from provisioner.cluster.model.provider import Crashable, Machines, NodeProcesses, Provider, Scalable, Stoppable
from provisioner.cluster.model.slurm import JOB_VARIABLE_PREFIXES
from provisioner.cluster.model.state import ClusterState, all_states, port_lock, reserved_ports
from provisioner.cluster.services import accounting
from provisioner.cluster.services import containers
from provisioner.cluster.services import fakegpus
from provisioner.config.types import ClusterSpec
from provisioner.config.versions import controller_resolves_node_names, host_slurm_version, release_of
from provisioner.errors import StartupError, UsageError
from provisioner.paths import ClusterLayout
from provisioner.progress import Progress
from provisioner.providers.local import (cgroupfs, cgroups, cgroups_delegated, cgroups_v2, loopback_addresses, names,
                                         network, network_plan, preflight, userns)
from provisioner.providers.local.placement_choices import ROOTLESS_DEVICES_NOTE, enforced_note, needs_task_prolog
from provisioner.providers.local.ports import allocate_ports
from provisioner.providers.local.processes import cluster_pids, node_pids, terminate
from provisioner.render import AccountingInputs, RenderInputs, gres_per_node, shape_is_real, write_files

OPENMPI_PARAMS_FILE = "openmpi-mca-params.conf"  # in the cluster's etc/


def host_runner() -> HostRunner:
    """This host, with an environment free of any Slurm job's variables (a simcluster run
    inside a job must not leak that job's settings into the cluster's commands)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(JOB_VARIABLE_PREFIXES)}
    return HostRunner(env)


def _make_tmpfs(path: Path) -> None:
    """A node's TmpFS directory (where slurmstepd and PMIx keep per-job files), writable
    by every user's jobs as /tmp is (sticky: each removes only their own)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o1777)


def _network(state: ClusterState) -> Optional[network_plan.Network]:
    data = state.provider_data.get("network")
    return network_plan.Network.from_dict(data) if data else None


def _tag(state: ClusterState) -> str:
    return network_plan.tag_of(str(state.layout.root))


def _node_gres(state: ClusterState) -> bool:
    """Whether the nodes get a gres.conf each (names.node_gres_files): nodes in namespaces
    of their own (as root, or in a user namespace) and GPUs on some node."""
    return state.provider_data.get("resolver") == names.NAMESPACE and \
        any(n.gpus for n in state.cluster_spec.nodes)


def _write_node_files(state: ClusterState, placement: Placement) -> None:
    """Write what ``placement``'s prefix names for each node (where it names a fstab per
    node, _node_gres): its fstab and gres.conf."""
    if not any(names.NODE_FSTAB_DIR in a for a in placement.slurmd_prefix):
        return
    files = names.node_gres_files(placement.extra_files[names.FSTAB_FILE],
                                  gres_per_node(state.cluster_spec, placement.render), str(state.layout.etc))
    write_files(files, state.layout.etc)


class LocalProvider(Provider, Machines, Stoppable, NodeProcesses, Crashable, Scalable):
    name = "local"

    def __init__(self) -> None:
        self._runner = host_runner()
        self._resolver: Optional[Tuple[str, Optional[str]]] = None  # found by sanity_checks

    def sanity_checks(self, spec: ClusterSpec) -> None:
        if spec.slurm:
            have = host_slurm_version()
            if release_of(have or "") != spec.slurm:
                raise UsageError(f"the local backend runs this host's Slurm ({have or 'none installed'}), "
                                 f"not {spec.slurm}",
                                 f"for Slurm {spec.slurm} use containers: simcluster up --backend docker "
                                 f"--slurm {spec.slurm}")
        self._resolver = preflight.run_preflight(spec, ClusterLayout.for_name(spec.name))
        if spec.accounting:
            preflight.require_binaries(accounting.REQUIRED_BINARIES, "accounting needs program(s) that are missing")

    def provision(self, spec: ClusterSpec, state: ClusterState, progress: Progress) -> None:
        # Node names resolve through a private /etc/hosts per slurmd where namespaces are
        # allowed; libnss_wrapper (less faithful, see names.py) where they are not.
        resolver, state.nss_wrapper_lib = self._resolver or preflight.name_resolver()
        state.provider_data["resolver"] = resolver
        # And a PID namespace per node where tini is at hand and the kernel allows it.
        pid_ns = resolver == names.NAMESPACE and preflight.pid_namespaces_work()
        state.provider_data["pid_namespace"] = pid_ns
        state.provider_data["task_prolog"] = needs_task_prolog(spec, pid_ns)
        # A network namespace per node and cgroups per node where this host allows them
        # (root; network.py, cgroups.py); else the nodes share the host's network and
        # nothing is enforced, and status says so.
        in_namespace = resolver == names.NAMESPACE
        # (Rootless, where the host refuses user namespaces: why, and what can be done.)
        net_note = network.unavailable_reason() if in_namespace \
            else names.SHARED_NETWORK_NOTE + names.userns_refusal(os.geteuid())
        scope = None
        if in_namespace and os.geteuid() != 0:
            # An ordinary user: cgroups in the subtree their systemd delegates to them, where it does.
            scope = cgroups_delegated.delegation(host_slurm_version())
            cg_note = scope.reason
        else:
            cg_note = cgroups.unavailable_reason() if in_namespace else names.NO_CGROUPS_NOTE
        state.provider_data["cgroups"] = not cg_note
        if cgroupfs.is_v2() and not cg_note:
            # Each node's slurmd makes its slurmstepd scope in its own cgroup namespace
            # (cgroups_v2.py), never a systemd unit: two clusters' node1 would share that.
            state.provider_data["cgroup_ignore_systemd"] = True
        elif cgroups_v2.v2_without_systemd():
            state.provider_data["cgroup_ignore_systemd"] = True
            if os.geteuid() == 0:
                problem = cgroups_v2.prepare_v2_without_systemd()
                if problem:
                    progress(f"   cgroup v2 without systemd: {problem} (slurmd may refuse to start)")
        with port_lock():
            others = [st for st in all_states() if st.name != spec.name]
            if not net_note:
                net_note = self._make_network(spec, state, others, progress)
            if scope is not None and not cg_note:
                if net_note:  # the scope's chain runs in the cluster's user namespace (userns.py)
                    cg_note = f"rootless without the cluster's user namespace ({net_note}): limits are not enforced"
                    state.provider_data["cgroups"] = False
                    state.provider_data.pop("cgroup_ignore_systemd", None)
                else:
                    state.provider_data["cgroup_scope"] = {"runtime_dir": scope.runtime_dir,
                                                           "controllers": scope.controllers}
            if net_note:
                taken = [loopback_addresses.block_of(st.provider_data.get("node_addrs", {})) for st in others]
                state.provider_data["node_addrs"] = loopback_addresses.node_addresses(spec, loopback_addresses.pick_block(b for b in taken if b))
            state.provider_data["notes"] = {"network": net_note, "cgroups": cg_note}
            needed = [n for n in spec.nodes if n.port is None]
            count = len(needed) + (0 if spec.controller_port else 1) + (2 if spec.accounting else 0) \
                + (1 if spec.rest else 0) + (1 if spec.metrics and not spec.metrics_port else 0)
            free = iter(allocate_ports(count, reserved=reserved_ports(exclude=spec.name))) if count else iter(())
            state.controller_port = spec.controller_port or next(free)
            state.node_ports = {n.name: n.port or next(free) for n in spec.nodes}
            if spec.accounting:
                state.mariadb_port, state.slurmdbd_port = next(free), next(free)
            if spec.rest:
                state.rest_port = next(free)
            if spec.metrics:
                state.metrics_port = spec.metrics_port or next(free)
            layout = state.layout
            for d in (layout.etc, layout.log, layout.run, layout.spool, layout.state_save, layout.dev):
                d.mkdir(exist_ok=True)
            # munged insists that its socket directory is not writable by others and is searchable.
            layout.munge_dir.mkdir(exist_ok=True)
            os.chmod(layout.munge_dir, 0o711)
            # Fake GPUs: nvidia-smi for jobs and its data (the TaskProlog puts it on PATH).
            fakegpus.install(spec, layout.etc)
            for node in spec.nodes:
                (layout.spool / node.name).mkdir(exist_ok=True)
                _make_tmpfs(layout.root / "tmp" / node.name)
            # Placed once, here: every host fact it needs is read now and kept in the state.
            placement = self.placement(state)
            state.placement = placement.to_dict()
            state.save()  # the ports (and the subnet) are taken once the state file records them
            _write_node_files(state, placement)
        self._make_machines(state)

    def _make_network(self, spec: ClusterSpec, state: ClusterState, others: List[ClusterState],
                      progress: Progress) -> str:
        """The cluster's subnet and namespaces (network.py), recorded in the state first so
        that a failed `up` deletes them; "" when made, else why the nodes share the host's
        network instead (the kernel refused the devices: no probe beforehand, this is it)."""
        taken = [st.provider_data["network"]["subnet"] for st in others if st.provider_data.get("network")]
        subnet = network_plan.pick_subnet(len(spec.nodes) + 1, taken, network_plan.host_networks())
        # Rootless: the namespaces are kept in the cluster's directory, in a user namespace of
        # its own (userns.py).
        netns_dir = network_plan.NETNS_DIR if os.geteuid() == 0 else str(state.layout.root / userns.NETNS_SUBDIR)
        net = network_plan.plan(network_plan.tag_of(str(state.layout.root)), subnet, [n.name for n in spec.nodes], netns_dir)
        state.provider_data["network"] = net.to_dict()
        what, t0 = f"making {len(net.addrs)} network namespaces on {net.subnet}", time.monotonic()
        try:
            note = network.create(net)
        except StartupError as exc:
            network.delete(net.tag, net.netns_dir)
            del state.provider_data["network"]
            progress(f" - {what} ... refused, nodes share this host's network ({time.monotonic() - t0:.2f}s)")
            return f"no network namespaces here ({exc.message}): nodes share this host's network"
        progress(f" - {what} ... done ({time.monotonic() - t0:.2f}s)")
        if note:
            progress(f"   {note}")
        state.provider_data["node_addrs"] = {n.name: net.addrs[n.name] for n in spec.nodes}
        return ""

    def _make_machines(self, state: ClusterState) -> None:
        """The network namespaces and cgroups of the nodes that lack them (at provision the
        namespaces exist already; after a reboot, all of them)."""
        net = _network(state)
        if net:
            todo = network.missing(net)
            if todo:
                network.create(net, todo)
        if state.provider_data.get("cgroups") and not state.provider_data.get("cgroup_scope"):
            spec = state.cluster_spec
            cgroups.create(_tag(state), {n.name: list(n.gpus) for n in spec.nodes}, cgroups.host_gpu_minors())

    def placement(self, state: ClusterState) -> Placement:
        """The placement of a provisioned cluster, read from this host: its /etc/hosts (the
        cluster's hosts file keeps the host's own names), Open MPI's parameter file, tini
        and the CPUs this process may use. Called once, by provision (and for a state file
        older than stored placements, by load_placement)."""
        layout, spec = state.layout, state.cluster_spec
        # Clusters made before nodes had addresses of their own: all on 127.0.0.1, nss_wrapper.
        addrs = state.provider_data.get("node_addrs", {})
        in_namespace = state.provider_data.get("resolver") == names.NAMESPACE
        node_addrs = {n.name: addrs.get(n.name, "127.0.0.1") for n in spec.nodes}
        # A cluster made with PID namespaces keeps them; if tini has gone since, its nodes
        # start without one (jobs still run, only process scans cost more).
        init = names.pid_init() if in_namespace and state.provider_data.get("pid_namespace") else None
        net, use_cgroups = _network(state), bool(state.provider_data.get("cgroups"))
        extra_files = {"hosts": names.hosts_file(node_addrs, ipv6_mapped=not in_namespace)}
        # What each node's mount namespace mounts (names.node_fstab): the cluster's hosts file;
        # its config directory as /etc/slurm where the host has that directory to cover
        # (names.ETC_SLURM: the mount is the node's own, the host's directory stays as it is);
        # and Open MPI's parameter file, written with the configs where the host has Debian's
        # Open MPI.
        etc_note = names.etc_slurm_note(in_namespace)
        mounts = [(str(layout.hosts_file), names.HOSTS)] + ([] if etc_note else [(str(layout.etc), names.ETC_SLURM)])
        if net and os.path.exists(names.RESOLV_CONF):
            # Nodes on a network of their own reach no name server (nothing forwards their
            # traffic off this host): lookups must fail at once, not after time-outs.
            extra_files[names.RESOLV_FILE] = names.node_resolv_conf()
            mounts.append((str(layout.etc / names.RESOLV_FILE), names.RESOLV_CONF))
        v2 = use_cgroups and cgroupfs.is_v2()
        # An ordinary user's nodes: a delegated systemd scope each start (cgroups_delegated.scope_argv).
        scope = state.provider_data.get("cgroup_scope") if use_cgroups else None
        # Slurm confines devices with eBPF programs, which only root may attach.
        confined_devices = use_cgroups and not scope
        cores_in_cgroup = not scope or "cpuset" in scope.get("controllers", ())
        if use_cgroups:
            mounts_cg = cgroups_v2.fstab_lines_v2() if v2 else cgroups.fstab_lines()
        ompi_params = names.openmpi_params(net.subnet if net else "lo") if init else None
        if ompi_params:
            extra_files[OPENMPI_PARAMS_FILE] = ompi_params
            mounts.append((str(layout.etc / OPENMPI_PARAMS_FILE), names.OPENMPI_PARAMS))
        # A boot clock of its own for each start of a node, where the kernel has time namespaces.
        boot_note = names.fresh_boottime_note(os.getuid(), init)
        prefix = []
        # Rootless with a network of its own: nodes and controller start in its user namespace.
        enter = userns.enter_argv(net.netns_dir) if net and net.rootless else []
        if in_namespace:
            extra_files[names.FSTAB_FILE] = names.node_fstab(mounts, mounts_cg if use_cgroups else [])
            # Nodes with GPUs: each its own fstab, which shows it its own gres.conf
            # (names.node_gres_files, written by _write_node_files).
            fstab = f"{layout.etc}/{names.NODE_FSTAB_DIR}/{NODE_TOKEN}.fstab" if _node_gres(state) \
                else str(layout.etc / names.FSTAB_FILE)
            prefix = names.namespace_prefix(
                fstab, os.getuid(), os.getgid(), init, str(layout.spool),
                netns=net.netns(NODE_TOKEN) if net else None,
                cgroup_join=((cgroups_v2.join_script_v2 if v2 else cgroups.join_script)(_tag(state))
                             if use_cgroups else None),
                cgroup_procs=((cgroups_v2.procs_files_v2 if v2 else cgroups.procs_files)(_tag(state))
                              if use_cgroups else ()), starter=names.node_starter(),
                cgroup_ns=cgroups_v2.cgroup_ns_path(_tag(state), NODE_TOKEN) if v2 else None,
                fresh_boottime=not boot_note,
                outer_cgroup_procs=cgroups_v2.outer_procs_file_v2(_tag(state)) if v2 else None, enter=enter,
                cgroup_scope=cgroups_delegated.scope_argv(_tag(state), scope["runtime_dir"]) if scope and enter else ())
        ctl_addr = net.addrs[network_plan.CONTROLLER_KEY] if net else "127.0.0.1"
        ctl_prefix = (find_binary("nsenter") or "nsenter", f"--net={net.netns(network_plan.CONTROLLER_KEY)}") \
            if net else ()
        if enter:
            ctl_prefix = tuple(userns.controller_argv(net.netns_dir, net.netns(network_plan.CONTROLLER_KEY),
                                                      os.getuid(), os.getgid()))
        slurm_version = host_slurm_version()
        if in_namespace and controller_resolves_node_names(slurm_version):
            # The controller in a mount namespace of its own with the nodes' mounts (the
            # cluster's hosts file over /etc/hosts, as a controller host's resolver knows its
            # nodes; with a network of their own, the resolv.conf that fails at once, as
            # slurmctld's lookups otherwise wait on a name server it cannot reach).
            extra_files[names.CONTROLLER_FSTAB_FILE] = names.node_fstab(mounts)
            ctl_prefix = tuple(names.namespace_prefix(
                str(layout.etc / names.CONTROLLER_FSTAB_FILE), os.getuid(), os.getgid(),
                netns=net.netns(network_plan.CONTROLLER_KEY) if net else None, enter=enter))
        acct = AccountingInputs(dbd_port=state.slurmdbd_port, storage_port=state.mariadb_port, dbd_addr=ctl_addr) \
            if spec.accounting and state.slurmdbd_port and state.mariadb_port else None
        notes = state.provider_data.get("notes", {})
        # Clusters made before this choice was recorded keep their TaskProlog.
        task_prolog = init is None or state.provider_data.get("task_prolog", True)
        host_cpus = len(os.sched_getaffinity(0))
        # pyxis's container options where this host can run the plugin (cluster/services/containers.py).
        no_containers = containers.unavailable_reason(os.geteuid() == 0, in_namespace, slurm_version)
        render = RenderInputs(paths=NodePaths.of_layout(layout), hostname=state.hostname, slurm_user=state.user,
                              controller_port=state.controller_port, node_ports=dict(state.node_ports),
                              node_addrs=dict(addrs), nss_wrapper_lib=None if in_namespace else state.nss_wrapper_lib,
                              node_hostnames=in_namespace,
                              srun_port_range=network.srun_port_range() if net else "",
                              host_cpus=host_cpus, task_prolog=task_prolog,
                              controller_addr=ctl_addr, accounting=acct, cgroups=use_cgroups,
                              cgroup_devices=confined_devices, cgroup_cores=cores_in_cgroup,
                              node_subnet=net.subnet if net else None,
                              cgroup_ignore_systemd=bool(state.provider_data.get("cgroup_ignore_systemd")),
                              cgroup_plugin=cgroups_v2.slurm_plugin(use_cgroups, host_slurm_version()),
                              containers_plugin=None if no_containers else str(containers.PLUGIN_PATH),
                              containers_note=no_containers)
        return Placement(
            render=render, daemon_user=state.user, munged_on=[CONTROLLER],
            config_dir=layout.etc, job_root=layout.root, job_root_in_cluster=str(layout.root),
            # Jobs run on this same host: the python running simcluster (its venv) is theirs.
            # With device cgroups a job sees only its GPUs, numbered by Slurm from 0.
            python_bin=str(Path(sys.executable).parent), gpus_renumbered=confined_devices,
            extra_files=extra_files, slurmd_prefix=tuple(prefix), slurmd_forks=init is not None,
            node_etc_slurm=etc_note or "the cluster's config (mounted in each node's own mount namespace)",
            controller_prefix=ctl_prefix, controller_addr=ctl_addr,
            shortfalls=[f"{what}: {note}" for what, note in (("network", notes.get("network")),
                                                           ("limits", notes.get("cgroups")),
                                                           ("GPU devices", ROOTLESS_DEVICES_NOTE if scope else ""),
                                                           ("boot time", boot_note)) if note],
            node_network=notes.get("network") or ((
                f"a network namespace each (eth0 on {net.subnet}, in a user namespace of the cluster's own: "
                f"Slurm commands reach it from {net.host_addr} there, through `simcluster env`'s wrappers or "
                f"`simcluster exec`; the controller {ctl_addr})" if net.rootless else
                f"a network namespace each (eth0 on {net.subnet}; this host is {net.host_addr}, the controller "
                f"{ctl_addr})") + "; no daemon listens on this host's own interfaces; names outside the cluster do "
                "not resolve in jobs and nothing is routed off this host" if net else ""),
            node_cgroups=notes.get("cgroups") or (enforced_note(v2, scope, shape_is_real(spec, host_cpus))
                                                  if use_cgroups else ""),
            node_boot_time=boot_note or "their own: each start of a node (up, start, fault heal) is a boot (a time "
                           "namespace each; uptime and slurmd's boot time count from it)",
            client_env={"SLURM_CONF": str(layout.slurm_conf), "SIMCLUSTER_CLUSTER": state.name},
            dbd_port=state.slurmdbd_port, storage_port=state.mariadb_port,
            # slurmrestd beside slurmctld: on the controller's address (its namespace on the
            # cluster's bridge as root, else loopback), never this host's own interfaces.
            rest_port=state.rest_port, rest_addr=ctl_addr,
            usage=f'use it: eval "$(simcluster env --name {state.name})"; sinfo\n'
                  + (no_containers or "container options: srun --container-image=FILE.sqsh ... (docs/containers.md)"),
            install_hint="make setup-train (or pip install -e '.[train]')")

    def runner(self, state: ClusterState, key: str) -> HostRunner:
        net = _network(state)
        if net and net.rootless:
            # Slurm's commands reach the nodes on the cluster's network only (userns.py).
            return userns.ClusterNetRunner(self._runner.base_env, net.netns_dir)
        return self._runner

    # -- nodes that join or leave a running cluster (`simcluster scale`) -----------------------------
    def add_machines(self, state: ClusterState, spec: ClusterSpec, nodes: List[str], progress: Progress) -> None:
        """What provision makes for a node, for ``nodes`` only: free ports, an address on the
        cluster's network (a namespace each) or loopback block, spool and TmpFS directories,
        cgroups (every node's devices cgroup then denies the new GPUs too); then the
        placement again, from this host as at provision (the hosts file lists the new names)."""
        layout = state.layout
        with port_lock():
            own = [state.controller_port, *state.node_ports.values(),
                   *(p for p in (state.mariadb_port, state.slurmdbd_port) if p)]
            wanted = [spec.node(n) for n in nodes]
            free = iter(allocate_ports(sum(1 for n in wanted if n.port is None),
                                       reserved=reserved_ports(exclude=state.name) + own))
            for n in wanted:
                state.node_ports[n.name] = n.port or next(free)
            net = _network(state)
            addrs = state.provider_data.setdefault("node_addrs", {})
            if net:
                used = set(net.addrs.values()) | {net.host_addr}
                hosts = (str(a) for a in ipaddress.ip_network(net.subnet).hosts() if str(a) not in used)
                for name in nodes:
                    addr = next(hosts, None)
                    if addr is None:
                        raise UsageError(f"the cluster's network {net.subnet} has no address left for {name}",
                                         "add fewer nodes")
                    net.addrs[name] = addrs[name] = addr
                state.provider_data["network"] = net.to_dict()
            elif addrs:
                block = loopback_addresses.block_of(addrs)
                taken = set(addrs.values())
                free_addrs = (loopback_addresses.node_address(block, i) for i in range(254 * 254)
                              if loopback_addresses.node_address(block, i) not in taken)
                for name in nodes:
                    addrs[name] = next(free_addrs)
            state.spec = spec.to_dict()
            state.save()  # the ports and addresses are taken once the state file records them
        for name in nodes:
            (layout.spool / name).mkdir(exist_ok=True)
            _make_tmpfs(layout.root / "tmp" / name)
        if net:
            network.create(net, [n for n in nodes if n in network.missing(net)])
        if state.provider_data.get("cgroups") and not state.provider_data.get("cgroup_scope"):
            cgroups.create(_tag(state), {n.name: list(n.gpus) for n in spec.nodes}, cgroups.host_gpu_minors())
        placement = self.placement(state)
        state.placement = placement.to_dict()
        _write_node_files(state, placement)

    def remove_machines(self, state: ClusterState, spec: ClusterSpec, nodes: List[str]) -> None:
        """Undo add_machines for ``nodes`` (whose daemons were stopped): what is left of their
        processes, their namespaces, cgroups, ports, addresses and directories."""
        layout, tag = state.layout, _tag(state)
        for name in nodes:
            left = node_pids(layout.root, name, state.pids.get(f"slurmd:{name}", 0))
            if left:
                terminate(left, grace=2.0)
        net = _network(state)
        if net:
            network.delete_nodes(net, nodes)
            for name in nodes:
                net.addrs.pop(name, None)
            state.provider_data["network"] = net.to_dict()
        if state.provider_data.get("cgroups") and not state.provider_data.get("cgroup_scope"):
            cgroups.remove_nodes(tag, nodes)  # (a node's delegated scope goes with its last process)
        for name in nodes:
            state.node_ports.pop(name, None)
            state.provider_data.get("node_addrs", {}).pop(name, None)
            shutil.rmtree(layout.spool / name, ignore_errors=True)
            shutil.rmtree(layout.root / "tmp" / name, ignore_errors=True)
        state.spec = spec.to_dict()
        state.placement = self.placement(state).to_dict()

    def delete(self, state: ClusterState) -> List[int]:
        """SIGKILL every process of the cluster at once: its state is deleted next, so a
        graceful slurmctld shutdown (saving state) is wasted time. Sweep again in case a
        slurmd forked a stepd meanwhile. Then the nodes' namespaces, devices and cgroups."""
        root, known = state.layout.root, list(state.pids.values())
        survivors: List[int] = []
        for _ in range(3):
            pids = cluster_pids(root, known)
            if not pids:
                survivors = []
                break
            survivors = terminate(pids, grace=0)
            known = []
        tag = _tag(state)
        net = _network(state)
        if net:
            network.delete(tag, net.netns_dir)
        scope = state.provider_data.get("cgroup_scope")
        if scope:
            # Each node's scope went with its processes; one a process outlived is stopped.
            cgroups_delegated.stop_scopes(tag, scope.get("runtime_dir", ""))
        elif state.provider_data.get("cgroups"):
            # A killed task leaves its cgroup a moment after the signal.
            try:
                poll_until(lambda: (not cgroups.remove(tag), None), 5.0, first_delay=0.01, max_delay=0.1)
            except WaitTimeout:
                pass  # `down` reports what is left (cgroups.leftovers)
        return survivors

    def machines_running(self, state: ClusterState) -> Dict[str, bool]:
        """A node's machine is its network namespace (it outlives the node's processes; a
        reboot takes it): {key: it exists}; {} where nodes share the host's network."""
        net = _network(state)
        if not net:
            return {}
        gone = set(network.missing(net))
        return {(CONTROLLER if k == network_plan.CONTROLLER_KEY else k): k not in gone for k in net.addrs}

    def start_machines(self, state: ClusterState, keys: List[str]) -> None:
        self._make_machines(state)

    def stop_machines(self, state: ClusterState) -> None:
        """What is left once the daemons stopped (slurmstepd, job tasks): TERM, then KILL."""
        for _ in range(2):
            pids = cluster_pids(state.layout.root)
            if not pids:
                return
            terminate(pids, grace=2.0)

    def node_pids(self, state: ClusterState, node: str) -> List[int]:
        return node_pids(state.layout.root, node, state.pids.get(f"slurmd:{node}", 0))

    def crash_machine(self, state: ClusterState, node: str, kill: Callable[[], None]) -> bool:
        """A node's machine is its network namespace (machines_running): its interface goes
        first (the node falls silent), then its processes, then the namespace. The repair
        makes a new one (start_machines): a fresh network stack, which resets the connections
        of the node's old processes when srun or slurmctld next sends on them."""
        net = _network(state)
        if not net or node not in net.addrs or not network.unplug(net, node):
            kill()
            return False
        kill()
        network.delete_nodes(net, [node])
        return True

    def discover(self, name: str) -> Optional[ClusterState]:
        return None  # a local cluster is its state directory: without a state file there is none
