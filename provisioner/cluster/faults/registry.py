"""Every fault `simcluster fault` knows, one row each (as verify's checks are rows of CHECKS),
and `fault heal`, which undoes them all.

A row says what the kind is: its verb (the command, and the ``what`` of its record in
the state), what it acts on (a node, the cluster, a job), the function that injects it,
its options, how it is undone, what `status` says of a node it is in effect on, and the
provider capability it needs. The commands (cli/fault.py), the by-name injector
(named_clusters.Injector, under the cluster's lock) and the pytest plugin's
``slurm_faults`` (testing/faults.py) are made from these rows: adding a fault kind is a
module with its inject function (and its undo, where heal's repair does not undo it),
one row here, and its test.

Every inject function takes a loaded `Cluster` and runs under the cluster's lock, which
its caller holds (the rule is in cluster/lifecycle/create.py); the job faults are the
exception (job.py says why).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from provisioner.cluster.faults import daemons, drain, gpu, job, kill, net, pause
from provisioner.cluster.lifecycle.repair import HOLD_REASON, repair
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.provider import NodeProcesses
from provisioner.cluster.model.wait import nodes_ready
from provisioner.errors import UsageError
from provisioner.progress import Progress

NODE, CLUSTER, JOB = "node", "cluster", "job"  # what a fault acts on: its command's argument


@dataclass(frozen=True)
class Param:
    """An option of a fault's command beyond its target, passed to the inject function in
    the order the row lists them: ``--reason TEXT``."""

    flag: str  # "--reason"; the inject function's parameter is the name after "--" ("in" -> seconds: dest)
    metavar: str
    help: str
    type: str = "text"  # "text", "seconds" or "int" (a whole number >= 0), "float", "choice", or "flag" (no value)
    required: bool = False
    choices: Tuple[str, ...] = ()
    default: Any = None
    dest: str = ""  # the inject function's parameter, where it is not the flag's name


@dataclass(frozen=True)
class Fault:
    verb: str  # `simcluster fault <verb>`; the ``what`` of its record; a method of Injector and slurm_faults
    target: str  # NODE (a NODE argument), CLUSTER (none) or JOB (a JOBID argument)
    inject: Callable[..., str]  # (cluster, [target], *params) -> the line the command prints
    help: str  # the command's --help; its first line is the summary
    params: Tuple[Param, ...] = ()
    undone_by: str = "heal"  # what undoes it ("resume", "heal"); "" where nothing is left to undo
    # What heal does for a record of it still in effect after the repair (which restarts the
    # daemons a fault killed and unpauses): drain -> undrain. None: the repair undoes it.
    undo: Optional[Callable[[Cluster, Dict], str]] = None
    undo_first: bool = False  # heal runs its undo before the repair (which would take the node for hung)
    node_problem: str = ""  # what `status` says of a node while it is in effect ("" for nothing)
    needs: Optional[type] = None  # the provider capability it needs (None: every backend)
    progress: bool = False  # its inject function takes progress=, for lines on standard error
    node_optional: bool = False  # a CLUSTER fault that takes an optional NODE (passed as node=)

    @property
    def method(self) -> str:
        """Its name in Python: "kill-controller" -> kill_controller."""
        return self.verb.replace("-", "_")

    @property
    def locked(self) -> bool:
        """Injected under the cluster's lock: every fault but a job's."""
        return self.target != JOB


def heal(c: Cluster, timeout: Optional[float] = 120.0, progress: Progress = lambda line: None,
         node: Optional[str] = None) -> str:
    """Undo every fault still in effect, and restart any dead daemon (the repair path).
    ``timeout`` None (or 0): the cluster's own --wait. ``node``: undo only the faults recorded
    on that node (dead daemons are restarted all the same)."""
    if c.state.phase == "stopped":
        raise UsageError(f"cluster '{c.name}' is stopped", f"start it: simcluster start --name {c.name}")
    if node is not None and node not in c.node_names:
        raise UsageError(f"unknown node '{node}' in cluster '{c.name}'")
    others = [f for f in c.state.faults if node is not None and f.get("node") != node]
    c.state.faults = [f for f in c.state.faults if all(f is not g for g in others)]
    try:
        return _heal(c, timeout, progress)
    finally:
        c.state.faults = others + c.state.faults
        c.state.save()


def _heal(c: Cluster, timeout: Optional[float], progress: Progress) -> str:
    timeout = timeout or c.spec.wait
    kinds = by_verb()
    reconnected = undo_first_faults(c)
    # Daemons first: undraining needs slurmctld.
    restarted = repair(c, progress, timeout)
    undone = reconnected + [f"restarted {what}" if not what.endswith("(resumed)") else f"resumed {what.split()[0]}"
                            for what in restarted]
    left = [(f, kinds.get(f.get("what"))) for f in c.state.faults]
    undone += [kind.undo(c, f) for f, kind in left if kind and kind.undo]
    c.state.faults = [f for f, kind in left if not (kind and kind.undo)]
    c.state.save()
    undone += _undo_slurm_drains(c)
    if undone:
        _wait_usable(c, progress, timeout, {w.split()[1] for w in undone if w.startswith("undrained ")})
    if not undone:
        return f"cluster '{c.name}': nothing to heal (no fault in effect, every daemon runs)"
    return f"cluster '{c.name}' healed: " + "; ".join(undone)


def undo_first_faults(c: Cluster) -> List[str]:
    """Undo the faults in effect whose row says ``undo_first`` (a node off the network) and
    drop their records: what heal does before its repair, and what `stop`, `start` and a
    repairing `up` do first (named_clusters), since a repair would take such a node's silent
    slurmd for hung and restart it into the same dead network, and a stop would leave a
    local node's namespace, which outlives it, without its link. The lines say what was undone."""
    kinds = by_verb()
    first = [(f, kinds[f["what"]]) for f in c.state.faults if f.get("what") in kinds and kinds[f["what"]].undo_first]
    if not first:
        return []
    undone = [kind.undo(c, f) for f, kind in first if kind.undo]
    c.state.faults = [f for f in c.state.faults if all(f is not g for g, _ in first)]
    c.state.save()
    return undone


def reboot(c: Cluster, node: str, timeout: Optional[float] = None, progress: Progress = lambda line: None) -> str:
    """`fault reboot NODE` on a cluster of this machine: the node crashes (`fault kill`) and
    comes back as a rebooted host (heal of that node: its repair starts slurmd again, Slurm
    sees the node register anew). A deployed cluster's host really reboots
    (providers/ssh/faults.py)."""
    t0 = time.monotonic()
    kill.kill_node(c, node)
    heal(c, timeout, progress, node=node)
    state = c.client.node_states(timeout=20) or {}
    now = state[node].state if node in state else "back"
    return f"rebooted {node} (killed, then started again as a rebooted host): {node} {now} after {time.monotonic() - t0:.1f}s"


FAULTS: Tuple[Fault, ...] = (
    Fault("kill", NODE, kill.kill_node,
          "SIGKILL a node's slurmd, slurmstepd and job tasks (like a crashed host; local: off its "
          "network first, and heal brings it back rebooted).", needs=NodeProcesses),
    Fault("reboot", NODE, reboot,
          """Reboot a node's host and wait until the node is back in Slurm.

    A deployed cluster (--ssh): the host really reboots (systemctl reboot); the command
    waits for SSH with a new boot id, then for the node to answer Slurm (the controller's
    host: slurmctld too). Local and docker clusters: 'fault kill' and then 'fault heal NODE',
    which starts the node again as a rebooted host.
    """,
          params=(Param("--wait", "SECONDS", "How long to wait for the host and its node  [default: 600 over "
                        "--ssh, else the cluster's --wait]", type="float", dest="timeout"),),
          undone_by="", needs=NodeProcesses, progress=True),
    Fault("pause", NODE, pause.pause_node,
          "Freeze a node: SIGSTOP its slurmd and job steps (docker: pause its container).",
          undone_by="resume", node_problem="paused by 'simcluster fault pause'", needs=NodeProcesses),
    Fault("resume", NODE, pause.resume_node, "Undo 'fault pause NODE'.", undone_by=""),
    Fault("drain", NODE, drain.drain_node,
          "Drain a node (scontrol update state=DRAIN): running jobs finish, no new ones start.",
          params=(Param("--reason", "TEXT", "Why (shown by sinfo -R and status).", required=True),),
          undo=drain.undrain),
    Fault("net", NODE, net.disconnect_node,
          "Take a node off the network, its processes running on (its eth0 down): slurmctld marks it "
          "not responding, then DOWN after SlurmdTimeout; heal brings the link back.",
          undo=net.reconnect, undo_first=True, node_problem="off the network by 'simcluster fault net'"),
    Fault("gpu", NODE, gpu.inject_gpu,
          """Make a fake GPU of NODE report a fault: an Xid, uncorrectable ECC errors, or lost.

    nvidia-smi shows it (lost: gone from -L, the table says the GPU is lost; Xid 79:
    ERR! fields; --ecc: the counts in the table and -q), the driver's line goes to the
    node's kernel log (<config dir>/kmsg/NODE), the cluster's health check (healthCheck:
    in the spec) drains the node within its interval ("gpu0: Xid 79 (GPU has fallen off
    the bus)"), and the job processes holding the GPU die where the fault kills them
    (Xid 79, 48, 74, 94, 95, 119, lost). 'fault heal [NODE]' clears it and resumes the node.

    \b
      simcluster fault gpu node1 --xid 79
      simcluster fault gpu node1 --gpu 1 --ecc 3
      simcluster fault gpu node2 --lost
    """,
          params=(Param("--gpu", "N", "The GPU's index on the node.  [default: 0]", type="int", default=0),
                  Param("--xid", "XID", "The Xid the driver reports (79: fallen off the bus, 48: double-bit ECC, "
                        "13: an application's error ...).", type="int"),
                  Param("--ecc", "N", "N uncorrectable (volatile DRAM) ECC errors.", type="int"),
                  Param("--lost", "", "The GPU falls off the bus: gone from nvidia-smi.", type="flag")),
          undo=gpu.clear_gpu, node_problem="GPU fault by 'simcluster fault gpu'"),
    Fault("kill-controller", CLUSTER, daemons.kill_controller,
          "SIGKILL slurmctld; 'fault heal', 'start' or 'up' restart it from its saved state."),
    Fault("stop-accounting", CLUSTER, daemons.stop_accounting,
          "SIGKILL slurmdbd (accounting clusters): jobs run on, records reach sacct after heal."),
    Fault("heal", CLUSTER, heal,
          """Undo every fault in effect (resume, undrain, clear GPU faults) and restart every dead daemon in place.

    With NODE: undo only the faults on that node (dead daemons are restarted all the same).
    """,
          params=(Param("--wait", "SECONDS", "How long to wait for the nodes to answer  [default: the cluster's --wait]",
                        type="float", dest="timeout"),),
          undone_by="", progress=True, node_optional=True),
    Fault("time-limit", JOB, job.time_limit,
          """Move a running job's end to about SECONDS from now (scontrol update TimeLimit).

    Its --signal then comes at its offset before the new end and it ends TIMEOUT, as a
    24-hour job does at hour 24. Slurm keeps limits in whole minutes and acts on them in
    a pass every 30 s: the signal comes up to 30 s early, the end up to 30 s late.
    """,
          params=(Param("--in", "SECONDS", "The job's new end, from now (the smallest whole-minute TimeLimit that "
                        "reaches it).", type="seconds", required=True, dest="seconds"),),
          undone_by=""),
    Fault("preempt", JOB, job.preempt,
          """Preempt a running job as Slurm would: GraceTime, the signal, then requeue or cancel.

    The mode and GraceTime are read from the cluster as slurmctld decides them
    (PreemptType preempt/qos: the job's QoS; preempt/partition_prio: its partition;
    else the cluster's PreemptMode). Done with Slurm's own commands (scancel --signal,
    scontrol requeue, scancel): sacct shows REQUEUED or CANCELLED, not PREEMPTED.
    """,
          params=(Param("--mode", "", "Requeue or cancel, whatever PreemptMode says  [default: its "
                        "QoS/partition/cluster PreemptMode]", type="choice", choices=("requeue", "cancel")),),
          undone_by="", progress=True),
)


def by_verb() -> Dict[str, Fault]:
    return {f.verb: f for f in FAULTS}


def fault_named(verb: str) -> Fault:
    """The row of ``verb`` (or its Python name, kill_controller); a one-line UsageError if none."""
    for f in FAULTS:
        if verb in (f.verb, f.method):
            return f
    raise UsageError(f"unknown fault {verb!r}", f"one of: {', '.join(f.verb for f in FAULTS)}")


def node_problems(faults: List[Dict]) -> Dict[str, str]:
    """{node: what status says of it} for the faults in effect (a state's ``faults``)."""
    kinds = by_verb()
    return {f["node"]: kinds[f["what"]].node_problem for f in faults
            if f.get("node") and f.get("what") in kinds and kinds[f["what"]].node_problem}


# -- what heal does after the repair ----------------------------------------------------------------
# Drains slurmctld sets by itself in the aftermath of a fault: a job started in the last
# seconds before slurmctld was SIGKILLed is recovered from its saved state as PENDING
# while its batch step still runs ("Duplicate jobid"), a step killed with its slurmd
# ("Kill task failed", "batch job complete failure"). Heal resumes those nodes too; a
# drain with any other reason (an admin's) is left alone. HOLD_REASON is a repair's own
# drain (repair.py), left behind only if that repair was interrupted.
SLURM_FAULT_DRAINS = ("Duplicate jobid", "Kill task failed", "batch job complete failure",
                      "Node unexpectedly rebooted", HOLD_REASON)


def _undo_slurm_drains(c: Cluster) -> List[str]:
    res = c.client.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], timeout=20)
    done: Dict[str, str] = {}
    for line in res.stdout.splitlines() if res.ok else []:
        node, _, rest = line.partition("|")
        st, _, reason = rest.partition("|")
        if "drain" in st and any(reason.startswith(r) for r in SLURM_FAULT_DRAINS) and node not in done:
            r = c.client.run(["scontrol", "update", f"nodename={node}", "state=resume"], timeout=20)
            if r.ok:
                done[node] = reason
    return [f"undrained {n} (Slurm drained it: {why})" for n, why in done.items()]


def _wait_usable(c: Cluster, progress: Progress, timeout: float, undrained: set) -> None:
    """Return once every node answers slurmctld and the nodes heal undrained take jobs (and
    complete no job any more): a node resumed from SIGSTOP or just undrained shows `idle*`
    until slurmctld's next ping, and a caller that submits right after the heal should find
    the cluster as it was. (A drain someone else set stays; such a node only has to answer.)"""
    t0 = time.monotonic()
    # Nor still completing a job a fault or a cancel killed: with proctrack/cgroup slurmstepd
    # waits for the job's cgroup to empty (its first retry a second later), and a test that
    # checks the nodes right after the heal should see them idle, as before the fault.
    def usable(s) -> bool:
        return s.responding and (s.name not in undrained or (s.ready and "completing" not in s.state.lower()))
    nodes_ready(c, min(timeout, 60.0), usable, "answering slurmctld and schedulable")
    progress(f" - waiting for {len(c.node_names)} nodes to take jobs ... done ({time.monotonic() - t0:.2f}s)")
