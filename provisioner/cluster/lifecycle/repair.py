"""Bring an existing cluster back without losing anything: `up` on a broken cluster, `start`, `fault heal`.

Nothing is written or created again: configs, the munge key, the database, the ports and
StateSaveLocation stay as they are. Only daemons whose pid is dead (or that are ours no
more: after a reboot a recorded pid may be another process) are started again, through
the same start functions `up` uses; slurmctld starts without -c, so it recovers its
saved jobs. A slurmd that is alive but does not answer slurmctld is killed and started
again. A repair that fails leaves the cluster as it is (never deleted).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from provisioner.cluster.lifecycle import steps
from provisioner.cluster.lifecycle.steps import UpRun
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.provider import machines_running
from provisioner.cluster.model.slurm import NodeState, parse_oneliner
from provisioner.cluster.model.wait import WaitTimeout, nodes_ready, poll_until
from provisioner.cluster.services import accounting
from provisioner.cluster.services import daemons
from provisioner.cluster.services import metrics
from provisioner.cluster.services import rest
from provisioner.render import TIMEOUTS


@dataclass
class RepairPlan:
    """What is broken: machines to start, dead daemon keys, hung slurmds, paused nodes."""

    machines: List[str] = field(default_factory=list)
    paused: List[str] = field(default_factory=list)
    dead: List[str] = field(default_factory=list)
    hung: List[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.machines or self.paused or self.dead or self.hung)


def hung_nodes(cluster: Cluster, alive: Dict[str, bool],
               states: Optional[Dict[str, NodeState]] = None) -> List[str]:
    """Nodes whose slurmd runs but does not answer slurmctld (slurmctld itself answers)."""
    if not alive.get("slurmctld"):
        return []
    states = cluster.client.node_states() if states is None else states
    if not states:
        return []
    paused = paused_nodes(cluster)
    return [n for n in cluster.node_names
            if alive.get(f"slurmd:{n}") and n in states and not states[n].responding and n not in paused]


def paused_nodes(cluster: Cluster) -> List[str]:
    """The nodes `fault pause` froze, in the order they were paused."""
    return [f["node"] for f in cluster.state.faults if f.get("what") == "pause"]


def unpause(cluster: Cluster, node: str) -> bool:
    """Undo `fault pause NODE` (resume, heal, stop and the repairing up/start): unfreeze its
    container, or SIGCONT the processes the pause stopped; drop the record and save the
    state. False when the node was not paused."""
    found = [f for f in cluster.state.faults if f.get("what") == "pause" and f.get("node") == node]
    for f in found:
        if f.get("machine"):
            cluster.provider.unpause_machine(cluster.state, node)
        else:
            cluster.runner(node).kill(f.get("pids") or [], signal.SIGCONT)
    if found:
        cluster.state.faults = [f for f in cluster.state.faults if f not in found]
        cluster.state.save()
    return bool(found)


def plan(cluster: Cluster) -> RepairPlan:
    st = cluster.state
    machines = machines_running(cluster.provider, st)
    paused = paused_nodes(cluster)
    p = RepairPlan(machines=[k for k, up in machines.items() if not up and k not in paused], paused=paused)
    if p.machines and len(p.machines) == len(machines):
        p.dead = list(st.pids)  # every machine is down: nothing to ask
        return p
    alive = cluster.daemons_alive()
    p.dead = [k for k, ok in alive.items() if not ok and cluster.state.runner_key(k) not in p.paused]
    p.hung = _still_hung(cluster, alive, hung_nodes(cluster, alive))
    return p


def _still_hung(cluster: Cluster, alive: Dict[str, bool], hung: List[str]) -> List[str]:
    """Of ``hung``, the nodes that really do not answer. A node slurmctld marked DOWN is
    pinged no more, so its slurmd must register again: restarting it is the cure. A node
    only flagged '*' (idle*, mixed*) may be a slurmd just resumed from SIGSTOP, or one
    that was slow on a loaded host (the soak saw node[1-3] '*' at once, with no fault):
    slurmctld pings it again within SlurmdTimeout/3 s, so wait for one more ping round
    (MessageTimeout + 2 s) before restarting a slurmd that works."""
    if not hung:
        return hung
    states = cluster.client.node_states() or {}
    maybe = [n for n in hung if n in states and not states[n].state.lower().startswith("down")]
    if not maybe:
        return hung
    timeouts = TIMEOUTS.get(cluster.spec.failure_detection, TIMEOUTS["normal"])

    def answered() -> Tuple[bool, List[str]]:
        nonlocal states, maybe
        states = cluster.client.node_states() or states
        maybe = [n for n in maybe if n in states and not states[n].responding]
        return not maybe, maybe
    try:
        poll_until(answered, timeouts["message"] + 2, first_delay=0.5, max_delay=0.5)
    except WaitTimeout:
        pass  # the nodes still in ``maybe`` stay hung: they are restarted
    recovered = set(hung) - set(maybe) - {n for n in hung if states.get(n) and
                                         states[n].state.lower().startswith("down")}
    return [n for n in hung if n not in recovered]


# slurmctld's agent retries a message that a node did not take (agent.c: RPC_RETRY_INTERVAL,
# 60 s, not configurable). A job step's kill sent to a node that had just died is one: if
# the node's slurmd is restarted and the requeued job runs there again within that minute,
# the retried REQUEST_SIGNAL_TASKS for "StepId=N.0" reaches the requeued run's step N.0,
# which has the same id, and SIGTERMs it (seen in slurmd's debug log: signal 991 =
# SIG_TERM_KILL, 57 s after the requeue). On a real cluster the node takes minutes to
# reboot; here it is back at once. So a restarted node stays drained until sdiag's
# "Agent queue size" (slurmctld's retry list) is empty, then is resumed.
RPC_RETRY_INTERVAL = 60
HOLD_REASON = "simcluster: waiting for slurmctld to retry messages to the restarted slurmd"


def agent_queue_size(cluster: Cluster) -> Optional[int]:
    """slurmctld's retry list length (sdiag "Agent queue size"); None if sdiag fails."""
    res = cluster.client.run(["sdiag"], timeout=10)
    for line in res.stdout.splitlines() if res.ok else []:
        if line.strip().startswith("Agent queue size:"):
            try:
                return int(line.split(":", 1)[1])
            except ValueError:
                return None
    return None


def hold_for_retried_rpcs(cluster: Cluster, nodes: List[str]) -> List[str]:
    """Drain those of ``nodes`` not drained already, when slurmctld has messages to retry;
    return the ones drained here (to be resumed by release_after_retried_rpcs)."""
    if not agent_queue_size(cluster):
        return []
    states = cluster.client.node_states() or {}
    held = [n for n in nodes if "drain" not in (states[n].state.lower() if n in states else "")]
    ok = []
    for n in held:
        res = cluster.client.run(["scontrol", "update", f"nodename={n}", "state=drain", f"reason={HOLD_REASON}"],
                                 timeout=20)
        if res.ok:
            ok.append(n)
    return ok


def release_after_retried_rpcs(cluster: Cluster, held: List[str], timeout: float) -> None:
    """Wait until slurmctld's retry list is empty (at most one retry round), then resume ``held``
    (after the round they are resumed anyway: the retries are over by then)."""
    timeouts = TIMEOUTS.get(cluster.spec.failure_detection, TIMEOUTS["normal"])
    try:
        poll_until(lambda: ((agent_queue_size(cluster) or 0) == 0, None),
                   min(timeout, RPC_RETRY_INTERVAL + 3 * timeouts["message"] + 5), first_delay=1.0, max_delay=1.0)
    except WaitTimeout:
        pass
    for n in held:
        cluster.client.run(["scontrol", "update", f"nodename={n}", "state=resume"], timeout=20)


# A node that `fault kill` crashed (Crashable) starts again as a rebooted host: a boot clock
# of its own from that start (a time namespace, providers/local/names.py). slurmctld takes a
# node whose boot time is later than its last answer for rebooted (validate_node_specs);
# with ReturnToService 0 or 1 it sets it DOWN "Node unexpectedly rebooted" and ends or
# requeues its jobs, as with a production host (with 2 it only returns it to service; srun
# learns of the lost step from the reset of its connection). Both times are whole seconds,
# and the boot time may read up to a second early: the machine starts at least
# CRASH_DOWN_S after the crash, so that its boot is always later than its last answer.
CRASH_DOWN_S = 2.0
REBOOTED_REASON = "Node unexpectedly rebooted"


def _crashed_at(cluster: Cluster) -> Dict[str, float]:
    """{node: when it crashed} of the nodes `fault kill` took down with their machine."""
    return {f["node"]: float(f.get("since") or 0) for f in cluster.state.faults
            if f.get("what") == "kill" and f.get("machine")}


def _slurmd_start_times(cluster: Cluster, nodes: List[str]) -> Dict[str, str]:
    """{node: SlurmdStartTime} as slurmctld last heard it (its slurmd's registration)."""
    res = cluster.client.run(["scontrol", "show", "node", "-o", ",".join(nodes)], timeout=20)
    return {r.get("NodeName", ""): r.get("SlurmdStartTime", "") for r in parse_oneliner(res.stdout if res.ok else "")}


def wait_registered(cluster: Cluster, nodes: List[str], before: Dict[str, str], timeout: float) -> None:
    """Wait until slurmctld has the registration of the slurmd just started on each of
    ``nodes`` (its SlurmdStartTime is no longer ``before``'s, _slurmd_start_times read before
    the start): only then has it judged whether the node rebooted."""
    def registered() -> Tuple[bool, None]:
        now = _slurmd_start_times(cluster, nodes)
        return all(now.get(n) and now.get(n) != before.get(n) for n in nodes), None
    try:
        poll_until(registered, min(timeout, 60.0), first_delay=0.2, max_delay=0.5)
    except WaitTimeout:
        pass  # the wait for the nodes to answer says what is wrong


def wait_answering(cluster: Cluster, timeout: float) -> None:
    """Until every node answers slurmctld; a node slurmctld set DOWN for its reboot
    (REBOOTED_REASON, ReturnToService 0 or 1: its jobs are ended or requeued by then) is
    resumed, as heal resumes the nodes Slurm drained after a fault: the repair is what
    rebooted it."""
    states = nodes_ready(cluster, timeout, lambda s: s.responding or s.reason.startswith(REBOOTED_REASON),
                         "responding")
    rebooted = [n for n, s in states.items() if n in cluster.node_names and not s.responding]
    for n in rebooted:
        cluster.client.run(["scontrol", "update", f"nodename={n}", "state=resume"], timeout=20)
    if rebooted:
        nodes_ready(cluster, timeout, lambda s: s.responding, "responding")


def repair(cluster: Cluster, progress: Callable[[str], None], timeout: float) -> List[str]:
    """Restart what is dead or hung; return what was restarted ([] when nothing was wrong).
    The caller holds the cluster's lock (cluster/lifecycle/create.py says why)."""
    p = plan(cluster)
    if p.empty:
        return []
    up = UpRun(cluster, progress, timeout)
    c, st = cluster, cluster.state
    done: List[str] = []

    def step(what: str, action: Callable[[], None]) -> None:
        t0 = time.monotonic()
        status = "FAILED"
        try:
            action()
            status = "done"
        finally:
            st.save()
            progress(f" - {what} ... {status} ({time.monotonic() - t0:.2f}s)")

    if p.paused:
        step(f"resuming paused {', '.join(p.paused)}", lambda: [unpause(c, n) for n in p.paused])
        done += [f"{n} (resumed)" for n in p.paused]
    crashed = {n: t for n, t in _crashed_at(c).items() if n in p.machines}
    if p.machines:
        wait = max([t + CRASH_DOWN_S - time.time() for t in crashed.values()] + [0.0])
        if wait > 0:
            time.sleep(wait)  # see CRASH_DOWN_S
        step(f"starting {len(p.machines)} stopped machines", lambda: c.provider.start_machines(st, p.machines))
        done.append(f"{len(p.machines)} machines")
        if c.spec.fake_gpus and c.spec.all_gpus:
            step("making fake GPU devices", lambda: steps.make_fake_gpus(up))
    dead = set(p.dead)
    munged = [m for m in c.placement.munged_on if daemons.munged_key(m) in dead]
    if munged:
        # A socket left by a munged that died would count as "usable" at once.
        for m in munged:
            c.runner(m).run(["rm", "-f", c.paths.munge_socket], timeout=10)
        step("starting munged" + (f" on {len(munged)} machines" if len(munged) > 1 else ""),
             lambda: steps.start_munged(up, munged))
    if c.spec.accounting:
        if "mariadbd" in dead:
            c.runner().run(["rm", "-f", f"{c.paths.db_dir}/db.sock"], timeout=10)
            step(f"starting MariaDB on port {c.placement.storage_port}", lambda: accounting.start_mariadb(c))
        if "slurmdbd" in dead:
            step(f"starting slurmdbd on port {c.placement.dbd_port}", lambda: accounting.start_slurmdbd(c))
    if "slurmctld" in dead:
        step(f"starting slurmctld on port {st.controller_port} (saved state kept)", lambda: steps.start_slurmctld(up))
    if "slurmrestd" in dead:
        step("starting slurmrestd", lambda: rest.start_slurmrestd(c))
    if metrics.DAEMON in dead:
        step("starting the metrics exporter", lambda: metrics.start_exporter(c))
    if p.hung:
        step(f"killing {len(p.hung)} slurmd that do not answer ({', '.join(p.hung[:8])})",
             lambda: c.signal_daemons([f"slurmd:{n}" for n in p.hung], signal.SIGKILL))
    nodes = [n for n in c.node_names if f"slurmd:{n}" in dead or n in p.hung]
    held: List[str] = []
    if nodes and "slurmctld" not in dead:
        held = hold_for_retried_rpcs(c, nodes)
    # Before the start: slurmctld still knows the old slurmd (its SlurmdStartTime).
    known = _slurmd_start_times(c, sorted(crashed)) if crashed and "slurmctld" not in dead else {}
    if nodes:
        step(f"starting {len(nodes)} slurmd", lambda: steps.start_slurmds(up, nodes))
    if held:
        step(f"keeping {', '.join(held[:8])} out of service until slurmctld has delivered the messages it "
             f"retries to them (up to {RPC_RETRY_INTERVAL} s)", lambda: release_after_retried_rpcs(c, held, timeout))
    if known:
        step(f"waiting for slurmctld to register the rebooted {', '.join(sorted(crashed)[:8])}",
             lambda: wait_registered(c, sorted(crashed), known, timeout))
    done += sorted(k for k in dead if not k.startswith("slurmd:"))
    done += [f"slurmd:{n}" + (" (not answering)" if n in p.hung else "") for n in nodes]
    step(f"waiting for {len(c.node_names)} nodes to answer", lambda: wait_answering(c, timeout))
    if c.spec.accounting and dead & {"slurmctld", "slurmdbd", "mariadbd"}:
        step("waiting for slurmctld to register with slurmdbd", lambda: accounting.wait_registered(c, timeout))
    # The daemons a fault killed run again; pauses are undone. Drains stay (fault heal undoes
    # them), and so do GPU faults: a restart repairs no GPU (gpu-faults.json stays too).
    st.faults = [f for f in st.faults if f.get("what") in ("drain", "gpu")]
    st.phase = "running"
    st.save()
    return done
