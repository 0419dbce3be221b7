"""SSHProvider: a cluster made by `simcluster deploy`, read over SSH on its controller.

A read-only provider (capabilities.ReadOnly): it discovers the cluster from what the
controller answers (cluster.py), places it (the paths slurm.conf names), and hands out
runners (the controller over SSH, each compute node as a one-task srun through it).
status, export-logs and verify then run the same shared code as on local and docker
clusters. What differs is said here: liveness comes from what Slurm and munge answer
(there are no pids: the roles' services run the daemons), the config files are read on
the controller, and job files go to every host (files.py: no shared filesystem).
Provisioning and deleting stay with `simcluster deploy`: provision and delete refuse.
"""

from __future__ import annotations

import posixpath
import urllib.parse
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from provisioner.cluster.model.command_runner import Runner
from provisioner.cluster.model.jobfiles import JobFiles
from provisioner.cluster.model.placement import CONTROLLER, NodePaths, Placement
from provisioner.cluster.model.provider import ExtraLogs, Provider, ReadOnly
from provisioner.cluster.model.slurm import SlurmClient
from provisioner.cluster.model.state import ClusterState
from provisioner.config.types import ClusterSpec
from provisioner.errors import UsageError
from provisioner.progress import Progress
from provisioner.providers.ssh.accounting import ACCOUNTING_DAEMONS, pids_alive, rest_url, storage_port
from provisioner.providers.ssh.cluster import (ControllerUnavailable, _int, node_groups, parse_config,
                                               probe_gpus_fake, read_cluster_with, srun_on_nodes)
from provisioner.providers.ssh.files import RUN_ROOT, SSHJobFiles
from provisioner.providers.ssh.remote_runners import ComputeNodeRunner, SSHRunner
from provisioner.providers.ssh.session import SSHSession
from provisioner.providers.ssh.units import host_units
from provisioner.render import RenderInputs

# ansible/roles/training/defaults/main.yml: training_venv.
TRAINING_BIN = "/opt/simcluster/venv/bin"
# Where the roles put what slurm.conf does not name (munge's own defaults).
MUNGE_DIR = "/run/munge"
MUNGED_LOG = "/var/log/munge/munged.log"  # ansible/roles/munge: service_log


def slurmd_answers(state: str) -> bool:
    """A node state in which slurmd answers slurmctld ('*' = not responding)."""
    base = state.lower()
    return not base.endswith("*") and not base.startswith(("down", "unknown", "future"))


def _services_script(units: Sequence[str]) -> str:
    """Prints `HOST UNIT STATE` per unit where systemd runs (SLURMD_NODENAME names a compute
    node, else the short host name), nothing elsewhere."""
    return ('[ -d /run/systemd/system ] || exit 0; h=${SLURMD_NODENAME:-$(hostname -s)}; for u in '
            + " ".join(units) + '; do echo "$h $u $(systemctl is-active "$u" 2>/dev/null || true)"; done')


def _parse_services(text: str) -> Dict[str, Dict[str, str]]:
    found: Dict[str, Dict[str, str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            found.setdefault(parts[0], {})[parts[1]] = parts[2]
    return found


def _dir_of(value: Optional[str], default: str) -> str:
    return posixpath.dirname(value) if value and value.startswith("/") else default


class SSHProvider(Provider, ReadOnly, ExtraLogs):
    """The cluster whose controller ``controller`` reaches (an SSHRunner; ``target`` names it:
    USER@HOST[:PORT]). Without one (the registry's instance) it discovers nothing."""

    name = "ssh"
    poll_s = 0.5  # squeue over SSH costs a round trip: ask less often than on this host

    def __init__(self, controller: Optional[Runner] = None, target: str = "", probe_gpus: bool = True):
        self._controller = controller
        self.target = target
        # Ask the GPU nodes whether their devices are fake (one srun). `fault --ssh` does not:
        # its srun, a job of seconds, would be in flight when `fault kill-controller` follows,
        # and slurmctld would recover it RUNNING from state saved before it ended.
        self.probe_gpus = probe_gpus

    @classmethod
    def of_session(cls, session: SSHSession, probe_gpus: bool = True) -> "SSHProvider":
        return cls(SSHRunner(session), str(session.target), probe_gpus)

    # -- the core ---------------------------------------------------------------------------------
    def provision(self, spec: ClusterSpec, state: ClusterState, progress: Progress) -> None:
        raise UsageError("clusters on real hosts are made by 'simcluster deploy', not by 'up'",
                         "simcluster deploy -i inventory.ini [--config cluster.yaml]")

    def delete(self, state: ClusterState) -> List[int]:
        raise UsageError(f"simcluster does not remove the deployed cluster '{state.name}'",
                         "stop its services on the hosts (the Ansible roles installed them)")

    def discover(self, name: str) -> Optional[ClusterState]:
        """The cluster the controller runs, as it answers (a controller runs one cluster:
        ``name`` is not compared). A slurmctld that does not answer gives a stopped cluster
        with no nodes; status reports it, verify refuses it (job_files)."""
        if self._controller is None:
            return None
        client = SlurmClient(self.controller(), poll_s=self.poll_s)
        res = client.run(["scontrol", "show", "config"], timeout=20)
        config = parse_config(res.stdout) if res.ok else {}
        cluster = read_cluster_with(client, config)
        spec = cluster.spec(fake_gpus=False)
        fake = bool(probe_gpus_fake(cluster, spec)) if res.ok and self.probe_gpus else cluster.device_files_fake()
        spec = cluster.spec(fake_gpus=fake)
        target = self.target
        nodes = {n["NodeName"]: n for n in cluster.nodes if n.get("NodeName")}
        return ClusterState(
            name=cluster.name, backend=self.name, spec=spec.to_dict(),
            # No state directory here: the controller's StateSaveLocation, named with its host.
            root=f"{target}: {config.get('StateSaveLocation', '?')}",
            hostname=self.controller().where, user=target.partition("@")[0] if "@" in target else "",
            controller_port=_int(config.get("SlurmctldPort")) or 0,
            node_ports={n: _int(info.get("Port")) or _int(config.get("SlurmdPort")) or 0 for n, info in nodes.items()},
            phase="running" if res.ok else "stopped",
            rest_url=rest_url(self.controller(), config) if cluster.rest else None,
            provider_data={"target": target, "config": config, "task_prolog": cluster.task_prolog,
                           "node_addrs": {n: info.get("NodeAddr", n) for n, info in nodes.items()},
                           "controller_error": "" if res.ok else res.error_line(),
                           "storage_port": storage_port(self.controller(), config) if cluster.accounting else None})

    def placement(self, state: ClusterState) -> Placement:
        config: Dict[str, str] = state.provider_data.get("config", {})
        slurm_conf = config.get("SLURM_CONF", "/etc/slurm/slurm.conf")
        paths = NodePaths(
            etc=posixpath.dirname(slurm_conf), log=_dir_of(config.get("SlurmctldLogFile"), "/var/log/slurm"),
            run=_dir_of(config.get("SlurmctldPidFile"), "/run/slurm"),
            spool=config.get("SlurmdSpoolDir", "/var/spool/slurmd"),
            state_save=config.get("StateSaveLocation", "/var/spool/slurmctld"), munge_key="/etc/munge/munge.key",
            munge_socket=f"{MUNGE_DIR}/munge.socket.2", munge_dir=MUNGE_DIR, dev="/dev", db_dir="")
        storage_port = state.provider_data.get("storage_port")
        # Limits are what the deployed slurm.conf says: cgroups where Slurm tracks jobs with them.
        proctrack, task_plugin = config.get("ProctrackType", "?"), config.get("TaskPlugin", "?")
        cgroups = proctrack == "proctrack/cgroup" and "task/cgroup" in task_plugin
        render = RenderInputs(paths=paths, hostname=state.hostname, slurm_user=config.get("SlurmUser", "slurm"),
                              controller_port=state.controller_port, node_ports=state.node_ports,
                              nodes_are_hosts=True, controller_addr=None,
                              task_prolog=bool(state.provider_data.get("task_prolog")), cgroups=cgroups)
        target = state.provider_data.get("target", "?")
        return Placement(
            render=render, daemon_user=render.slurm_user, munged_on=[CONTROLLER],
            # Accounting (ansible/roles/slurm_accounting): slurmdbd where slurm.conf says, its database beside it.
            dbd_port=_int(config.get("AccountingStoragePort")) if state.cluster_spec.accounting else None,
            storage_port=storage_port,
            # On the controller, not on this host (config_files reads it there); job files
            # go to the same directory on every host (files.py).
            config_dir=Path(paths.etc), job_root=RUN_ROOT, job_root_in_cluster=str(RUN_ROOT),
            python_bin=TRAINING_BIN,
            # Each host owns its GPUs, but the roles' TaskProlog (installed where there are no
            # device cgroups) still hands jobs the physical ids gres.conf names; without it,
            # Slurm numbers a node's GPUs from 0.
            gpus_renumbered=not state.provider_data.get("task_prolog"),
            controller_where=target, usage=f"use it: ssh {target} sinfo",
            node_network="hosts of their own (a deployed cluster)",
            node_cgroups=(f"enforced by the deployed slurm.conf ({proctrack}, TaskPlugin={task_plugin})" if cgroups else
                          f"not enforced: the deployed slurm.conf has ProctrackType={proctrack}, "
                          f"TaskPlugin={task_plugin} (proctrack/cgroup and task/cgroup enforce --mem and devices)"),
            install_hint=f"the jobs' python ({TRAINING_BIN}) lacks it: deploy with 'simcluster deploy --training'")

    def runner(self, state: ClusterState, key: str) -> Runner:
        if key == CONTROLLER:
            return self.controller()
        client = SlurmClient(self.controller(), poll_s=self.poll_s)
        part = next((p for p, nodes in node_groups(state.cluster_spec) if key in nodes), None)
        return ComputeNodeRunner(client, part, key, where=state.provider_data.get("node_addrs", {}).get(key))

    # -- defaults, said for a deployed cluster -----------------------------------------------------
    def available(self) -> bool:
        return self._controller is not None

    def job_files(self, state: ClusterState, placement: Placement) -> JobFiles:
        """SSHJobFiles: to the controller and every node (their sruns need a controller that answers)."""
        if state.phase != "running":
            raise ControllerUnavailable(
                f"slurmctld on {state.provider_data.get('target', '?')} does not answer: "
                f"{state.provider_data.get('controller_error') or 'no answer'}",
                "is the cluster deployed and slurmctld running? ('simcluster deploy' starts it)")
        return SSHJobFiles(SlurmClient(self.controller(), poll_s=self.poll_s), state.cluster_spec)

    def describe(self, state: ClusterState, placement: Placement) -> str:
        return f"deployed cluster '{state.name}' via {state.provider_data.get('target', '?')}"

    def logs_hint(self, state: ClusterState, placement: Placement) -> str:
        p = placement.paths
        return f"daemon logs are on the hosts: {p.daemon_log('slurmctld')}, {p.daemon_log('slurmd-<node>')}"

    # -- ReadOnly -----------------------------------------------------------------------------------
    def daemons_alive(self, state: ClusterState, placement: Placement) -> Dict[str, bool]:
        """slurmctld from `scontrol ping`, munged from a `munge -n | unmunge` round trip on the
        controller, each slurmd from its node's state (a node whose slurmd stopped answering
        is down or '*')."""
        client = SlurmClient(self.controller(), {"SLURM_CONF": placement.paths.slurm_conf}, poll_s=self.poll_s)
        spec = state.cluster_spec
        responding = client.ping(timeout=20)
        munge = client.run(["sh", "-c", "munge -n | unmunge >/dev/null"], timeout=20)
        states = client.node_states(timeout=20) if responding else None
        alive = {"slurmctld": responding, "munged": munge.ok}
        # The roles' MariaDB, slurmdbd and slurmrestd write pid files where `up`'s do (paths.run).
        extra = (ACCOUNTING_DAEMONS if spec.accounting else ()) + (("slurmrestd",) if spec.rest else ())
        if extra:
            alive.update(pids_alive(self.controller(), [(d, f"{placement.paths.run}/{d}.pid") for d in extra]))
        for node in (n.name for n in spec.nodes):
            ns = (states or {}).get(node)
            alive[f"slurmd:{node}"] = bool(ns) and slurmd_answers(ns.state)
        return alive

    def reach_url(self, state: ClusterState, url: str) -> str:
        """``url`` (http://ADDR:PORT on the cluster's network, slurmrestd's) through the SSH
        connection: the controller reaches it, this machine may not (a private cluster network)."""
        controller = self.controller()
        session = getattr(controller, "session", None)
        parsed = urllib.parse.urlsplit(url)
        if session is None or not parsed.hostname or not parsed.port:
            return url
        local = session.forward(parsed.hostname, parsed.port)
        return urllib.parse.urlunsplit((parsed.scheme, f"127.0.0.1:{local}", parsed.path, "", ""))

    def host_services(self, state: ClusterState, placement: Placement, nodes: List[str]) -> Dict[str, Dict[str, str]]:
        """`systemctl is-active` of the roles' units: on the controller over SSH (munge,
        slurmctld, and slurmdbd, simcluster-mariadb, simcluster-slurmrestd where the spec has
        them), on ``nodes`` with one srun (munge, slurmd). {} where the controller has no
        systemd (containers: simcluster-daemon runs the daemons there)."""
        spec = state.cluster_spec
        ctl_units = host_units(controller=True, compute=False, accounting=bool(spec.accounting), rest=bool(spec.rest))
        res = self.controller().run(["sh", "-c", _services_script(ctl_units)], timeout=30)
        found = _parse_services(res.stdout)
        if not found:
            return {}
        client = SlurmClient(self.controller(), {"SLURM_CONF": placement.paths.slurm_conf}, poll_s=self.poll_s)
        for part, members in node_groups(spec):
            ask = [n for n in members if n in nodes]
            if ask:
                node_units = host_units(controller=False, compute=True, accounting=False, rest=False)
                res = srun_on_nodes(client, part, ask, ["sh", "-c", _services_script(node_units)], timeout=60)
                # The controller's host may be a compute node too: its units under one name.
                for host, units in _parse_services(res.stdout).items():
                    found.setdefault(host, {}).update(units)
        return found

    def config_files(self, state: ClusterState, placement: Placement) -> Dict[str, bytes]:
        """The readable files of the controller's config directory (not its subdirectories)."""
        etc = placement.paths.etc
        ctl = self.controller()
        res = ctl.run(["find", etc, "-maxdepth", "1", "-type", "f", "-readable", "-printf", "%f\\n"], timeout=20)
        found: Dict[str, bytes] = {}
        for name in sorted(res.stdout.split()) if res.ok else []:
            data = ctl.read_file(posixpath.join(etc, name))
            if data is not None:
                found[name] = data
        return found

    def fault_injector(self, cluster) -> Optional[object]:
        """SSHFaults: the faults of `simcluster fault --ssh`, through the hosts' systemd (None
        for a controller reached otherwise than by an SSH session)."""
        if getattr(self._controller, "session", None) is None:
            return None
        from provisioner.providers.ssh.faults import SSHFaults  # lazy: only verify's fault suite needs it
        return SSHFaults(cluster)

    # -- ExtraLogs ----------------------------------------------------------------------------------
    def extra_logs(self, state: ClusterState, out_dir: Path) -> List[Path]:
        """logs/munged.log: munged logs where Debian's munge does, not in slurm.conf's log directory."""
        data = self.controller().read_file(MUNGED_LOG)
        if data is None:
            return []
        path = out_dir / "logs" / "munged.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return [path]

    def versions(self) -> Dict[str, str]:
        return {}

    # -- the connection -------------------------------------------------------------------------------
    def controller(self) -> Runner:
        if self._controller is None:
            raise UsageError("a deployed cluster is reached over SSH: pass --ssh USER@HOST")
        return self._controller
