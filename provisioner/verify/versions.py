"""Checks of behaviour that changed between Slurm releases (docs/slurm-versions.md).

Each asserts what *this* cluster's release does, so a script that relies on one release's
behaviour is caught on a cluster of another: the check passes when the cluster behaves
as its release is documented to, and says which behaviour that is.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

from provisioner.verify.basic import MEM, lines_with, one_node
from provisioner.verify.context import VerifyContext, render_template
from provisioner.verify.outcome import CheckFailed, CheckSkipped, Outcome

# srun stopped inheriting --cpus-per-task from the allocation in 22.05 and inherits it
# again from 23.11 (SLURM_CPUS_PER_TASK is read by srun again).
INHERITS_AGAIN = (23, 11)


def release_tuple(version: str) -> Optional[Tuple[int, int]]:
    """'slurm-wlm 24.11.5' -> (24, 11); None when it names no version."""
    m = re.search(r"(\d+)\.(\d+)\.\d+", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def srun_inherits_cpus_per_task(release: Tuple[int, int]) -> bool:
    """Does srun in a batch job take the allocation's --cpus-per-task on this release?"""
    return release >= INHERITS_AGAIN or release < (22, 5)


def check_cpus_per_task(ctx: VerifyContext) -> Outcome:
    check = "basic.cpus-per-task"
    pin = one_node(ctx.spec)
    node = pin[0].split("=", 1)[1]
    if ctx.spec.node(node).cpus < 2:
        raise CheckSkipped(f"needs a node with 2 CPUs ({node} has {ctx.spec.node(node).cpus})")
    script = render_template("basic_cpus_per_task.sbatch", {"TIME": ctx.time_minutes(ctx.limit(60)), "MEM": MEM})
    job = ctx.submit(check, script, pin, name="cpt.sh")
    ctx.wait_ok(job, ctx.limit(60))
    text = ctx.read(job.output)
    version = next((ln.split(None, 1)[1] for ln in text.splitlines() if ln.startswith("VERSION ")), "")
    release = release_tuple(version)
    if release is None:
        raise CheckFailed(f"the job did not say its Slurm version: {text.strip()[:200]!r}", output=job.output)
    got = {k: v for k in ("PLAIN", "PORTABLE") for v in [next((ln.split()[1] for ln in text.splitlines()
                                                               if ln.startswith(k + " ")), "?")]}
    inherits = srun_inherits_cpus_per_task(release)
    want = {"PLAIN": "refused" if inherits else "ran", "PORTABLE": "refused"}
    rel = f"{release[0]}.{release[1]:02d}"
    if got != want:
        raise CheckFailed(f"Slurm {rel}: srun -n2 in a -n1 --cpus-per-task=2 job {got['PLAIN']} (expected "
                          f"{want['PLAIN']}), with SRUN_CPUS_PER_TASK {got['PORTABLE']} (expected refused)",
                          output=job.output)
    how = ("inherits --cpus-per-task=2 (srun -n2 refused: 4 CPUs > 2)" if inherits else
           "does not inherit --cpus-per-task (srun -n2 ran with 1 CPU per task)")
    return Outcome(f"Slurm {rel}: srun {how}; with SRUN_CPUS_PER_TASK exported it inherits (portable)")


# What `srun --gpu-bind=none` leaves in CUDA_VISIBLE_DEVICES in a --gpus-per-task=1 job
# (observed on each release simcluster runs): 22.05 hides every GPU, 24.11 and 26.05
# show every GPU of the step.
def gpu_bind_none_shows_all(release: Tuple[int, int]) -> bool:
    return release >= (24, 11)


def check_gpus_per_task(ctx: VerifyContext) -> Outcome:
    check = "basic.gpus-per-task"
    two = next((n for n in ctx.spec.nodes if len(n.gpus) >= 2 and n.cpus >= 2), None)
    with_gpu = [n for n in ctx.spec.nodes if n.gpus]
    if two is not None:  # both tasks on one node: they must get different GPUs
        args = [f"--nodelist={two.name}", "--nodes=1"]
    elif len(with_gpu) >= 2:
        args = [f"--nodelist={with_gpu[0].name},{with_gpu[1].name}", "--nodes=2", "--ntasks-per-node=1"]
    else:
        raise CheckSkipped("needs 2 GPUs: on one node, or one on each of 2 nodes (up --fake-gpus 2)")
    script = render_template("basic_gpus_per_task.sbatch", {"TIME": ctx.time_minutes(ctx.limit(60)), "MEM": MEM})
    job = ctx.submit(check, script, args, name="gpt.sh")
    ctx.wait_ok(job, ctx.limit(60))
    text = ctx.read(job.output)
    release = release_tuple(next((ln for ln in text.splitlines() if ln.startswith("VERSION ")), ""))
    if release is None:
        raise CheckFailed(f"the job did not say its Slurm version: {text.strip()[:200]!r}", output=job.output)
    rel = f"{release[0]}.{release[1]:02d}"
    env = (lines_with(text, "ENV") or [{}])[0]
    bound = {d.get("task"): (d.get("node"), d.get("cvd", "")) for d in lines_with(text, "BOUND")}
    # With device cgroups every task sees its one GPU as 0: the device it can open names it.
    constrained = ctx.target.nodes.cgroups
    gpu_of = {d.get("task"): (d.get("dev", "") if constrained else d.get("cvd", "")) for d in lines_with(text, "BOUND")}
    unbound = {d.get("task"): (d.get("node"), d.get("cvd", "")) for d in lines_with(text, "NONE")}
    problems = []
    if sorted(bound) != ["0", "1"] or any("," in g or not g for _, g in bound.values()):
        problems.append(f"--gpus-per-task=1: tasks saw {bound}, expected one GPU each")
    elif two is not None and (len(set(gpu_of.values())) != 2 or not all(gpu_of.values())
                              or any("+" in g for g in gpu_of.values())):
        problems.append(f"--gpus-per-task=1: both tasks on {two.name} saw {bound} (devices they can open: "
                        f"{gpu_of}), expected different GPUs")
    # --gpu-bind=none: every GPU of the step on the task's node (24.11+), or none (22.05).
    node_gpus = {}
    for task, (node, _) in bound.items():
        node_gpus.setdefault(node, set()).add(gpu_of.get(task, ""))
    # 22.05 leaves CUDA_VISIBLE_DEVICES unset, except where the step holds a single GPU on
    # the node: then it names that one (seen with one fake GPU per container node).
    # With device cgroups Slurm numbers the step's GPUs on a node from 0.
    def shown_ids(node: str) -> str:
        ids = sorted(node_gpus.get(node, ()))
        return ",".join(str(i) for i in range(len(ids))) if constrained else ",".join(ids)
    want_none = {t: (node, shown_ids(node))
                 if gpu_bind_none_shows_all(release) or len(node_gpus.get(node, ())) == 1
                 else (node, "empty") for t, (node, _) in bound.items()}
    # Without machines of their own (local backend) simcluster's TaskProlog sets each step's
    # CUDA_VISIBLE_DEVICES from SLURM_STEP_GPUS to physical ids, so --gpu-bind=none shows
    # the step's GPUs there on every release: only containers show Slurm's own choice.
    slurm_decides = ctx.target.gpus_renumbered
    if slurm_decides and unbound != want_none:
        problems.append(f"--gpu-bind=none: tasks saw {unbound}, expected {want_none} on {rel}")
    # 22.05 exports SLURM_GPUS_PER_TASK; 24.11 on export SLURM_TRES_PER_TASK instead.
    want_env = ({"gpus_per_task": "1", "tres_per_task": "unset"} if release < (23, 11) else
                {"gpus_per_task": "unset", "tres_per_task": "gres/gpu=1"})
    got_env = {k: env.get(k) for k in want_env}
    if got_env != want_env:
        problems.append(f"environment {got_env}, expected {want_env} on {rel}")
    if problems:
        raise CheckFailed("; ".join(problems), output=job.output)
    var = "SLURM_GPUS_PER_TASK=1" if release < (23, 11) else "SLURM_TRES_PER_TASK=gres/gpu=1"
    seen = " ".join(f"{n}:{g}" + (f" (device {gpu_of[t]})" if constrained else "")
                    for t, (n, g) in sorted(bound.items()))
    shown = (("the node's GPUs" if gpu_bind_none_shows_all(release) else "no GPU") if slurm_decides else
             "the step's GPUs (simcluster's TaskProlog maps them on this backend, not Slurm)")
    return Outcome(f"Slurm {rel}: one GPU per task ({seen}); --gpu-bind=none shows {shown}; {var}")
