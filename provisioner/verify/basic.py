"""The basic suite: Slurm itself works on this cluster, proven with real jobs.

Each check function takes the VerifyContext and returns an Outcome (PASS) or raises
CheckFailed/CheckSkipped/JobError. The job scripts are templates in workloads/basic_*.sbatch.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

from provisioner.cluster.model.partitions import covering_partitions
from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.config.types import ClusterSpec
from provisioner.verify.accounting import check_accounting as run_accounting_check
from provisioner.verify.context import Submitted, VerifyContext, render_template
from provisioner.verify.jobs import JobError
from provisioner.verify.outcome import CheckFailed, CheckSkipped, Outcome

MEM = "32M"  # tiny: verify's jobs must fit beside whatever else runs
# The MPI job's --mem per node, where the nodes have it: two python + mpi4py + Open MPI
# tasks fit in 32 MB on cgroup v1, which counts their pages, but not on cgroup v2, whose
# memory.max also counts the kernel's memory for them (page tables, slab, socket buffers):
# in a Debian 12 VM with cgroup v2 every task there was OOM-killed.
MPI_MEM_MB = 256


def parse_kv(line: str) -> Dict[str, str]:
    """'TAG a=1 b=x y' -> {'a': '1', 'b': 'x y'}: values run until the next key=."""
    out: Dict[str, str] = {}
    key = None
    for token in line.split()[1:]:
        k, sep, v = token.partition("=")
        if sep and k.replace("_", "").isalnum():
            key = k
            out[key] = v
        elif key is not None:
            out[key] += " " + token
    return out


def lines_with(text: str, tag: str) -> List[Dict[str, str]]:
    return [parse_kv(line) for line in text.splitlines() if line.startswith(tag + " ")]


def partition_line(part: Optional[str]) -> str:
    return f"#SBATCH --partition={part}" if part else ""


def training_partition(spec: ClusterSpec, nodes: int) -> Optional[Tuple[Optional[str], List[str]]]:
    """The partition a multi-node training job uses: the default one when it is big enough."""
    for part, members in covering_partitions(spec):
        if len(members) >= nodes:
            return part, members
    for p in spec.partitions:
        if len(p.nodes) >= nodes:
            return p.name, list(p.nodes)
    return None


def one_node(spec: ClusterSpec, last: bool = False) -> List[str]:
    """sbatch arguments that keep a job on one node (of the default partition): its first,
    or with ``last`` its last node.

    For jobs that leave a file for a later job (a dependency's marker, a requeued job's
    checkpoint): on hosts without a shared filesystem (deployed clusters) the later job
    must run where the file was written. Where every node sees the job directory, the
    pin changes nothing.
    """
    part, members = covering_partitions(spec)[0]
    return [f"--nodelist={members[-1] if last else members[0]}"] + ([f"--partition={part}"] if part else [])


def expand_nodelist(ctx: VerifyContext, nodelist: str) -> List[str]:
    proc = ctx.client.run(["scontrol", "show", "hostnames", nodelist], timeout=10)
    return proc.stdout.split() if proc.returncode == 0 else []


# -- checks ---------------------------------------------------------------------------------
def check_controller(ctx: VerifyContext) -> Outcome:
    proc = ctx.client.run(["scontrol", "ping"], timeout=15)
    text = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or " is UP" not in text:
        raise CheckFailed(f"slurmctld does not answer: {text or 'no output'}", hint=ctx.target.log_hint("slurmctld"))
    return Outcome(text.splitlines()[0])


def check_nodes(ctx: VerifyContext) -> Outcome:
    states = ctx.client.node_states()
    if states is None:
        raise CheckFailed("sinfo does not answer")
    bad, seen = [], []
    for name in ctx.node_names:
        st = states.get(name)
        seen.append(f"{name}={st.state if st else 'missing'}")
        # idle, or busy with other people's jobs (mixed/allocated): all schedulable.
        if st is None or not st.ready:
            bad.append(f"{name} is {st.state if st else 'missing'}{' (' + st.reason + ')' if st and st.reason else ''}")
    if bad:
        raise CheckFailed("; ".join(bad), hint=ctx.target.log_hint("slurmd"))
    return Outcome(f"{len(ctx.node_names)} nodes ready: {' '.join(seen)}; {_interactive_step(ctx)}")


def _interactive_step(ctx: VerifyContext) -> str:
    """`srun true` on one node, before any batch job: an interactive allocation, placed by the
    allocate RPC itself (no scheduling pass needed).

    It also starts the controller's scheduling: a fresh slurmctld reads SchedulerParameters
    (batch_sched_delay=0) in its first scheduling pass only, and until then waits its
    compiled-in batch_sched_delay of 3 s before that pass; this step's end (its node's
    epilog-complete message) runs the pass at once, so the batch jobs after it start within
    the second instead of 3 s after slurmctld started (docs/benchmarks-verify.md). On a
    busy cluster (--immediate: no free CPU now) it is left out and says so."""
    args = one_node(ctx.spec)
    node = args[0].split("=", 1)[1]
    t0 = time.monotonic()
    # --chdir=/tmp: every node has it (a deployed cluster's nodes lack the run directory).
    proc = ctx.client.run(["srun", "--immediate=5", "-N1", "-n1", f"--mem={MEM}", "--time=1",
                           f"--job-name={ctx.job_prefix}-basic.nodes", "--chdir=/tmp",
                           *args, "true"], timeout=30)
    took = time.monotonic() - t0
    err = " ".join((proc.stderr or "").split())[:300]
    if proc.returncode == 0:
        return f"an interactive srun ran a step on {node} ({took:.1f} s)"
    if "Unable to allocate resources" in err or "Immediate execution impossible" in err:
        return f"no interactive srun: {node} has no free CPU now ({err})"
    raise CheckFailed(f"sinfo shows the nodes ready, but `srun -N1 true` on {node} exited {proc.returncode}: "
                      f"{err or 'no output'}", hint=ctx.target.log_hint("slurmd"))


def check_srun_env(ctx: VerifyContext) -> Outcome:
    check = "basic.srun-env"
    jobs: List[Tuple[List[str], Submitted]] = []
    # Two tasks per node make SLURM_LOCALID meaningful. --overcommit charges one CPU per
    # node, but Slurm still waits for two free ones: a 1-CPU node gets one task.
    per_node = 2 if min(n.cpus for n in ctx.spec.nodes) >= 2 else 1
    for part, nodes in covering_partitions(ctx.spec):
        script = render_template("basic_env.sbatch", {
            "NODES": len(nodes), "TASKS_PER_NODE": per_node, "TIME": ctx.time_minutes(ctx.limit(60)), "MEM": MEM,
            "PARTITION_LINE": partition_line(part)})
        jobs.append((nodes, ctx.submit(check, script, [f"--nodelist={','.join(nodes)}"], name=f"env-{part or 'none'}.sh")))
    notes = []
    for nodes, job in jobs:
        ctx.wait_ok(job, ctx.limit(60))
        problems = _env_problems(ctx, job, nodes, per_node)
        if problems:
            raise CheckFailed("; ".join(problems[:6]), output=job.output)
        notes.append(f"{len(nodes) * per_node} tasks on {len(nodes)} nodes")
    return Outcome(", ".join(notes) + ": PROCID/NODEID/LOCALID/NTASKS/JOB_NODELIST right in batch and step; "
                   "the first node's name resolves; no GPU without --gres")


def _env_problems(ctx: VerifyContext, job: Submitted, nodes: List[str], per_node: int) -> List[str]:
    total = len(nodes) * per_node
    batch = lines_with(ctx.read(job.output), "BATCH")
    tasks = lines_with(ctx.read(job.output), "TASK")
    problems: List[str] = []
    if len(batch) != 1:
        return [f"expected one BATCH line, got {len(batch)}"]
    b = batch[0]
    order = expand_nodelist(ctx, b.get("nodelist", ""))
    if sorted(order) != sorted(nodes):
        problems.append(f"SLURM_JOB_NODELIST={b.get('nodelist')} expands to {order}, expected {nodes}")
    want = {"job": job.job_id, "num_nodes": str(len(nodes)), "ntasks": str(total), "submit_dir": ctx.cluster_path(job.workdir)}
    for key, value in want.items():
        if b.get(key) != value:
            problems.append(f"batch step: {key}={b.get(key)!r}, expected {value!r}")
    if order and b.get("node") != order[0]:
        problems.append(f"batch step ran on {b.get('node')}, expected the first node {order[0]}")
    if len(tasks) != total:
        problems.append(f"srun step: {len(tasks)} tasks answered, expected {total}")
        return problems
    procids = sorted(int(t.get("procid", -1)) for t in tasks)
    if procids != list(range(total)):
        problems.append(f"SLURM_PROCID values {procids}, expected 0..{total - 1}")
    localids: Dict[str, List[int]] = {}
    for t in tasks:
        node = t.get("node", "?")
        for key, value in (("job", job.job_id), ("ntasks", str(total)), ("nodelist", b.get("nodelist")),
                           ("num_nodes", str(len(nodes)))):
            if t.get(key) != value:
                problems.append(f"task {t.get('procid')} on {node}: {key}={t.get(key)!r}, expected {value!r}")
        if order and node in order and t.get("nodeid") != str(order.index(node)):
            problems.append(f"task {t.get('procid')} on {node}: SLURM_NODEID={t.get('nodeid')}, expected {order.index(node)}")
        if t.get("procid", "").isdigit() and order and node != order[min(int(t["procid"]) // per_node, len(order) - 1)]:
            problems.append(f"task {t['procid']} ran on {node}, block distribution puts it on {order[int(t['procid']) // per_node]}")
        localids.setdefault(node, []).append(int(t.get("localid", -1)))
        if t.get("cvd") not in ("", "unset"):
            problems.append(f"task {t.get('procid')} on {node}: a job without --gres sees CUDA_VISIBLE_DEVICES={t.get('cvd')!r}")
        if not t.get("master"):
            problems.append(f"task {t.get('procid')} on {node}: the first node's name does not resolve")
    for node, ids in localids.items():
        if sorted(ids) != list(range(per_node)):
            problems.append(f"{node}: SLURM_LOCALID values {sorted(ids)}, expected 0..{per_node - 1}")
    return problems


def check_gpus(ctx: VerifyContext) -> Outcome:
    check = "basic.gpus"
    groups: Dict[Tuple[Optional[str], int], List[str]] = {}
    for part, members in covering_partitions(ctx.spec):
        for name in members:
            n = len(ctx.spec.node(name).gpus)
            if n:
                groups.setdefault((part, n), []).append(name)
    if not groups:
        raise CheckSkipped("no node has GPUs (up --gpus or --fake-gpus gives them)")
    jobs = []
    for (part, count), nodes in groups.items():
        script = render_template("basic_gpus.sbatch", {"NODES": len(nodes), "GPUS": count, "MEM": MEM,
                                                      "TIME": ctx.time_minutes(ctx.limit(60)),
                                                      "PARTITION_LINE": partition_line(part)})
        jobs.append((nodes, ctx.submit(check, script, [f"--nodelist={','.join(nodes)}"], name=f"gpus-{part or 'none'}-{count}.sh")))
    seen = []
    for nodes, job in jobs:
        ctx.wait_ok(job, ctx.limit(60))
        problems = []
        steps = {d.get("node"): d.get("cvd") for d in lines_with(ctx.read(job.output), "STEP")}
        batch = lines_with(ctx.read(job.output), "BATCH")
        for name in nodes:
            want = ctx.target.visible_gpus(name)
            if steps.get(name) != want:
                problems.append(f"{name}: a step with its GPUs sees CUDA_VISIBLE_DEVICES={steps.get(name)!r}, expected {want!r}")
            seen.append(f"{name}={want}")
        if batch:
            bnode = batch[0].get("node")
            want = ctx.target.visible_gpus(bnode) if bnode in ctx.node_names else None
            if batch[0].get("cvd") != want:
                problems.append(f"batch step on {bnode}: CUDA_VISIBLE_DEVICES={batch[0].get('cvd')!r}, expected {want!r}")
        if problems:
            raise CheckFailed("; ".join(problems[:6]), output=job.output)
    fake = " (fake)" if ctx.spec.fake_gpus else ""
    kind = ("GPU ids (each node holds only its own GPUs, numbered from 0)" if ctx.target.gpus_renumbered
            else "physical GPU ids")
    return Outcome(f"{kind}{fake} in batch and srun steps: {' '.join(seen)}")


def check_sbatch_output(ctx: VerifyContext) -> Outcome:
    check = "basic.sbatch-output"
    workdir = ctx.check_dir(check)
    script = render_template("basic_output.sbatch", {"TIME": ctx.time_minutes(ctx.limit(60)), "MEM": MEM,
                                                    "ERROR": ctx.cluster_path(workdir / "err-%j.txt")})
    job = ctx.submit(check, script, output="out-%j.txt")
    ctx.wait_ok(job, ctx.limit(60))
    err = workdir / f"err-{job.job_id}.txt"
    try:
        out_text, err_text = ctx.files.read_text(job.output), ctx.files.read_text(err)
        assert out_text is not None and err_text is not None
    except AssertionError:
        raise CheckFailed(f"output file missing: {job.output.name} or {err.name}", output=job.output)
    if f"stdout of job {job.job_id}" not in out_text or f"stderr of job {job.job_id}" not in err_text:
        raise CheckFailed(f"unexpected contents: stdout={out_text.strip()!r} stderr={err_text.strip()!r}", output=job.output)
    return Outcome(f"--output and --error (%j={job.job_id}) written: {job.output.name}, {err.name}")


def check_mpi(ctx: VerifyContext) -> Outcome:
    """An allreduce across two nodes with `srun --mpi=pmix` (docs/fidelity.md#mpi); SKIP where the
    Slurm build has no pmix plugin (docs/slurm-versions.md)."""
    check = "basic.mpi"
    chosen = training_partition(ctx.spec, 2)
    if chosen is None:
        raise CheckSkipped("needs 2 nodes in one partition")
    part, members = chosen
    nodes = members[:2]
    per_node = 2 if min(ctx.spec.node(n).cpus for n in nodes) >= 2 else 1
    mem = f"{max(32, min([MPI_MEM_MB] + [ctx.spec.node(n).memory for n in nodes]))}M"
    script = render_template("basic_mpi.sbatch", {
        "NODES": 2, "TASKS_PER_NODE": per_node, "TIME": ctx.time_minutes(ctx.limit(90)), "MEM": mem,
        "PARTITION_LINE": partition_line(part)})
    job = ctx.submit(check, script, [f"--nodelist={','.join(nodes)}"], name="mpi.sh")
    hint = ("the nodes need libpmix-dev, openmpi-bin and python3-mpi4py (make setup; "
            "simcluster image build for containers; simcluster deploy installs them)")
    try:
        ctx.wait_ok(job, ctx.limit(90))
    except JobError as exc:
        raise CheckFailed(f"{exc}; {hint}", output=job.output)
    text = ctx.read(job.output)
    # "MPITYPES MPI plugin types are... pmix none cray_shasta pmi2 specific pmix plugin ..."
    listed = next((line.split("are...", 1)[-1] for line in text.splitlines() if line.startswith("MPITYPES ")), "")
    offered = " ".join(listed.split("specific", 1)[0].split())
    nopmix = next((line.split(None, 1)[-1] for line in text.splitlines() if line.startswith("NOPMIX ")), None)
    if nopmix is not None:
        # A missing plugin is the Slurm build's choice (Debian's 26.05.5 dropped PMIx), not a
        # cluster fault: no srun MPI type can start Debian's Open MPI 5+ without it.
        raise CheckSkipped(f"{nopmix.strip()} has no mpi_pmix plugin (srun --mpi=list: {offered}) and "
                           "Open MPI 5+ needs PMIx: use mpirun in the allocation (docs/slurm-versions.md)")
    if any(line.startswith("NOMPI4PY ") for line in text.splitlines()):
        raise CheckSkipped(f"Open MPI or python3's mpi4py is not installed on the nodes: {hint}")
    # Only the last attempt's ranks count (the script retries once after an Open MPI crash).
    last = text.rsplit("\nMPIRETRY ", 1)[-1] if "\nMPIRETRY " in text else text
    ranks = lines_with(last, "MPI")
    size = 2 * per_node
    want = str(size * (size + 1) // 2)
    problems = [f"rank {r.get('rank')}: sum={r.get('sum')}, expected {want}" for r in ranks if r.get("sum") != want]
    if sorted(r.get("rank", "") for r in ranks) != sorted(str(i) for i in range(size)):
        problems.append(f"{len(ranks)} ranks answered, expected {size}")
    if any(r.get("nodes") != ",".join(sorted(nodes)) for r in ranks):
        problems.append(f"the ranks did not span {', '.join(nodes)}")
    if problems:
        raise CheckFailed("; ".join(problems[:4]) + f"; {hint}", output=job.output)
    retried = len([line for line in text.splitlines() if line.startswith("MPIRETRY ")])
    again = f"; after {retried} failed attempt (Open MPI crashed; docs/fidelity.md)" if retried else ""
    return Outcome(f"srun --mpi=pmix: {size} ranks on {' and '.join(nodes)}, allreduce sum={want} on every rank "
                   f"(srun --mpi=list: {offered}){again}")


def check_array(ctx: VerifyContext) -> Outcome:
    check, count = "basic.array", 4
    script = render_template("basic_array.sbatch", {"ARRAY": f"0-{count - 1}", "TIME": ctx.time_minutes(ctx.limit(60)),
                                                   "MEM": MEM})
    job = ctx.submit(check, script, output="array-%A_%a.out")
    ctx.wait_ok(job, ctx.limit(60))
    problems, tasks = [], []
    for i in range(count):
        path = job.workdir / f"array-{job.job_id}_{i}.out"
        found = lines_with(ctx.read(path), "ARRAY")
        if not found:
            problems.append(f"task {i}: no output ({path.name})")
            continue
        d = found[0]
        want = {"array_job": job.job_id, "task": str(i), "count": str(count), "min": "0", "max": str(count - 1)}
        wrong = {k: d.get(k) for k, v in want.items() if d.get(k) != v}
        if wrong:
            problems.append(f"task {i}: {wrong}, expected {want}")
        tasks.append(d.get("job"))
    if len(set(tasks)) != len(tasks):
        problems.append(f"array tasks share SLURM_JOB_ID: {tasks}")
    if problems:
        raise CheckFailed("; ".join(problems[:6]), output=job.workdir / f"array-{job.job_id}_0.out")
    return Outcome(f"{count} tasks, SLURM_ARRAY_JOB_ID={job.job_id}, TASK_ID 0..{count - 1}, COUNT/MIN/MAX right")


def check_dependency(ctx: VerifyContext) -> Outcome:
    check = "basic.dependency"
    limit = ctx.limit(60)
    text = render_template("basic_dependency.sbatch", {"TIME": ctx.time_minutes(limit), "MEM": MEM})
    # The child reads the marker its parent wrote: both on one node.
    parent = ctx.submit(check, text, one_node(ctx.spec), env={"ROLE": "parent"}, name="parent.sh")
    child = ctx.submit(check, text, [f"--dependency=afterok:{parent.job_id}", *one_node(ctx.spec)],
                       env={"ROLE": "child"}, name="child.sh")
    failing = ctx.submit(check, text, env={"ROLE": "failing-parent"}, name="failing-parent.sh")
    orphan = ctx.submit(check, text, [f"--dependency=afterok:{failing.job_id}"], env={"ROLE": "child-of-failed"},
                        name="child-of-failed.sh")
    ctx.wait_ok(child, limit)
    if "CHILD ran after" not in ctx.read(child.output):
        raise CheckFailed("the afterok child did not see its parent's result", output=child.output)
    view = ctx.wait(failing, limit)
    if view.states != ["FAILED"]:
        raise CheckFailed(f"the failing parent ended {view.summary}, expected FAILED", output=failing.output)

    def never(v) -> bool:
        return v.finished or any(t.reason == "DependencyNeverSatisfied" for t in v.tasks.values())
    view = ctx.wait(orphan, 20, until=never)
    ctx.client.scancel(orphan.job_id)
    if "CHILD-OF-FAILED ran" in ctx.read(orphan.output):
        raise CheckFailed("a job with --dependency=afterok on a FAILED parent ran anyway", output=orphan.output)
    return Outcome(f"afterok:{parent.job_id} ran only after its parent; afterok on a failed parent stays "
                   f"pending ({view.summary}) and never runs")


def check_signal(ctx: VerifyContext) -> Outcome:
    check, minutes, sig_time = "signals.time-limit", 1, 50
    script = render_template("basic_signal.sbatch", {"TIME": minutes, "SIG_TIME": sig_time, "MEM": MEM})
    job = ctx.submit(check, script)
    # Slurm acts on time limits every 30 s: the signal comes within ~30 s of the start,
    # the kill at most ~30 s after the limit. Wait past both before calling it a hang.
    view = ctx.wait(job, ctx.limit(minutes * 60 + 45))
    text = ctx.read(job.output)
    got = [line for line in text.splitlines() if line.startswith("GOT SIGUSR1")]
    if not got:
        raise CheckFailed(f"the batch script never got SIGUSR1 (job {view.summary})", output=job.output)
    if view.states != ["COMPLETED"]:
        raise CheckFailed(f"SIGUSR1 came but the job ended {view.summary}", output=job.output)
    return Outcome(f"--signal=B:USR1@{sig_time} with --time={minutes}: {got[0][4:]}")


def follow_requeued(ctx: VerifyContext, job: Submitted, limit: float) -> Tuple[str, int]:
    """Follow a job that requeues itself (or is requeued) to its end: (final state, restarts).

    Once it is pending again with its checkpoint written, it is released at once: Slurm
    holds a requeued job back for the credential lifetime (AuthInfo cred_expire, 120 s by
    default) before it may start again. Used by basic.requeue and signals.preempt."""
    ckpt = job.workdir / "checkpoint.txt"
    released = False
    requeued_at: Optional[float] = None  # wall clock when the job was first seen requeued
    state, restarts = "?", 0
    final = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")

    def ended() -> Tuple[bool, str]:
        nonlocal state, restarts, released, requeued_at
        if ctx.tracker.stopped:
            return True, state
        info = ctx.client.show_job(job.job_id)
        state, restarts = info.get("JobState", "?"), int(info.get("Restarts", "0") or 0)
        if state in final:
            return True, state
        if restarts >= 1 and requeued_at is None:
            # Restarts counts up when slurmctld requeues the job and sends the kill: the
            # kill is at most this old (plus the few ms its message takes to the node).
            requeued_at = time.time()
        if not released and state == "PENDING" and restarts >= 1 and ctx.files.exists(ckpt):
            # Slurm holds a requeued job back for the credential lifetime (AuthInfo
            # cred_expire, 120 s by default) before it may start again: release it, but
            # not within the second of the requeue. slurmd refuses a job whose credential
            # is not newer, in whole seconds, than the kill ("Job N already killed, do
            # not launch batch job"), and the job then ends FAILED. 0.25 s covers the
            # kill message's way to the node; released at the next whole second after.
            if time.time() >= int(requeued_at + 0.25) + 1.05:
                ctx.client.run(["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"], timeout=10)
                released = True
        return False, state
    try:
        # Polled often: the requeue is seen within 0.1 s, so the release comes at the first
        # second it may (one scontrol call per poll, for the 1-2 s the check takes).
        poll_until(ended, limit, first_delay=0.1, max_delay=0.1)
    except WaitTimeout:
        pass
    if state not in final:  # timed out, or verify was interrupted
        ctx.client.scancel(job.job_id)
        raise JobError(f"timed out after {limit:.0f}s (state {state}, restarts {restarts}); cancelled it", job.output)
    return state, restarts


def check_requeue(ctx: VerifyContext) -> Outcome:
    check = "basic.requeue"
    limit = ctx.limit(60)
    script = render_template("basic_requeue.sbatch", {"TIME": ctx.time_minutes(limit), "MEM": MEM})
    # The second run reads the checkpoint the first wrote: both runs on one node, the last
    # one: the first holds basic.dependency's parent, and Slurm's kill of the first run
    # holds its CPU for ~1.7 s (docs/benchmarks-verify.md).
    job = ctx.submit(check, script, one_node(ctx.spec, last=True))
    state, restarts = follow_requeued(ctx, job, limit)
    text = ctx.read(job.output)
    first = [line for line in text.splitlines() if line.startswith("FIRST RUN")]
    resumed = [line for line in text.splitlines() if line.startswith("RESUMED")]
    if state != "COMPLETED" or not first or not resumed:
        raise CheckFailed(f"job ended {state} after {restarts} restart(s); first run seen: {bool(first)}, "
                          f"resumed: {bool(resumed)}", output=job.output)
    d = parse_kv(resumed[-1])
    if d.get("restart_count") != "1" or d.get("step") != "42":
        raise CheckFailed(f"second run did not resume from the checkpoint: {resumed[-1]}", output=job.output)
    return Outcome(f"job {job.job_id} requeued once (SLURM_RESTART_COUNT=1) and resumed from step=42")



def check_accounting(ctx: VerifyContext) -> Outcome:
    """Accounting clusters: a tiny job reaches slurmdbd and sacct shows it COMPLETED."""
    ok, detail = run_accounting_check(ctx.client, ctx.spec, timeout=ctx.limit(60))
    if not ok:
        raise CheckFailed(detail, hint=ctx.target.log_hint("slurmdbd"))
    return Outcome(detail)
