"""Rules on launchers: several spawning launchers per node, a multi-step job without
--kill-on-bad-exit, python -m torch.distributed.launch, and a multi-node launch the batch
shell starts without srun."""

from __future__ import annotations

import os
import re
from typing import Iterator, Optional

from provisioner.check.launch import Launch, classify, parse_nnodes
from provisioner.check.options import srun_options
from provisioner.check.script import BATCH, Command
from provisioner.check.rules.core import Context, ERROR, Edit, Finding, NOTE, WARNING, fix_text, rule
from provisioner.check.rules.helpers import (deepspeed_per_node, indent_of, launches, one_line, prog_text,
                                             step_nodes, step_tasks_per_node, tasks_per_node_edit)


@rule("double-launch", ERROR, "several tasks per node each running a spawning launcher")
def rule_double_launch(ctx: Context) -> Iterator[Finding]:
    """--ntasks-per-node > 1 with a launcher that spawns the processes itself; the DeepSpeed
    runner under srun (it starts the workers on every node itself)."""
    for cmd, launch in launches(ctx):
        if cmd.srun is None or not launch.spawns:
            continue
        t = step_tasks_per_node(ctx, cmd.srun)
        nodes = step_nodes(ctx, cmd.srun)
        file = ctx.file_of(cmd)
        if launch.kind == "deepspeed" and not deepspeed_per_node(launch) and t * nodes > 1:
            if cmd.in_bash_c or cmd.srun.file != cmd.file:
                edits = []
            else:
                first = ctx.script.line_text(cmd.srun.line, file)
                text = one_line("\n".join(ctx.script.line_text(x, file)
                                          for x in range(cmd.srun.line, cmd.srun.end_line + 1)))
                text = text[text.index(cmd.argv[0].text):] if cmd.argv[0].text in text else ""
                edits = [Edit(file, cmd.srun.line, cmd.srun.end_line, indent_of(first) + text)] if text else []
            yield ctx.finding(
                cmd.line, ERROR, "double-launch",
                f"srun starts the DeepSpeed runner in each of its {t * nodes} tasks, and each runner starts the "
                f"workers itself (on every host of its hostfile, or only on its own node without one): "
                f"{t * nodes} copies of the job whose ranks collide. Run the runner once, from the batch shell "
                "(or give each node its rank with --no_ssh --node_rank)",
                fix_text(edits, cmd.line, file) if edits else "", file=file, edits=edits)
            continue
        if t <= 1:
            continue
        nproc = launch.opt("nproc_per_node", "num_gpus", "num_processes")
        spawns = f"spawns {nproc} workers itself" if nproc and nproc.isdigit() else "spawns its own workers"
        opt = ctx.script.opt("ntasks-per-node")
        of = f" of {os.path.basename(ctx.script.path)}" if file != ctx.script.path else ""
        where = f" (#SBATCH line {opt.line}{of})" if opt and "ntasks-per-node" not in srun_options(cmd.srun.argv)[0] \
            else ""
        edits = tasks_per_node_edit(ctx, cmd.srun, 1)
        yield ctx.finding(
            cmd.line, ERROR, "double-launch",
            f"{t} tasks per node{where} each start {launch.kind}, which {spawns}: on {ctx.nodes_text()} "
            f"{t} launchers per node claim the same node rank and ranks collide",
            (fix_text(edits, cmd.line, file) + ("" if "#" in fix_text(edits, cmd.line, file) else
                                               "   # one launcher per node; it starts one process per GPU"))
            if edits else "", file=file, edits=edits)


@rule("no-kill-on-bad-exit", WARNING, "multi-node step without --kill-on-bad-exit")
def rule_kill_on_bad_exit(ctx: Context) -> Iterator[Finding]:
    """A multi-node training step without --kill-on-bad-exit."""
    if not ctx.shape.multi_node or ctx.script.exported("SLURM_KILL_BAD_EXIT"):
        return
    for cmd in ctx.script.commands:
        if cmd.shell != BATCH or cmd.name != "srun" or cmd.prog_index >= len(cmd.argv):
            continue
        if step_nodes(ctx, cmd) * step_tasks_per_node(ctx, cmd) <= 1:
            continue
        opts, _ = srun_options(cmd.argv)
        value = opts.get("kill-on-bad-exit", opts.get("K", (None, None)))[0]
        if value is not None and value != "0":
            continue
        steps = [launch for c in ctx.script.commands if c.srun is cmd for launch in [classify(c.words())] if launch]
        if not steps:
            continue
        if any(launch.kind == "deepspeed" and not deepspeed_per_node(launch) for launch in steps):
            continue  # double-launch: the runner should not run under srun at all
        if all(_elastic(launch) for launch in steps):
            continue  # elastic torchrun goes on without a node that fails: killing the step defeats it
        file = ctx.file_of(cmd)
        first = ctx.script.line_text(cmd.line, file)
        new = re.sub(r"\bsrun\b", "srun --kill-on-bad-exit=1", first, count=1)
        new = re.sub(r"\s--kill-on-bad-exit=0\b", "", new)
        edits = [Edit(file, cmd.line, cmd.line, new)]
        yield ctx.finding(
            cmd.line, WARNING, "no-kill-on-bad-exit",
            f"without --kill-on-bad-exit a rank that dies leaves the others of the {ctx.nodes_text()} running: "
            "they wait in collectives until a timeout of the program's ends them (NCCL's watchdog, where it is "
            "on) or until the job's time limit", new.strip(), file=file, edits=edits)


def _elastic(launch: Launch) -> bool:
    """torchrun that outlives a failed node: restarts allowed (--max-restarts N > 0, also as
    ${VAR:-N}) or a range of nodes (--nnodes MIN:MAX)."""
    if launch.kind != "torchrun":
        return False
    restarts = (launch.opt("max_restarts") or "0").strip("'\"")
    m = re.fullmatch(r"\$\{\w+:-(\d+)\}", restarts)
    restarts = m.group(1) if m else restarts
    nnodes = (launch.opt("nnodes") or "").strip("'\"")
    return (restarts.isdigit() and int(restarts) > 0) or re.search(r"\d:\d", nnodes) is not None


@rule("deprecated-torch-launch", WARNING, "python -m torch.distributed.launch")
def rule_deprecated_launch(ctx: Context) -> Iterator[Finding]:
    """python -m torch.distributed.launch."""
    for cmd, launch in launches(ctx):
        if launch.kind == "torch.distributed.launch":
            # It hands --local_rank to the program unless --use_env: that fails only in a program
            # whose parser does not take it. Deprecation alone breaks nothing: a note, unless the
            # program is read here and takes no --local_rank.
            level = NOTE
            why = ("torch.distributed.launch is deprecated: it passes --local_rank as an argument (a program "
                   "that reads LOCAL_RANK from the environment and does not parse it fails); use torchrun")
            entry_text = _entry_text(ctx, cmd, launch)
            if "use_env" not in launch.opts and entry_text is not None \
                    and not re.search(r"local[_-]rank", entry_text):
                level = WARNING
                why = (f"torch.distributed.launch passes --local_rank to {os.path.basename(launch.program)}, "
                       "which does not take it (its parser fails: 'unrecognized arguments'); use torchrun")
            file = ctx.file_of(cmd)
            line = ctx.script.line_text(cmd.argv[0].line, file)
            new = re.sub(r"\S*python3?(\.\d+)?\s+-m\s+torch\.distributed\.launch", "torchrun", line, count=1)
            edits = [Edit(file, cmd.argv[0].line, cmd.argv[0].line, new)] if new != line else []
            yield ctx.finding(cmd.argv[0].line, level, "deprecated-torch-launch", why,
                              new.strip() if edits else "", file=file, edits=edits)


def _entry_text(ctx: Context, cmd: Command, launch: Launch) -> Optional[str]:
    """The source of the program a launcher runs, where it is found beside the script (or where
    a resolved `cd` points), else None."""
    prog = launch.program
    if not prog or "$" in prog:
        return None
    if not prog.endswith(".py"):
        prog = prog.replace(".", os.sep) + ".py"
    for base in [cmd.cwd] if cmd.cwd else []:  # no known directory (an unresolved cd): not looked for
        path = os.path.join(base, prog)
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    return fh.read(1 << 20)
            except OSError:
                return None
    return None


def _idle(ctx: Context) -> str:
    return "the other node sits idle" if ctx.n == 2 else f"the other {ctx.n - 1} nodes sit idle"


@rule("launcher-without-srun", ERROR,
      "a multi-node launch started by the batch shell only (single-node-launch: plain python)")
def rule_launcher_without_srun(ctx: Context) -> Iterator[Finding]:
    """A multi-node launch run by the batch shell alone: it starts on the first node only."""
    if not ctx.shape.multi_node:
        return
    any_srun = any(c.name == "srun" for c in ctx.script.commands)
    plain = [c for c, launch in launches(ctx) if c.shell == BATCH and launch.kind == "python"]
    for cmd, launch in launches(ctx):
        if cmd.shell != BATCH:
            continue
        file = ctx.file_of(cmd)
        lines = [ctx.script.line_text(x, file) for x in range(cmd.line, cmd.end_line + 1)]
        if launch.kind in ("torchrun", "torch.distributed.launch", "accelerate"):
            nn = launch.opt("nnodes", "num_machines")
            lo, _ = parse_nnodes(nn)
            if "standalone" in launch.opts or lo == 1:
                continue
            more = ctx.n - 1
            new = indent_of(lines[0]) + "srun --ntasks-per-node=1 --kill-on-bad-exit=1 " + one_line("\n".join(lines))
            simple = not any(re.search(r"\|\||&&|;|\|", x.split("#")[0]) for x in lines)
            edits = [Edit(file, cmd.line, cmd.end_line, new)] if simple and not cmd.in_bash_c else []
            yield ctx.finding(
                cmd.line, ERROR, "launcher-without-srun",
                f"{launch.kind} runs only in the batch shell, on the first node: it waits for "
                f"{more} more node{'s' if more != 1 else ''}, which never start{'s' if more == 1 else ''} an "
                "agent (a hang until the rendezvous timeout)", new.strip() if edits else "", file=file,
                edits=edits)
        elif launch.kind == "deepspeed" and not any(k in launch.opts for k in ("hostfile", "H", "no_ssh")):
            nn, _ = parse_nnodes(launch.opt("num_nodes"))
            if nn == 1 or cmd.in_bash_c:
                continue
            g = ctx.shape.gpus_per_node
            slots = str(g) if g else "${SLURM_GPUS_ON_NODE:-1}"
            make = f'scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/\\$/ slots={slots}/" > hostfile'
            line = ctx.script.line_text(cmd.argv[0].line, file)
            name = cmd.argv[0].text
            new = line.replace(name, f"{name} --hostfile hostfile", 1)
            edits = [Edit(file, cmd.line, cmd.line - 1, indent_of(lines[0]) + make)]
            if new != line:
                edits.append(Edit(file, cmd.argv[0].line, cmd.argv[0].line, new))
            yield ctx.finding(
                cmd.line, WARNING, "launcher-without-srun",
                f"the DeepSpeed runner has no --hostfile: unless /job/hostfile lists the job's nodes it trains on "
                f"the first node only, and {_idle(ctx)}",
                fix_text(edits, cmd.line, file), file=file, edits=edits)
        elif launch.kind == "python" and not any_srun and cmd is plain[-1]:
            # the last python run is the job's work; earlier ones (data preparation) may well run once
            entry = ctx.entry(cmd)
            if entry is not None and entry.maps == "submitit":
                continue  # submitit submits its own jobs
            if entry is not None and (entry.maps or entry.spawns):
                run = one_line("\n".join(lines))
            else:
                run = (f'bash -c "RANK=\\$SLURM_PROCID LOCAL_RANK=\\$SLURM_LOCALID WORLD_SIZE=\\$SLURM_NTASKS '
                       f'exec {prog_text(cmd)}"')
            g = ctx.shape.gpus_per_node
            per_node = f"--ntasks-per-node={g} " if g and not ctx.shape.gpus_per_task \
                and ctx.shape.tasks_per_node != g and not (entry is not None and entry.spawns) else ""
            new = indent_of(lines[0]) + f"srun {per_node}--kill-on-bad-exit=1 " + run
            simple = not any(re.search(r"\|\||&&|;|\||&\s*$", x.split("#")[0]) for x in lines)
            edits = [Edit(file, cmd.line, cmd.end_line, new)] if simple and not cmd.in_bash_c else []
            yield ctx.finding(
                cmd.line, WARNING, "single-node-launch",
                f"runs once, on the first node: {_idle(ctx)}", new.strip() if edits else "", file=file, edits=edits)
