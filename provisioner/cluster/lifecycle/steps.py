"""`up` as data: the ordered steps that turn provisioned machines into a ready cluster.

The same list runs on every backend, through the cluster's runners (after kind's create
actions). Each step prints ' - <what> ... done (0.12s)'; a step that does not apply to
the spec (accounting, fake GPUs) is left out. The list is also what the benchmark's raw
baseline is generated from (daemons.py holds the command lines).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Tuple

from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.placement import CONTROLLER
from provisioner.cluster.model.provider import BootsDaemons
from provisioner.cluster.model.state import ClusterState
from provisioner.cluster.model.wait import nodes_ready
from provisioner.cluster.services import accounting
from provisioner.cluster.services import daemons
from provisioner.cluster.services import metrics
from provisioner.cluster.services import rest
from provisioner.config.gpus import mig_instances
from provisioner.config.mig import cap_minors
from provisioner.render import render_all, write_files


@dataclass
class UpRun:
    """What the steps of one `up` share."""

    cluster: Cluster
    progress: Callable[[str], None]
    timeout: float  # --wait: how long the readiness gates wait
    db_password: str = field(default_factory=accounting.new_password)


@dataclass(frozen=True)
class Step:
    name: str
    describe: Callable[[Cluster], str]
    run: Callable[[UpRun], None]
    applies: Callable[[Cluster], bool] = lambda c: True


def write_configs(up: UpRun) -> None:
    """Render every config into the provider's config directory, and a fresh munge key.
    The placement is only read: this `up`'s database password goes into a copy of its
    render inputs (the state file never holds it)."""
    c = up.cluster
    inputs = c.placement.render
    if c.spec.accounting:
        inputs = replace(inputs, accounting=accounting.inputs(c, up.db_password))
    files = render_all(c.spec, inputs)
    files.update(c.placement.extra_files)
    if c.spec.accounting and c.placement.daemon_user == "root":
        files["accounts.cfg"] = accounting.accounts_file(c.name, "root")
    write_files(files, c.placement.config_dir)
    # A fresh random key per cluster, mode 0400, never shared with the system's munged.
    key = c.placement.config_dir / "munge.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as fh:
        fh.write(os.urandom(1024))
    if c.spec.rest:
        rest.write_jwt_key(c.placement.config_dir)


def on_each_machine(c: Cluster, keys: List[str], action: Callable[[str], None]) -> None:
    """``action(key)`` for every runner key: keys on distinct machines at once (threads), so
    a backend whose every call is a round trip (docker exec, ssh) pays about one per step,
    not one per node; keys that share a runner (local: every node is this host) in order."""
    groups: Dict[int, List[str]] = {}
    for key in keys:
        groups.setdefault(id(c.runner(key)), []).append(key)
    if len(groups) <= 1:
        for key in keys:
            action(key)
        return

    def run_group(group: List[str]) -> None:
        for key in group:
            action(key)
    with ThreadPoolExecutor(max_workers=min(16, len(groups))) as pool:
        for future in [pool.submit(run_group, g) for g in groups.values()]:
            future.result()  # the first failure is raised, after every machine has finished


def make_fake_gpus(up: UpRun, nodes: Optional[List[str]] = None) -> None:
    """Character devices (major 195, minor N) so gres scheduling works without GPUs; without
    the right to mknod, a link to /dev/null (Slurm only checks for a character device).
    ``nodes``: only those nodes' GPUs (nodes that `scale` adds); default: every node's."""
    c = up.cluster
    # Grouped by machine: on the local backend every node is this host (one command).
    by_machine: Dict[int, Tuple[str, List[int]]] = {}
    for node in (c.spec.nodes if nodes is None else [c.spec.node(n) for n in nodes]):
        by_machine.setdefault(id(c.runner(node.name)), (node.name, []))[1].extend(node.gpus)
    gpus_of = dict(by_machine.values())

    caps_of: Dict[str, List[int]] = {}  # MIG nodes: their nvidia-caps minors, by machine (gres.conf's MultipleFiles)
    for node in (c.spec.nodes if nodes is None else [c.spec.node(n) for n in nodes]):
        key = by_machine[id(c.runner(node.name))][0]
        caps_of.setdefault(key, []).extend(m for g, inst in mig_instances(node)
                                           for m in cap_minors(node.gpus[g], inst.gi))

    def make(key: str) -> None:
        c.runner(key).make_gpu_devices(c.paths.dev, gpus_of[key])
        if caps_of.get(key):
            make_mig_caps(c.runner(key), c.paths.dev, caps_of[key])
    on_each_machine(c, [k for k, gpus in gpus_of.items() if gpus], make)


# What /dev/nvidia-caps/* are on a MIG host: character devices of the nvidia-caps driver
# (its major is given out at boot; this one is as good as any: no driver answers it).
NVIDIA_CAPS_MAJOR = 237


def make_mig_caps(runner, dev_dir: str, minors: List[int]) -> None:
    """Fake MIG instances: ``dev_dir``/nvidia-caps/nvidia-capN character devices (or, without
    the right to mknod, links to /dev/null), one shell on the machine for all of them."""
    script = f"mkdir -p {dev_dir}/nvidia-caps; " + "; ".join(
        f"mknod -m 666 {dev_dir}/nvidia-caps/nvidia-cap{m} c {NVIDIA_CAPS_MAJOR} {m} 2>/dev/null || "
        f"test -c {dev_dir}/nvidia-caps/nvidia-cap{m} || ln -sf /dev/null {dev_dir}/nvidia-caps/nvidia-cap{m}"
        for m in minors)
    runner.run(["sh", "-c", script], timeout=30)


def start_munged(up: UpRun, machines: Optional[List[str]] = None) -> None:
    """munged on each machine of ``machines`` (default: every machine that runs one)."""
    c = up.cluster

    def start(key: str) -> None:
        daemons.start_launch(c, daemons.munged_launch(c, key))
        runner = c.runner(key)
        daemons.wait_usable(c, daemons.munged_key(key), "create its socket",
                            lambda: runner.exists(c.paths.munge_socket), 10.0)
    on_each_machine(c, c.placement.munged_on if machines is None else machines, start)


def start_slurmctld(up: UpRun) -> None:
    c = up.cluster
    daemons.start_launch(c, daemons.slurmctld_launch(c))
    runner, port = c.runner(), c.state.controller_port
    addr = c.placement.controller_addr
    daemons.wait_usable(c, "slurmctld", f"listen on port {port}", lambda: runner.listening(port, addr), 20.0)


def start_slurmds(up: UpRun, nodes: Optional[List[str]] = None) -> None:
    """One `slurmd -N <node>` per virtual node (default: all), all started at once; readiness
    is checked later."""
    c = up.cluster
    names = c.node_names if nodes is None else nodes
    on_each_machine(c, names, lambda node: daemons.start_launch(c, daemons.slurmd_launch(c, node)))
    # Where the prefix forks (a PID namespace per node), each slurmd's own pid is found once
    # every node was started: the nodes' start chains (namespaces, mounts, cgroups) then run
    # side by side, not one after another while each pid is awaited.
    own_pid = c.placement.slurmd_pid
    if own_pid:
        for node in names:
            c.state.pids[f"slurmd:{node}"] = own_pid(c.state.pids[f"slurmd:{node}"])


def _accounting(c: Cluster) -> bool:
    return c.spec.accounting


@dataclass(frozen=True)
class Boot:
    """A daemon that its machine starts itself (BootsDaemons), exactly as its step would.
    Before starting it the machine waits until ``needs`` exist (its files: the munge key, the
    munge socket, fake GPU devices) and, where ``after_controller``, until slurmctld takes
    connections (a slurmd that finds no controller tries again only a second later).
    ``port``: the daemon takes connections once it listens there (what other machines'
    after_controller waits for)."""

    launch: daemons.Launch
    needs: Tuple[str, ...] = ()
    after_controller: bool = False
    port: int = 0


def boot_plan(c: Cluster) -> Dict[str, List[Boot]]:
    """{machine key: the daemons it starts itself, in the steps' order}: munged on every
    machine that runs one, then, without accounting (whose database and slurmdbd come
    between), slurmctld on the controller and each node's slurmd. What the steps wait for
    between them, each machine waits for itself (Boot.needs). The daemons of the database
    and the REST API are always started by their steps."""
    p = c.paths
    plan: Dict[str, List[Boot]] = {}
    for key in c.placement.munged_on:
        plan.setdefault(key, []).append(Boot(daemons.munged_launch(c, key), needs=(p.munge_key,)))
    if c.spec.accounting:
        return plan
    munge = (p.munge_socket,)
    plan.setdefault(CONTROLLER, []).append(Boot(daemons.slurmctld_launch(c), needs=munge,
                                                port=c.state.controller_port))
    for node in c.spec.nodes:
        # runner.make_gpu_devices names them so (the fake-gpus step makes them after the machines start)
        gpus = tuple(f"{p.dev}/nvidia{g}" for g in node.gpus) if c.spec.fake_gpus else ()
        slurmd = daemons.slurmd_launch(c, node.name)
        plan.setdefault(ClusterState.runner_key(slurmd.key), []).append(Boot(slurmd, needs=munge + gpus,
                                                                             after_controller=True))
    return plan


def _boots(c: Cluster) -> bool:
    return isinstance(c.provider, BootsDaemons) and c.provider.boots(c.state)


STEPS: Tuple[Step, ...] = (
    Step("configs", lambda c: "writing configs and munge key", write_configs),
    Step("machines", lambda c: f"starting {len(c.spec.nodes) + 1} machines (each starts its own daemons)",
         lambda up: up.cluster.provider.boot_machines(up.cluster.state, boot_plan(up.cluster)), _boots),
    Step("fake-gpus", lambda c: f"making {len(c.spec.all_gpus)} fake GPU devices", make_fake_gpus,
         lambda c: c.spec.fake_gpus and bool(c.spec.all_gpus)),
    Step("munged", lambda c: "starting munged" + (f" on {len(c.placement.munged_on)} machines"
                                                  if len(c.placement.munged_on) > 1 else ""), start_munged),
    Step("database", lambda c: "creating the accounting database",
         lambda up: accounting.create_database(up.cluster, up.db_password), _accounting),
    Step("mariadb", lambda c: f"starting MariaDB on port {c.placement.storage_port}",
         lambda up: accounting.start_mariadb(up.cluster), _accounting),
    Step("slurmdbd", lambda c: f"starting slurmdbd on port {c.placement.dbd_port}",
         lambda up: accounting.start_slurmdbd(up.cluster), _accounting),
    Step("associations", lambda c: accounting.register_title(c), lambda up: accounting.register(up.cluster),
         _accounting),
    Step("slurmctld", lambda c: f"starting slurmctld on port {c.state.controller_port}", start_slurmctld),
    Step("slurmd", lambda c: f"starting {len(c.spec.nodes)} slurmd", start_slurmds),
    Step("ready", lambda c: f"waiting for {len(c.spec.nodes)} nodes to be idle",
         lambda up: nodes_ready(up.cluster, up.timeout)),
    Step("registered", lambda c: "waiting for slurmctld to register with slurmdbd",
         lambda up: accounting.wait_registered(up.cluster, up.timeout), _accounting),
    Step("slurmrestd", lambda c: f"starting slurmrestd (REST API, JWT) on port {rest.rest_port(c)}",
         lambda up: rest.start_slurmrestd(up.cluster), lambda c: c.spec.rest),
    Step("metrics", lambda c: f"starting the metrics exporter on {metrics.url(c)}",
         lambda up: metrics.start_exporter(up.cluster), lambda c: c.spec.metrics),
    Step("qos-limits", lambda c: "setting the QoS limits counted in TRES",
         lambda up: accounting.set_tres_limits(up.cluster),
         lambda c: c.spec.accounting and any(accounting.is_tres_limit(k) for q in c.spec.qos for k, _ in q.limits)),
)


def steps_for(cluster: Cluster) -> List[Step]:
    return [s for s in STEPS if s.applies(cluster)]


def run_steps(up: UpRun) -> None:
    """Run every step that applies, in order; the state is saved after each (so `down`
    finds whatever was started, even if the next step fails)."""
    c = up.cluster
    for step in steps_for(c):
        t0 = time.monotonic()
        status = "FAILED"
        try:
            step.run(up)
            status = "done"
        finally:
            c.state.save()
            up.progress(f" - {step.describe(c)} ... {status} ({time.monotonic() - t0:.2f}s)")
    c.state.phase = "running"
    c.state.save()


__all__ = ["STEPS", "Boot", "Step", "UpRun", "boot_plan", "run_steps", "steps_for", "CONTROLLER"]
