"""`simcluster fault`: break a cluster on purpose, the way real clusters break, and undo it.

Every fault acts through the cluster's runners and provider, so it works the same on
every backend that can do it; each is recorded in the state (``faults``: what, node,
since) and shown by `status`, and each is reversible: `fault resume`, `fault heal`, or a
repairing `up`/`start` (dead daemons restart in place, from their saved state).

  kill NODE         SIGKILL the node's slurmd, its slurmstepd and job tasks (a crashed host;
                    local: cut off its network first, its machine down until the heal)
  pause NODE        SIGSTOP them (docker: pause the node's container); resume NODE undoes it
  kill-controller   SIGKILL slurmctld
  stop-accounting   SIGKILL slurmdbd (jobs keep running; slurmctld queues the records)
  drain NODE        scontrol update state=DRAIN reason=...
  heal              undo every fault still active and restart whatever daemon is dead

and two faults of one job, in seconds (cluster/faults/jobfaults.py has them in full):

  time-limit JOB S  its end moves to about S seconds from now: its --signal, then TIMEOUT
  preempt JOB       requeued or cancelled as its QoS/partition/cluster PreemptMode says,
                    after GraceTime and the signal

Every function here takes a loaded `Cluster` and runs under the cluster's lock, which its
caller holds: provisioner/named_clusters.py's `Injector` (used by `simcluster fault`, `verify
--suite faults` and the pytest plugin) takes the lock and loads the cluster inside it,
as `up`/`down`/`stop`/`start` do (the rule is in cluster/lifecycle/create.py). The job faults
are the exception: they change only a job, through slurmctld, never the cluster or its
state file, so their callers load the cluster without the lock (a GraceTime wait holds
up no other command), as `status` and `verify` do.
"""

from __future__ import annotations

import signal
import time
from typing import Callable, Dict, List, Optional

from provisioner.cluster.faults import jobfaults
from provisioner.cluster.model.provider import Crashable, Pausable, node_pids
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.lifecycle.repair import HOLD_REASON, repair, unpause
from provisioner.cluster.model.wait import nodes_ready
from provisioner.errors import UsageError

KINDS = ("kill", "pause", "kill-controller", "stop-accounting", "drain")


def _record(c: Cluster, what: str, node: Optional[str] = None, **extra) -> None:
    c.state.faults.append({"what": what, "node": node, "since": round(time.time(), 3), **extra})
    c.state.save()


def active(c: Cluster, what: str, node: Optional[str] = None) -> List[Dict]:
    return [f for f in c.state.faults if f.get("what") == what and (node is None or f.get("node") == node)]


def check_can_inject(c: Cluster, node: Optional[str] = None) -> None:
    """Bad input is one line, exit 2, nothing changed: an unknown node, a stopped cluster."""
    if node is not None and node not in c.node_names:
        shown = ", ".join(c.node_names[:8]) + (" ..." if len(c.node_names) > 8 else "")
        raise UsageError(f"unknown node '{node}' in cluster '{c.name}' (nodes are: {shown})")
    if c.state.phase != "running" or not any(c.daemons_alive().values()):
        raise UsageError(f"cluster '{c.name}' is stopped: nothing to inject a fault into",
                         f"start it first: simcluster start --name {c.name}")


def kill_node(c: Cluster, node: str) -> str:
    """A crashed host: its processes SIGKILLed and, where the node has a machine of its own to
    crash (Crashable), off its network first, so that nobody hears its connections close;
    the repair (heal) brings it back as a rebooted host (docs/faults.md)."""
    check_can_inject(c, node)
    pids = node_pids(c.provider, c.state, node)
    kill = lambda: c.runner(node).kill(pids, signal.SIGKILL)  # noqa: E731
    crashed = isinstance(c.provider, Crashable) and c.provider.crash_machine(c.state, node, kill)
    if not isinstance(c.provider, Crashable):
        kill()
    _record(c, "kill", node, **({"machine": True} if crashed else {}))
    return (f"killed node {node}: slurmd and {max(0, len(pids) - 1)} job processes (SIGKILL)"
            + ("; cut off the network first and its machine is down, as a crashed host" if crashed else ""))


def pause_node(c: Cluster, node: str) -> str:
    check_can_inject(c, node)
    if active(c, "pause", node):
        raise UsageError(f"node {node} is already paused", f"simcluster fault resume {node} --name {c.name}")
    if isinstance(c.provider, Pausable) and c.provider.pause_machine(c.state, node):
        _record(c, "pause", node, machine=True)
        return f"paused node {node} (its container is frozen)"
    pids = node_pids(c.provider, c.state, node)
    c.runner(node).kill(pids, signal.SIGSTOP)
    _record(c, "pause", node, pids=pids)
    return f"paused node {node}: SIGSTOP to slurmd and {max(0, len(pids) - 1)} job processes"


def resume_node(c: Cluster, node: str) -> str:
    """Undo `pause NODE` (heal, stop and the repairing up use repair.unpause directly)."""
    if not unpause(c, node):
        if node not in c.node_names:
            raise UsageError(f"unknown node '{node}' in cluster '{c.name}'")
        raise UsageError(f"node {node} is not paused", "see 'simcluster status' for the faults in effect")
    return f"resumed node {node}"


def kill_controller(c: Cluster) -> str:
    check_can_inject(c)
    if not c.signal_daemons(["slurmctld"], signal.SIGKILL):
        raise UsageError("slurmctld is not running", f"simcluster fault heal --name {c.name}")
    _record(c, "kill-controller")
    return "killed slurmctld (SIGKILL); running jobs go on, its saved state is kept for the restart"


def stop_accounting(c: Cluster) -> str:
    if not c.spec.accounting:
        raise UsageError(f"cluster '{c.name}' has no accounting", "create it with --accounting")
    check_can_inject(c)
    if not c.signal_daemons(["slurmdbd"], signal.SIGKILL):
        raise UsageError("slurmdbd is not running", f"simcluster fault heal --name {c.name}")
    _record(c, "stop-accounting")
    return "stopped slurmdbd (SIGKILL); jobs keep running, slurmctld keeps their records until it is back"


def drain_node(c: Cluster, node: str, reason: str) -> str:
    check_can_inject(c, node)
    res = c.client.run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"], timeout=20)
    if not res.ok:
        raise UsageError(f"draining {node} failed: {res.error_line()}")
    _record(c, "drain", node, reason=reason)
    return f"drained node {node} (reason: {reason})"


def time_limit(c: Cluster, job_id: str, seconds: int) -> str:
    """`fault time-limit JOB --in S`: the running job ends in about S seconds (TIMEOUT), its
    --signal at its offset before that. Needs no lock (module docstring)."""
    check_can_inject(c)
    return jobfaults.time_limit(c.client, job_id, seconds, c.name).message


def preempt(c: Cluster, job_id: str, mode: Optional[str] = None,
            progress: Callable[[str], None] = lambda line: None) -> str:
    """`fault preempt JOB [--mode requeue|cancel]`: as slurmctld's preemption does it.
    Needs no lock (module docstring)."""
    check_can_inject(c)
    return jobfaults.preempt(c.client, job_id, c.name, mode, progress)


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


def _wait_usable(c: Cluster, progress: Callable[[str], None], timeout: float, undrained: set) -> None:
    """Return once every node answers slurmctld and the nodes heal undrained take jobs (and
    complete no job any more): a
    node resumed from SIGSTOP or just undrained shows `idle*` until slurmctld's next ping,
    and a caller that submits right after the heal should find the cluster as it was.
    (A drain someone else set stays; such a node only has to answer.)"""
    t0 = time.monotonic()
    # Nor still completing a job a fault or a cancel killed: with proctrack/cgroup slurmstepd
    # waits for the job's cgroup to empty (its first retry a second later), and a test that
    # checks the nodes right after the heal should see them idle, as before the fault.
    def usable(s) -> bool:
        return s.responding and (s.name not in undrained or (s.ready and "completing" not in s.state.lower()))
    nodes_ready(c, min(timeout, 60.0), usable, "answering slurmctld and schedulable")
    progress(f" - waiting for {len(c.node_names)} nodes to take jobs ... done ({time.monotonic() - t0:.2f}s)")


def heal(c: Cluster, progress: Callable[[str], None], timeout: float) -> str:
    """Undo every fault still in effect, and restart any dead daemon (the repair path)."""
    if c.state.phase == "stopped":
        raise UsageError(f"cluster '{c.name}' is stopped", f"start it: simcluster start --name {c.name}")
    # Daemons first: undraining needs slurmctld.
    restarted = repair(c, progress, timeout)
    undone = [f"restarted {what}" if not what.endswith("(resumed)") else f"resumed {what.split()[0]}"
              for what in restarted]
    for f in active(c, "drain"):
        res = c.client.run(["scontrol", "update", f"nodename={f['node']}", "state=resume"], timeout=20)
        if not res.ok and "Invalid node state" not in res.stderr:
            raise UsageError(f"undraining {f['node']} failed: {res.error_line()}")
        undone.append(f"undrained {f['node']}")
    c.state.faults = [f for f in c.state.faults if f.get("what") != "drain"]
    c.state.save()
    undone += _undo_slurm_drains(c)
    if undone:
        _wait_usable(c, progress, timeout, {w.split()[1] for w in undone if w.startswith("undrained ")})
    if not undone:
        return f"cluster '{c.name}': nothing to heal (no fault in effect, every daemon runs)"
    return f"cluster '{c.name}' healed: " + "; ".join(undone)
