"""Rules on ranks: a per-task variable expanded by the batch shell (every task gets task 0's),
RANK/LOCAL_RANK exported before srun, srun python with several tasks and no RANK."""

from __future__ import annotations

import os
import re
from typing import Iterator, List, Optional, Sequence

from provisioner.check.launch import classify
from provisioner.check.options import srun_options
from provisioner.check.script import Assignment, BATCH, Command, Part, TASK
from provisioner.check.rules.core import Context, ERROR, Edit, Finding, NOTE, RANK_ENV, WARNING, fix_text, rule
from provisioner.check.rules.helpers import (delete_assignment, ignores_node_rank, ignores_node_rank_with_vars,
                                             indent_of, is_bash_c, launch_in, launch_with_vars, launches, locate,
                                             only_as_rank_opt, prog_text, rank_opt_value, srun_prefix, step_nodes,
                                             step_tasks_per_node, tainted)


_CONSEQUENCE = {
    "SLURM_NODEID": "every node claims node rank 0",
    "SLURM_PROCID": "every task claims rank 0",
    "SLURM_LOCALID": "every task on a node claims local rank 0 (and GPU 0)",
    "SLURMD_NODENAME": "every task sees the first node's name",
    "SLURM_TASK_PID": "every task sees the batch shell's pid",
}


def _vars_reaching_expanded(ctx: Context, cmd: Command) -> Optional[set]:
    """For `srun $CMD` (or `bash -c "$CMD"`): the per-task variables that reach the command $CMD
    holds anywhere but a c10d torchrun's --node_rank; None when ``cmd`` is not such a step."""
    if not cmd.argv or not any(p.kind == "var" for p in cmd.argv[0].parts):
        return None
    synth = [c for c in ctx.script.commands if c.expanded and c.srun is cmd.srun and c.line == cmd.line]
    if not synth:
        return None
    out = set()
    for c in synth:
        words = c.words()
        ignore_rank = ignores_node_rank(launch_in(words), words)
        for i, w in enumerate(c.argv):
            if ignore_rank and rank_opt_value(words, i):
                continue
            for p in w.refs(BATCH):
                found = tainted(ctx, p, c.seq)
                if found:
                    out.add(found[0])
    return out


def _expanded_value(var: str) -> str:
    return "the first node's name" if var == "SLURMD_NODENAME" else "0"


@rule("rank-var-in-batch-shell", ERROR, "per-task variable expanded by the batch shell and handed to srun's tasks")
def rule_rank_var_in_batch_shell(ctx: Context) -> Iterator[Finding]:
    """A per-task Slurm variable expanded by the batch shell, handed to a per-task command."""
    seen = set()
    for cmd in ctx.script.commands:
        if cmd.shell != TASK or cmd.srun is None:
            continue
        nodes = step_nodes(ctx, cmd.srun)
        per_node = step_tasks_per_node(ctx, cmd.srun)
        tasks = nodes * per_node
        if tasks <= 1:
            continue
        if is_bash_c(cmd) or cmd.expanded:
            continue  # the commands of its string (of the variable) are checked themselves / at the step
        words = cmd.words()
        ignore_rank = ignores_node_rank_with_vars(ctx, cmd)
        reaching = _vars_reaching_expanded(ctx, cmd)
        for i, word in enumerate(cmd.argv):
            if ignore_rank and rank_opt_value(words, i):
                continue  # c10d/etcd rendezvous: torchrun numbers the nodes itself, --node_rank is ignored
            for part in word.refs(BATCH):
                found = tainted(ctx, part, cmd.seq)
                if found is None:
                    continue
                var, chain = found
                if ignore_rank and chain and only_as_rank_opt(chain[0].value.flat(), chain[1].name if len(chain) > 1 else var):
                    continue  # `torchrun $DIST_ARGS`: it carries the rank only as --node_rank, ignored there
                if var == "SLURM_LOCALID" and per_node <= 1 or var == "SLURM_NODEID" and nodes <= 1:
                    continue  # one task per node: local id 0 is right; one node: node id 0 is right
                if reaching is not None and var not in reaching:
                    continue  # `srun $CMD`: in the command $CMD holds, only where torch ignores it
                key = (cmd.srun.seq, part.text, part.line)
                if key in seen:
                    continue
                seen.add(key)
                yield _rank_var_finding(ctx, cmd, part, var, chain, tasks)


def _rank_var_finding(ctx: Context, cmd: Command, part: Part, var: str, chain: List[Assignment],
                      tasks: int) -> Finding:
    file = ctx.file_of(cmd)
    written = part.text
    value = _expanded_value(var)
    if not chain:
        what = f"{written} is expanded once, by the batch shell on the first node, to {value}"
    elif len(chain) == 1 and _alias(chain[0], var):
        what = (f"{written} (set from ${var} at line {chain[0].line}) is expanded once, by the batch shell on "
                f"the first node, to {value}")
    else:
        via = [a for a in chain[1:] if not _alias(a, var)] + [a for a in chain[1:] if _alias(a, var)]
        through = f" (through {', '.join('$' + a.name for a in via)})" if via else ""
        # where the value names it: an array's element, an appended piece (ARGS+=(...)) has a line of its own
        start = next((p.line for p in chain[-1].value.refs(BATCH) if var in p.names), chain[-1].line) \
            if chain[-1].value is not None else chain[-1].line
        at = locate(ctx, ctx.file_of(chain[-1]), start, r"\$\{?" + re.escape(var) + r"\b")
        what = (f"{written} holds ${var}{through}, which the batch shell on the first node expands once "
                f"(line {at}), to {value}")
    message = (f"{what}: all {tasks} tasks on {ctx.nodes_text()} get {value}, so {_CONSEQUENCE.get(var, 'ranks collide')}"
               " (on one host: EADDRINUSE; on real hosts: a hang)")
    edits = _rank_var_edits(ctx, cmd, part, var, chain)
    fix = fix_text(edits, part.line, file) if edits else ""
    launch = launch_with_vars(ctx, cmd)  # also options an array or a variable carries
    if launch is not None and launch.kind in ("torchrun", "torch.distributed.launch") and "node_rank" in launch.opts \
            and var == "SLURM_NODEID":
        message += ("; or let torchrun number the nodes: --rdzv_backend=c10d "
                    "--rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT (it ignores --node_rank)")
    return ctx.finding(part.line, ERROR, "rank-var-in-batch-shell", message, fix, file=file, edits=edits)


def _alias(a: Assignment, var: str) -> bool:
    """`NODE_RANK=$SLURM_NODEID`: an assignment that only copies ``var``."""
    return a.value is not None and a.value.flat().strip('"') in (f"${var}", f"${{{var}}}")


def _rank_var_edits(ctx: Context, cmd: Command, part: Part, var: str, chain: List[Assignment]) -> List[Edit]:
    file = ctx.file_of(cmd)
    escaped = "\\$" + var
    simple = not chain or (len(chain) == 1 and _alias(chain[0], var))
    if simple and cmd.in_bash_c:
        line = ctx.script.line_text(part.line, file)
        if part.text in line:
            return [Edit(file, part.line, part.line, line.replace(part.text, escaped, 1))]
        return []
    if simple:
        text = f'{srun_prefix(cmd.srun)} bash -c "{prog_text(cmd, [(part.text, escaped)])}"'
        return [Edit(file, cmd.srun.line, cmd.srun.end_line, indent_of(ctx.script.line_text(cmd.srun.line, file))
                     + text)]
    # `srun $CMD` / `srun torchrun $ARGS` with ARGS="... $NODE_RANK ...": write the per-task variable
    # escaped where it goes into the string, and let each task's shell expand the command
    direct = chain[-1]
    if len(chain) >= 2 and _alias(direct, var):
        holder, target = chain[-2], direct.name
    else:
        holder, target = direct, var
    hfile = ctx.file_of(holder)
    inner = next((p for p in holder.value.refs(BATCH) if target in p.names), None) if holder.value else None
    if inner is None:
        return []
    hline_no = locate(ctx, hfile, inner.line, re.escape(inner.text))
    hline = ctx.script.line_text(hline_no, hfile)
    if inner.text not in hline or (hfile, hline_no) == (file, cmd.srun.line):
        return []
    edits = [Edit(hfile, hline_no, hline_no, hline.replace(inner.text, escaped, 1))]
    if not cmd.in_bash_c:
        first = ctx.script.line_text(cmd.srun.line, file)
        new_srun = indent_of(first) + f'{srun_prefix(cmd.srun)} bash -c "{prog_text(cmd)}"'
        edits.append(Edit(file, cmd.srun.line, cmd.srun.end_line, new_srun))
    return edits


@rule("rank-env-before-srun", ERROR, "RANK/LOCAL_RANK exported from SLURM_PROCID/SLURM_LOCALID before srun")
def rule_rank_env_before_srun(ctx: Context) -> Iterator[Finding]:
    """RANK/LOCAL_RANK exported from SLURM_PROCID/SLURM_LOCALID in the batch shell, then srun."""
    sruns = [c for c in ctx.script.commands if c.shell == BATCH and c.name == "srun" and c.prog_index < len(c.argv)]
    for a in ctx.script.assignments:
        if a.shell != BATCH or a.name not in RANK_ENV or a.value is None:
            continue
        if not (a.exported or (a.prefix_of is not None and a.prefix_of.name == "srun")):
            continue
        var = next((v[0] for p in a.value.refs(BATCH) for v in [tainted(ctx, p, a.seq)] if v), None)
        if var is None:
            continue
        later = [s for s in sruns if (s is a.prefix_of) or (a.prefix_of is None and s.seq > a.seq)]
        later = [s for s in later if step_nodes(ctx, s) * step_tasks_per_node(ctx, s) > 1]
        if not later:
            continue
        if _expanded_in_steps(ctx, a.name, later):
            continue  # rank-var-in-batch-shell reports it where the step's words expand it: one finding
        if a.name in ("NODE_RANK", "GROUP_RANK") and all(_step_spawns(ctx, s) for s in later):
            continue  # torchrun reads --node_rank, not NODE_RANK, and sets GROUP_RANK for its workers itself
        direct = [s for s in later if not _resets_rank(ctx, s, a.name)]
        srun = (direct or later)[0]
        tasks = step_nodes(ctx, srun) * step_tasks_per_node(ctx, srun)
        file = ctx.file_of(a)
        if direct:
            edits = _rank_env_edits(ctx, a, srun, var)
            yield ctx.finding(
                a.line, ERROR, "rank-env-before-srun",
                f"{a.name}=${var} is set in the batch shell, where {var} is 0: srun (line {srun.line}) hands "
                f"{a.name}=0 to all {tasks} tasks on {ctx.nodes_text()}, so every process claims {a.name} 0",
                fix_text(edits, a.line, file) if edits else "", file=file, edits=edits)
        else:
            edits = delete_assignment(ctx, a)
            yield ctx.finding(
                a.line, WARNING, "rank-env-before-srun",
                f"{a.name}=${var} is set in the batch shell, where {var} is 0; the launcher at line {srun.line} "
                f"sets {a.name} for its workers, but any other step gets {a.name}=0 on all {ctx.nodes_text()}",
                "# delete this line (the launcher sets it)" if edits else "", file=file, edits=edits)


def _expanded_in_steps(ctx: Context, name: str, sruns: Sequence[Command]) -> bool:
    """Whether ``name`` reaches a step's words through the batch shell (directly, or inside a
    variable built from it: `srun torchrun $DISTRIBUTED_ARGS`)."""
    for c in ctx.script.commands:
        if c.shell == TASK and c.srun in sruns:
            for w in c.argv:
                for p in w.refs(BATCH):
                    if name in p.names:
                        return True
                    found = tainted(ctx, p, c.seq)
                    if found and any(a.name == name for a in found[1]):
                        return True
    return False


def _step_spawns(ctx: Context, srun: Command) -> bool:
    for c in ctx.script.commands:
        if c.srun is srun:
            launch = classify(c.words())
            if launch is not None and launch.spawns:
                return True
    return False


def _rank_env_edits(ctx: Context, a: Assignment, srun: Command, var: str) -> List[Edit]:
    file = ctx.file_of(srun)
    task = next((c for c in ctx.script.commands if c.srun is srun and c.shell == TASK and not c.in_bash_c), None)
    if task is None:
        return []
    if is_bash_c(task):
        # srun bash -c "...": set it first thing in the string the tasks run
        line_no = locate(ctx, file, srun.line, r"-\w*c\s+[\"']")
        line = ctx.script.line_text(line_no, file)
        m = re.search(r"-\w*c\s+([\"'])", line)
        if m is None or line_no > srun.end_line:
            return []
        ref = f"${var}" if m.group(1) == "'" else f"\\${var}"
        new = line[:m.end()] + f"export {a.name}={ref}; " + line[m.end():]
        edit = Edit(file, line_no, line_no, new)
    else:
        set_it = f"export {a.name}=\\${var}; exec {prog_text(task)}"
        prefix = " ".join(w.text for w in srun.argv[:srun.prog_index])
        new = indent_of(ctx.script.line_text(srun.line, file)) + f'{prefix} bash -c "{set_it}"'
        edit = Edit(file, srun.line, srun.end_line, new)
    if a.prefix_of is srun:
        if edit.start != srun.line:
            return []
        if is_bash_c(task):
            edit = Edit(file, edit.start, edit.end, re.sub(re.escape(a.name) + r"=\S+\s+", "", edit.text, count=1))
        return [edit]
    delete = delete_assignment(ctx, a)
    if not delete or (delete[0].file, delete[0].start) == (edit.file, edit.start):
        return []
    return delete + [edit]


def _resets_rank(ctx: Context, srun: Command, name: str) -> bool:
    """Whether the step started by ``srun`` sets ``name`` itself: a spawning launcher, or an
    assignment inside its `bash -c`."""
    if _step_spawns(ctx, srun):
        return True
    return any(
        x.name == name and x.shell == TASK and _owner(ctx, x) is srun for x in ctx.script.assignments)


def _owner(ctx: Context, a: Assignment) -> Optional[Command]:
    """The srun whose `bash -c` text holds assignment ``a`` (by line range)."""
    for c in ctx.script.commands:
        if c.shell == BATCH and c.name == "srun" and c.file == a.file and c.line <= a.line <= c.end_line:
            return c
    return None


@rule("no-rank-env", WARNING, "srun python with several tasks and no RANK set")
def rule_no_rank_env(ctx: Context) -> Iterator[Finding]:
    """srun python with several tasks and no RANK anywhere: env:// initialization cannot work."""
    for cmd, launch in launches(ctx):
        if launch.kind != "python" or cmd.srun is None or cmd.in_bash_c:
            continue
        tasks = step_nodes(ctx, cmd.srun) * step_tasks_per_node(ctx, cmd.srun)
        if tasks <= 1 or any(a.name == "RANK" for a in ctx.script.assignments):
            continue
        if srun_options(cmd.srun.argv)[0].get("mpi", ("none", None))[0] not in (None, "none"):
            continue  # srun --mpi=pmix|pmi2: an MPI program gets its rank from PMI, not RANK
        if any("rank" in w.lower() for w in cmd.words()[launch.program_index + 1:]):
            continue  # the rank goes in as an argument
        entry = ctx.entry(cmd)
        if entry is not None and (entry.maps or entry.spawns or not entry.distributed):
            continue  # the program maps Slurm's variables itself (or is not distributed at all)
        prog = os.path.basename(launch.program) or "the program"
        level = WARNING
        if entry is None:
            # whether it works is up to a program check cannot read: many map SLURM_PROCID themselves
            level = NOTE
            unless = (f"whether that works depends on {prog}, which check cannot read (not found beside the "
                      "script): it works if it maps SLURM_PROCID itself or uses a framework that does")
        else:
            unless = f"{prog} reads none of them itself (no SLURM_PROCID, DeepSpeed, Lightning, Accelerate)"
        file = ctx.file_of(cmd)
        if cmd.file != ctx.script.path and cmd.srun.file != cmd.file:
            text = (f'bash -c "RANK=\\$SLURM_PROCID LOCAL_RANK=\\$SLURM_LOCALID WORLD_SIZE=\\$SLURM_NTASKS '
                    f'exec {prog_text(cmd)}"')
            edits = [Edit(file, cmd.line, cmd.end_line, indent_of(ctx.script.line_text(cmd.line, file)) + text)]
        else:
            text = (f'{srun_prefix(cmd.srun)} bash -c "RANK=\\$SLURM_PROCID LOCAL_RANK=\\$SLURM_LOCALID '
                    f'WORLD_SIZE=\\$SLURM_NTASKS exec {prog_text(cmd)}"')
            edits = [Edit(file, cmd.srun.line, cmd.srun.end_line,
                          indent_of(ctx.script.line_text(cmd.srun.line, file)) + text)]
        yield ctx.finding(
            cmd.line, level, "no-rank-env",
            f"the {tasks} tasks on {ctx.nodes_text()} get no RANK/LOCAL_RANK (Slurm sets SLURM_PROCID, not "
            f"what init_process_group('env://') reads): {unless}", fix_text(edits, cmd.line, file),
            file=file, edits=edits)
