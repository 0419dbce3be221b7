"""Rules on GPUs: CUDA_VISIBLE_DEVICES set from a local id or rank, and processes per node
against GPUs per node."""

from __future__ import annotations

import os
import re
from typing import Iterator, List

from provisioner.check.rules.core import Context, ERROR, Edit, Finding, NOTE, WARNING, fix_text, rule
from provisioner.check.rules.helpers import (deepspeed_per_node, delete_assignment, int_value, launches, locate,
                                             step_tasks_per_node, tasks_per_node_edit)


@rule("cuda-visible-devices-override", WARNING, "CUDA_VISIBLE_DEVICES set from a local id or rank")
def rule_cuda_visible_devices(ctx: Context) -> Iterator[Finding]:
    """CUDA_VISIBLE_DEVICES overridden with a rank or local id."""
    for a in ctx.script.assignments:
        if a.name != "CUDA_VISIBLE_DEVICES" or a.value is None:
            continue
        names = {n for p in a.value.refs() for n in p.names}
        if names & {"SLURM_LOCALID", "SLURM_PROCID", "LOCAL_RANK", "SLURM_NODEID", "RANK"}:
            edits = delete_assignment(ctx, a)
            if not edits:  # `CUDA_VISIBLE_DEVICES=$SLURM_LOCALID python ...`: drop the prefix
                file = ctx.file_of(a)
                line = ctx.script.line_text(a.line, file)
                new = re.sub(r"(export\s+)?CUDA_VISIBLE_DEVICES=\S+(\s*;)?\s*", "", line, count=1)
                if new != line and new.strip() and not new.strip().startswith(("&&", "||", "|")):
                    edits = [Edit(file, a.line, a.line, new)]
            if ctx.shape.gpus_per_task:
                why = ("with --gpus-per-task each task sees only its own GPU, as device 0: ids 1 and up name GPUs "
                       "the task does not have (CUDA: invalid device ordinal)")
            else:
                why = (f"on {ctx.nodes_text()} a task's local id is not its GPU (with device cgroups id 1 does not "
                       "exist, without them tasks land on GPUs of other jobs)")
            yield ctx.finding(
                a.line, WARNING, "cuda-visible-devices-override",
                f"CUDA_VISIBLE_DEVICES={a.value.flat()} replaces the GPUs Slurm gave each task: {why}",
                ("# delete this line: Slurm sets CUDA_VISIBLE_DEVICES for every task (ask --gpus-per-task=1 "
                 "for one GPU per task)" if not edits[0].text else edits[0].text.strip()) if edits else "",
                file=ctx.file_of(a), edits=edits)

@rule("gpus-per-node-mismatch", ERROR, "processes per node vs GPUs per node")
def rule_gpus_per_node(ctx: Context) -> Iterator[Finding]:
    """Processes per node (tasks x nproc_per_node) against the GPUs per node the job asks for."""
    g = ctx.shape.gpus_per_node
    if not g:
        return
    for cmd, launch in launches(ctx):
        t = step_tasks_per_node(ctx, cmd.srun) if cmd.srun is not None else 1
        file = ctx.file_of(cmd)
        edits: List[Edit] = []
        how = ""
        if launch.spawns:
            if t > 1 or launch.kind == "deepspeed" and cmd.srun is not None and not deepspeed_per_node(launch):
                continue  # double-launch says it
            nproc = int_value(launch.opt("nproc_per_node", "num_gpus"))
            if nproc is None:
                continue
            procs = t * nproc
            idx = launch.opts.get("nproc_per_node", launch.opts.get("num_gpus", ("", 0)))[1]
            line = cmd.argv[idx].line if idx < len(cmd.argv) else cmd.line
            line = locate(ctx, file, line, r"--(nproc[_-]per[_-]node|num[_-]gpus)[= ]" + str(nproc) + r"\b")
            text = ctx.script.line_text(line, file)
            new = re.sub(r"(--(?:nproc[_-]per[_-]node|num[_-]gpus)[= ])" + str(nproc) + r"\b",
                         lambda m: m.group(1) + str(g // t), text, count=1)
            if new != text:
                edits = [Edit(file, line, line, new)]
        elif launch.kind == "python" and cmd.srun is not None and not ctx.shape.gpus_per_task:
            entry = ctx.entry(cmd)
            if entry is not None and entry.spawns:
                if entry.nprocs is None:
                    continue  # one process per GPU, started by the program itself
                procs = t * entry.nprocs
                if entry.nprocs_line and g % t == 0:
                    shown = ctx.script.entry_display(entry.path)
                    old_line = entry.nprocs_text
                    new_line = re.sub(r"(nprocs\s*=\s*)\d+", lambda m: m.group(1) + str(g // t), old_line, count=1)
                    edits = [Edit(shown, entry.nprocs_line, entry.nprocs_line, new_line)]
            else:
                procs = t
            line = cmd.line
            if entry is not None and entry.spawns:
                how = (f"{t} task{'s' if t != 1 else ''} per node, each spawning nprocs={entry.nprocs} in "
                       f"{os.path.basename(entry.path)}: ")
            if entry is None or not entry.spawns:
                edits = tasks_per_node_edit(ctx, cmd.srun, g)
        else:
            continue
        if procs == g:
            continue
        fix = fix_text(edits, line, file) if edits else ""
        if procs > g:
            yield ctx.finding(
                line, ERROR, "gpus-per-node-mismatch",
                f"{how}{procs} processes per node but {g} GPU{'s' if g != 1 else ''} per node: on {ctx.nodes_text()} "
                "ranks share a GPU (NCCL fails with 'Duplicate GPU detected')", fix, file=file, edits=edits)
        elif launch.kind == "python" and ctx.entry(cmd) is None:
            # a program check cannot read may well use several GPUs per process (tensor parallel
            # servers, DataParallel, a spawn of its own): idle GPUs are only a possibility
            prog = os.path.basename(launch.program) or "the program"
            yield ctx.finding(
                line, NOTE, "gpus-per-node-mismatch",
                f"{procs} process{'es' if procs != 1 else ''} per node for {g} GPUs per node: unless {prog} (which "
                f"check cannot read) uses several GPUs per process, {g - procs} GPU{'s' if g - procs != 1 else ''} "
                f"per node sit idle on each of {ctx.nodes_text()}", fix, file=file, edits=edits)
        else:
            yield ctx.finding(
                line, WARNING, "gpus-per-node-mismatch",
                f"{procs} process{'es' if procs != 1 else ''} per node for {g} GPUs per node: {g - procs} "
                f"GPU{'s' if g - procs != 1 else ''} per node sit idle on each of {ctx.nodes_text()}", fix,
                file=file, edits=edits)
