"""`simcluster scale`: nodes join or leave a running cluster, its jobs kept.

How (the choice, and why): a *controlled reconfigure*, not Slurm's dynamic nodes. The
new nodes are written into the cluster's spec like the nodes `up` made, so everything a
job can observe on them is what it observes on any node: a name in slurm.conf and in the
cluster's hosts file, a network namespace, cgroups, /etc/slurm, GPUs in gres.conf and the
TaskProlog's GPU map, fake nvidia-smi data; and `status`, `stop`/`start`, repair and
`fault` treat them as any node, because they are in the node list those read. Dynamic
nodes (`slurmd -Z`) would be a second kind of node for every one of those to learn.

The steps of a join: the provider makes the new machines (ports, namespaces, cgroups,
containers: the Scalable capability), the configs are written again (never the munge key
or slurmdbd.conf), slurmctld is restarted *without* -c (it saves its state on SIGTERM and
recovers every queued and running job, as a repair does), the new slurmds start, and
`scontrol reconfigure` makes the running slurmds read the new node table. A leave drains
the nodes, waits for (or with --force requeues or cancels) their jobs, stops their
slurmds, and does the same reconfigure without them.

Pure planning (names, shapes, partitions, stranded jobs) is separate from the actions,
so it is unit-tested without a cluster. The caller holds the cluster's lock.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Sequence, Tuple

from provisioner.cluster.lifecycle import steps
from provisioner.cluster.lifecycle.create import is_running, terminate
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.poll import WaitTimeout, poll_until
from provisioner.cluster.model.provider import Scalable
from provisioner.cluster.services import fakegpus
from provisioner.config import hostlist
from provisioner.config.types import ClusterSpec, NodeSpec, PartitionSpec
from provisioner.errors import StartupError, UsageError
from provisioner.progress import Progress
from provisioner.render import SECRET_FILES, render_all, write_files

DRAIN_REASON = "simcluster scale: leaving the cluster"
# The most nodes one local cluster's network holds (a /24: the host, the controller, the nodes).
MAX_NODES = 252


# -- planning (pure) ------------------------------------------------------------------------------
def next_names(existing: Sequence[str], count: int) -> List[str]:
    """``count`` new node names in the cluster's own pattern: after node6,node7 come node8,
    node9; names without a number get "node" and the next free number."""
    pattern = re.compile(r"^(.*?)(\d+)$")
    match = pattern.match(existing[-1]) if existing else None
    prefix = match.group(1) if match else "node"
    width = len(match.group(2)) if match and match.group(2).startswith("0") else 0
    taken = set(existing)
    numbers = [int(m.group(2)) for m in map(pattern.match, existing) if m and m.group(1) == prefix]
    n = max(numbers, default=0)
    names: List[str] = []
    while len(names) < count:
        n += 1
        name = f"{prefix}{str(n).zfill(width)}"
        if name not in taken:
            names.append(name)
    return names


def new_nodes(spec: ClusterSpec, count: int, cpus: Optional[int] = None, memory: Optional[int] = None,
              gpus: Optional[List[int]] = None) -> List[NodeSpec]:
    """``count`` nodes shaped like the cluster's last node (its CPUs, memory, GPU count and
    type, features, options), or with ``cpus``/``memory``/``gpus`` (physical ids, handed
    out evenly as `up --gpus` does; [] for none). Fake GPUs get the next free ids; a
    cluster of real GPUs needs ``gpus`` (simcluster cannot invent a physical GPU)."""
    if count < 1:
        raise UsageError(f"cannot add {count} nodes", "give --add N with N >= 1")
    if len(spec.nodes) + count > MAX_NODES:
        raise UsageError(f"{len(spec.nodes)} + {count} nodes is more than a cluster holds ({MAX_NODES})",
                         "add fewer nodes")
    like = spec.nodes[-1]
    names = next_names([n.name for n in spec.nodes], count)
    if gpus is None:
        if like.gpus and not spec.fake_gpus:
            raise UsageError(f"{like.name} has GPUs {','.join(map(str, like.gpus))}: say which GPUs the new nodes get",
                             "add --gpus IDS (physical ids, split evenly), or --gpus none")
        start = max(spec.all_gpus, default=-1) + 1
        per = len(like.gpus)
        shares = [tuple(range(start + i * per, start + (i + 1) * per)) for i in range(count)]
    else:
        if len(gpus) % count:
            raise UsageError(f"--gpus: {len(gpus)} GPUs do not split evenly over {count} new nodes",
                             f"give a multiple of {count} ids")
        clash = sorted(set(gpus) & set(spec.all_gpus))
        if clash:
            raise UsageError(f"--gpus: GPU {','.join(map(str, clash))} already belongs to a node of the cluster",
                             "give GPU ids no node has ('simcluster status' lists them)")
        per = len(gpus) // count
        shares = [tuple(gpus[i * per:(i + 1) * per]) for i in range(count)]
    return [replace(like, name=name, gpus=share, port=None, cpus=cpus or like.cpus, memory=memory or like.memory)
            for name, share in zip(names, shares)]


def grown(spec: ClusterSpec, nodes: List[NodeSpec]) -> ClusterSpec:
    """``spec`` with ``nodes`` appended, each in every partition its model (the last node
    of ``spec``) is in, as a node `up` made would be."""
    like = spec.nodes[-1].name
    names = tuple(n.name for n in nodes)
    parts = tuple(replace(p, nodes=p.nodes + names) if like in p.nodes else p for p in spec.partitions)
    return replace(spec, nodes=spec.nodes + tuple(nodes), partitions=parts)


def shrunk(spec: ClusterSpec, names: Sequence[str]) -> ClusterSpec:
    """``spec`` without the nodes ``names``; a UsageError where that leaves no node, or a
    partition with none (Slurm takes no empty partition)."""
    unknown = [n for n in names if n not in {x.name for x in spec.nodes}]
    if unknown:
        raise UsageError(f"no node {', '.join(unknown)} in cluster '{spec.name}'",
                         f"its nodes: {', '.join(n.name for n in spec.nodes)}")
    gone = set(names)
    left = tuple(n for n in spec.nodes if n.name not in gone)
    if not left:
        raise UsageError(f"removing {', '.join(names)} would leave cluster '{spec.name}' without nodes",
                         f"keep one, or take the cluster down: simcluster down --name {spec.name}")
    parts: List[PartitionSpec] = []
    for p in spec.partitions:
        kept = tuple(n for n in p.nodes if n not in gone)
        if not kept and p.nodes:
            raise UsageError(f"removing {', '.join(names)} would leave partition '{p.name}' without nodes",
                             "keep one of its nodes")
        parts.append(replace(p, nodes=kept))
    return replace(spec, nodes=left, partitions=tuple(parts))


def target(spec: ClusterSpec, nodes: int) -> Tuple[int, List[str]]:
    """--nodes K as (nodes to add, names to remove): the newest nodes (last in the spec) leave first."""
    if nodes < 1:
        raise UsageError(f"--nodes {nodes}: a cluster needs at least one node", "give --nodes 1 or more")
    have = len(spec.nodes)
    if nodes >= have:
        return nodes - have, []
    return 0, [n.name for n in spec.nodes[nodes:]]


@dataclass(frozen=True)
class Job:
    """A job as squeue lists it (SQUEUE_FORMAT)."""

    id: str
    state: str
    partition: str
    nodes: int  # allocated (running) or asked for at least (pending)
    nodelist: str
    required: Tuple[str, ...] = ()  # nodes asked for by name (-w)


SQUEUE_FORMAT = "%i|%T|%P|%D|%N|%n"


def parse_squeue(text: str) -> List[Job]:
    jobs = []
    for line in text.splitlines():
        f = line.strip().split("|")
        if len(f) == 6 and f[3].isdigit():
            required = tuple(hostlist.expand(f[5])) if f[5].strip() and f[5] != "(null)" else ()
            jobs.append(Job(id=f[0], state=f[1], partition=f[2], nodes=int(f[3]), nodelist=f[4], required=required))
    return jobs


def stranded(jobs: List[Job], spec: ClusterSpec) -> List[Tuple[Job, str]]:
    """Of ``jobs`` (pending, or about to be requeued), those that cannot run on ``spec``'s
    nodes: more nodes than their partition keeps, or a node asked for by name that is gone.
    Returns (job, why)."""
    size = {p.name: len(p.nodes) for p in spec.partitions}
    have = {n.name for n in spec.nodes}
    out = []
    for j in jobs:
        gone = [n for n in j.required if n not in have]
        # squeue shows a job submitted to several partitions as "a,b": it can run if any fits.
        room = max((size.get(p, 0) for p in j.partition.split(",")), default=0)
        if gone:
            out.append((j, f"job {j.id} asks for {','.join(gone)} by name (it is cancelled)"))
        elif j.nodes > room:
            out.append((j, f"job {j.id} asks for {j.nodes} nodes; partition '{j.partition}' would have {room}"))
    return out


# -- actions --------------------------------------------------------------------------------------
def _step(c: Cluster, progress: Progress, what: str, action: Callable[[], object]):
    """One step, said as `up` says its own: ' - what ... done (0.12s)'; the state is saved after."""
    t0 = time.monotonic()
    status = "FAILED"
    try:
        result = action()
        status = "done"
        return result
    finally:
        c.state.save()
        progress(f" - {what} ... {status} ({time.monotonic() - t0:.2f}s)")


def write_node_configs(c: Cluster) -> None:
    """Write the configs that name nodes again (slurm.conf, gres.conf, the TaskProlog, the
    hosts file, fake-GPU data) for ``c``'s spec: in place, so the nodes' bind mounts see
    them. Files with secrets (slurmdbd.conf) and the munge key are left as `up` wrote them."""
    files = render_all(c.spec, c.placement.render)
    files.update(c.placement.extra_files)
    for name in list(files):
        if name in SECRET_FILES or name == "accounts.cfg":
            del files[name]
    write_files(files, c.placement.config_dir)
    fakegpus.install(c.spec, c.placement.config_dir)  # the nvidia-smi data lists every node's GPUs


def restart_slurmctld(c: Cluster, up: steps.UpRun, grace: float = 30.0) -> None:
    """Restart slurmctld on the new slurmctld.conf, keeping every job: SIGTERM (it writes its
    state), then a start without -c (it recovers that state), as `start` and repair do."""
    terminate(c, ["slurmctld"], grace)
    steps.start_slurmctld(up)
    poll_until(lambda: (c.client.ping(), None), 30.0, first_delay=0.05, max_delay=0.2)


def reconfigure_slurmds(c: Cluster) -> None:
    """`scontrol reconfigure`: every running slurmd reads the new node table (their own
    processes keep running: jobs on them are untouched)."""
    res = c.client.run(["scontrol", "reconfigure"], timeout=30)
    if not res.ok:
        raise StartupError(f"scontrol reconfigure failed: {(res.stderr or res.stdout).strip()[-200:]}",
                           "see 'simcluster status' and the slurmctld log")


def wait_nodes(c: Cluster, new: Sequence[str], timeout: float) -> None:
    """Until the nodes in ``new`` are ready (idle or mixed) and every other node answers."""
    names = c.node_names

    def check():
        states = c.client.node_states() or {}
        bad = [n for n in names if n not in states or not (states[n].ready if n in new else states[n].responding)]
        return not bad, bad
    try:
        poll_until(check, timeout, first_delay=0.02, max_delay=0.25)
    except WaitTimeout as exc:
        bad = exc.last_seen or []
        raise StartupError(f"nodes {', '.join(bad[:8])} did not come up within {timeout:.0f}s",
                           "see 'simcluster status' and their slurmd logs (simcluster export-logs)",
                           details="\n".join(c.log_tail(f"slurmd:{n}", 10) for n in bad[:2])) from None


def _require(c: Cluster) -> Scalable:
    if not isinstance(c.provider, Scalable):
        raise UsageError(f"the {c.provider.name} backend cannot add or remove nodes of a running cluster",
                         "change the inventory and deploy again")
    if not is_running(c):
        raise UsageError(f"cluster '{c.name}' is not running", f"start it first: simcluster start --name {c.name}")
    return c.provider


def add(c: Cluster, nodes: List[NodeSpec], progress: Progress, timeout: float) -> Tuple[Cluster, str]:
    """Join ``nodes`` to running cluster ``c``; return the cluster as it is now and a summary line."""
    provider = _require(c)
    t0 = time.monotonic()
    names = [n.name for n in nodes]
    spec = grown(c.spec, nodes)
    _step(c, progress, f"making {len(names)} machines for {_short(names)}",
          lambda: provider.add_machines(c.state, spec, names, progress))
    c = Cluster(c.state, c.provider)  # the new spec and placement
    up = steps.UpRun(c, progress, timeout)
    _step(c, progress, "writing configs with the new nodes", lambda: write_node_configs(c))
    if c.spec.fake_gpus and any(c.spec.node(n).gpus for n in names):
        _step(c, progress, "making fake GPU devices", lambda: steps.make_fake_gpus(up, names))
    munged = [n for n in names if n in c.placement.munged_on]
    if munged:
        _step(c, progress, f"starting munged on {len(munged)} machines", lambda: steps.start_munged(up, munged))
    _step(c, progress, "restarting slurmctld (queued and running jobs kept)", lambda: restart_slurmctld(c, up))
    _step(c, progress, f"starting {len(names)} slurmd", lambda: steps.start_slurmds(up, names))
    _step(c, progress, "telling the running slurmds (scontrol reconfigure)", lambda: reconfigure_slurmds(c))
    _step(c, progress, f"waiting for {_short(names)} to be idle", lambda: wait_nodes(c, names, timeout))
    gpus = [g for n in names for g in c.spec.node(n).gpus]
    note = f", GPUs {','.join(map(str, gpus))}{' (fake)' if c.spec.fake_gpus else ''}" if gpus else ""
    return c, (f"cluster '{c.name}': {_short(names)} joined{note} in {time.monotonic() - t0:.2f}s; "
               f"{len(c.spec.nodes)} nodes now, every job kept")


def _jobs(c: Cluster, args: Sequence[str] = ()) -> List[Job]:
    res = c.client.run(["squeue", "-h", "-o", SQUEUE_FORMAT, *args], timeout=20)
    if not res.ok:
        raise StartupError(f"squeue failed: {(res.stderr or res.stdout).strip()[-200:]}", "see 'simcluster status'")
    return parse_squeue(res.stdout)


def _on_nodes(c: Cluster, names: Sequence[str]) -> List[Job]:
    """Jobs with processes on ``names`` (running, completing, suspended)."""
    return _jobs(c, ["-w", ",".join(names), "-t", "RUNNING,COMPLETING,SUSPENDED,CONFIGURING,STOPPED,SIGNALING"])


def _requeue_or_cancel(c: Cluster, jobs: List[Job], leaving: Sequence[str]) -> Tuple[List[str], List[str]]:
    """--force: requeue each job (it runs again elsewhere); one Slurm will not requeue
    (an interactive srun, --no-requeue) or that asked for a leaving node by name (it could
    never run again) is cancelled. Returns (requeued, cancelled)."""
    requeued, cancelled = [], []
    for j in jobs:
        res = None if set(j.required) & set(leaving) else c.client.run(["scontrol", "requeue", j.id], timeout=20)
        if res is not None and res.ok:
            requeued.append(j.id)
        else:
            c.client.run(["scancel", j.id], timeout=20)
            cancelled.append(j.id)
    return requeued, cancelled


def remove(c: Cluster, names: List[str], progress: Progress, timeout: float, force: bool = False,
           drain: bool = False) -> Tuple[Cluster, str]:
    """Take ``names`` out of running cluster ``c``: drain them, wait for their jobs (``drain``)
    or requeue/cancel them (``force``), stop their slurmds, reconfigure without them."""
    provider = _require(c)
    t0 = time.monotonic()
    spec = shrunk(c.spec, names)
    running = _on_nodes(c, names)
    if running and not (force or drain):
        ids = ", ".join(j.id for j in running[:8])
        raise UsageError(f"jobs run on {_short(names)}: {ids}",
                         "wait for them (--drain: no new job starts there, scale waits for these to end), "
                         "or --force (requeues them, or cancels those Slurm cannot requeue)")
    # Jobs that would wait for ever: queued ones, and with --force the running ones it requeues.
    pending = _jobs(c, ["-t", "PENDING"])
    stuck = stranded(pending + (running if force else []), spec)
    if stuck and not force:
        why = stuck[0][1].replace(" (it is cancelled)", "") + (f" ({len(stuck)} such jobs)" if len(stuck) > 1 else "")
        raise UsageError(f"without {_short(names)} a queued job could never run: {why}",
                         "remove fewer nodes, or add --force: jobs that ask for them by name are cancelled, "
                         "larger ones wait until nodes join again")
    notes: List[str] = []
    if stuck:
        notes.append("job(s) that cannot run on the nodes left: " + "; ".join(w for _, w in stuck[:8]))
    named = [j.id for j in pending if set(j.required) & set(names)]
    if named:  # slurmctld would drop them when it restarts; cancelled here, so it is said
        _step(c, progress, f"cancelling queued job(s) {', '.join(named)}",
              lambda: c.client.run(["scancel", *named], timeout=20))

    def drain_them() -> None:
        res = c.client.run(["scontrol", "update", f"nodename={','.join(names)}", "state=drain",
                            f"reason={DRAIN_REASON}"], timeout=20)
        if not res.ok:
            raise StartupError(f"draining {_short(names)} failed: {(res.stderr or res.stdout).strip()[-200:]}")
    _step(c, progress, f"draining {_short(names)}", drain_them)
    if running and force:
        requeued, cancelled = _step(c, progress, f"requeueing or cancelling job(s) {', '.join(j.id for j in running)}",
                                    lambda: _requeue_or_cancel(c, running, names))
        if requeued:
            notes.append(f"requeued job(s) {', '.join(requeued)}")
        if cancelled:
            notes.append(f"cancelled job(s) {', '.join(cancelled)} (not requeueable, or asked for a leaving node)")
    _step(c, progress, f"waiting for the jobs on {_short(names)} to end", lambda: _wait_empty(c, names, progress,
                                                                                        timeout if not drain else None))
    keys = [k for k in c.state.pids if c.state.runner_key(k) in names]
    _step(c, progress, f"stopping {len(names)} slurmd", lambda: terminate(c, keys))
    c.state.faults = [f for f in c.state.faults if f.get("node") not in names]
    for k in keys:
        c.state.pids.pop(k, None)
    _step(c, progress, f"removing the machines of {_short(names)}",
          lambda: provider.remove_machines(c.state, spec, names))
    c = Cluster(c.state, c.provider)
    up = steps.UpRun(c, progress, timeout)
    _step(c, progress, "writing configs without them", lambda: write_node_configs(c))
    _step(c, progress, "restarting slurmctld (queued and running jobs kept)", lambda: restart_slurmctld(c, up))
    _step(c, progress, "telling the running slurmds (scontrol reconfigure)", lambda: reconfigure_slurmds(c))
    _step(c, progress, f"waiting for {len(c.node_names)} nodes to answer", lambda: wait_nodes(c, [], timeout))
    tail = "".join(f"; {n}" for n in notes)
    return c, (f"cluster '{c.name}': {_short(names)} left in {time.monotonic() - t0:.2f}s; "
               f"{len(c.spec.nodes)} nodes now{tail}")


def _wait_empty(c: Cluster, names: Sequence[str], progress: Progress, timeout: Optional[float]) -> None:
    """Until no job has processes on ``names``; says which jobs it waits for every 10 s.
    ``timeout`` None: as long as they run (--drain waits for jobs, not a clock)."""
    last = [0.0]

    def check():
        jobs = _on_nodes(c, names)
        if jobs and time.monotonic() - last[0] >= 10:
            last[0] = time.monotonic()
            progress(f"   waiting for job(s) {', '.join(j.id + ' (' + j.state.lower() + ')' for j in jobs[:8])}")
        return not jobs, jobs
    poll_until(check, timeout if timeout is not None else float("inf"), first_delay=0.1, max_delay=1.0)


def _short(names: Sequence[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


__all__ = ["add", "grown", "new_nodes", "next_names", "parse_squeue", "remove", "shrunk", "stranded",
           "target", "write_node_configs", "Job", "MAX_NODES"]
