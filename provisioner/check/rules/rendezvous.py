"""Rules on the rendezvous: MASTER_ADDR on loopback in a multi-node job, a fixed
MASTER_PORT, and $MASTER_ADDR/$MASTER_PORT used but never set."""

from __future__ import annotations

import re
from typing import Iterator, Sequence, Tuple

from provisioner.check.launch import Launch, classify
from provisioner.check.script import Assignment, BATCH, Command, TASK, Word
from provisioner.check.rules.core import (ERROR, LOOPBACK_RE, MASTER_ADDR_FIX, MASTER_PORT_FIX, WARNING, Context,
                                          Edit, Finding, fix_text, rule)
from provisioner.check.rules.helpers import delete_assignment, indent_of, is_c10d, launches, locate, whole_node


def _launch_opt_words(ctx: Context, names: Sequence[str]) -> Iterator[Tuple[Command, Launch, str, Word]]:
    for cmd, launch in launches(ctx):
        for name in names:
            if name in launch.opts:
                idx = launch.opts[name][1]
                word = cmd.argv[idx] if idx < len(cmd.argv) else None
                if word is not None:
                    value = launch.opts[name][0]
                    valword = cmd.argv[idx + 1] if "=" not in word.flat() and idx + 1 < len(cmd.argv) else word
                    yield cmd, launch, value, valword


def _insert_before(ctx: Context, cmd: Command, text: str) -> Edit:
    """An edit inserting ``text`` before the batch-shell command that runs ``cmd``."""
    outer = cmd.srun if cmd.srun is not None and cmd.srun.file == cmd.file else cmd
    file = ctx.file_of(outer)
    return Edit(file, outer.line, outer.line - 1, indent_of(ctx.script.line_text(outer.line, file)) + text)


@rule("master-addr-loopback", ERROR, "MASTER_ADDR=localhost in a multi-node job")
def rule_master_addr_loopback(ctx: Context) -> Iterator[Finding]:
    """MASTER_ADDR (or --master_addr / --rdzv_endpoint) is a loopback address in a multi-node job."""
    if not ctx.shape.multi_node:
        return
    for a in ctx.script.assignments:
        if a.name == "MASTER_ADDR" and a.value is not None and LOOPBACK_RE.match(a.value.literal() or ""):
            file = ctx.file_of(a)
            line = ctx.script.line_text(a.line, file)
            edits = [Edit(file, a.line, a.line, indent_of(line) + MASTER_ADDR_FIX)] if delete_assignment(ctx, a) else []
            yield ctx.finding(
                a.line, ERROR, "master-addr-loopback",
                f"MASTER_ADDR={a.value.literal()} is each node itself: on {ctx.nodes_text()} every node waits "
                "for a rendezvous on its own loopback (a hang until the timeout)", MASTER_ADDR_FIX,
                file=file, edits=edits)
    for cmd, launch, value, word in _launch_opt_words(ctx, ("master_addr", "rdzv_endpoint", "main_process_ip")):
        host = value.rsplit(":", 1)[0] if ":" in value and not value.startswith("[") else value
        if LOOPBACK_RE.match(host):
            file = ctx.file_of(cmd)
            where = locate(ctx, file, word.line, re.escape(host))
            word = Word(word.parts, where, word.text)
            line = ctx.script.line_text(where, file)
            edits = [Edit(file, where, where, line.replace(host, "$MASTER_ADDR", 1))]
            if ctx.script.assignment_before("MASTER_ADDR", cmd.seq) is None:
                edits.insert(0, _insert_before(ctx, cmd, MASTER_ADDR_FIX))
            yield ctx.finding(
                word.line, ERROR, "master-addr-loopback",
                f"{value} is each node itself: on {ctx.nodes_text()} every node rendezvous with itself (a hang)",
                fix_text(edits, word.line, file), file=file, edits=edits)


def _port_consumers_harmless(ctx: Context, a: Assignment) -> bool:
    """Whether every step after ``a`` is a c10d/etcd torchrun that does not use $MASTER_PORT:
    torchrun then gives its workers a MASTER_PORT of its own and the fixed one is never bound."""
    later = [c for c in ctx.script.commands if c.seq > a.seq and (classify(c.words()) is not None
                                                                 or c.name == "srun")]
    launches_after = [(c, classify(c.words())) for c in later if classify(c.words()) is not None]
    if not launches_after:
        return False
    for c, launch in launches_after:
        if not is_c10d(launch):
            return False
        if any("MASTER_PORT" in p.names for w in c.argv for p in w.refs()):
            return False
    # every srun step runs one of those launches
    for s in later:
        if s.name == "srun" and not any(c.srun is s for c, _ in launches_after):
            return False
    return True


@rule("fixed-master-port", WARNING, "a fixed MASTER_PORT")
def rule_fixed_master_port(ctx: Context) -> Iterator[Finding]:
    """A fixed MASTER_PORT: two jobs sharing a node collide on it (not on whole nodes)."""
    if whole_node(ctx):
        return
    shared = ("another job on the same first node (nodes are shared: the job does not ask for --exclusive) "
              "binds the same port, and the second fails with EADDRINUSE")
    for a in ctx.script.assignments:
        if a.name != "MASTER_PORT" or a.value is None or a.shell != BATCH:
            continue
        lit = a.value.literal()
        port = lit if lit and lit.isdigit() else None
        if port is None and len(a.value.parts) == 1 and a.value.parts[0].default \
                and a.value.parts[0].default.isdigit() and a.value.parts[0].names == ("MASTER_PORT",):
            port = a.value.parts[0].default
        if not port or _port_consumers_harmless(ctx, a):
            continue
        file = ctx.file_of(a)
        line = ctx.script.line_text(a.line, file)
        edits = [Edit(file, a.line, a.line, indent_of(line) + MASTER_PORT_FIX)] if delete_assignment(ctx, a) else []
        yield ctx.finding(
            a.line, WARNING, "fixed-master-port",
            f"MASTER_PORT={port} is the same for every job: {shared}", MASTER_PORT_FIX, file=file, edits=edits)
    for cmd, launch, value, word in _launch_opt_words(ctx, ("master_port", "main_process_port", "rdzv_endpoint")):
        port = value.rsplit(":", 1)[-1] if ":" in value or value.isdigit() else ""
        if port.isdigit():
            file = ctx.file_of(cmd)
            where = locate(ctx, file, word.line, r"(?<![\w$])" + re.escape(port) + r"(?!\w)")
            line = ctx.script.line_text(where, file)
            new = re.sub(r"(?<![\w$])" + re.escape(port) + r"(?!\w)", "$((20000 + SLURM_JOB_ID % 20000))", line,
                         count=1)
            edits = [Edit(file, where, where, new)] if new != line else []
            yield ctx.finding(
                where, WARNING, "fixed-master-port",
                f"port {port} is the same for every job: {shared}", fix_text(edits, where, file) if edits else "",
                file=file, edits=edits)


@rule("unset-launcher-variable", WARNING, "$MASTER_ADDR/$MASTER_PORT used but never set")
def rule_unset_launcher_variable(ctx: Context) -> Iterator[Finding]:
    """$MASTER_ADDR/$MASTER_PORT handed to a launcher but never set in the script."""
    if not ctx.shape.multi_node:
        return
    seen = set()
    for cmd, launch in launches(ctx):
        for name in ("master_addr", "master_port", "rdzv_endpoint", "main_process_ip", "main_process_port"):
            if name not in launch.opts:
                continue
            if name == "master_port" and launch.kind == "torchrun" and is_c10d(launch):
                continue
            idx = launch.opts[name][1]
            words = cmd.argv[idx:idx + 2]
            for w in words:
                for p in w.refs():
                    for var in p.names:
                        if var not in ("MASTER_ADDR", "MASTER_PORT") or (var, p.line) in seen:
                            continue
                        assigned = [a for a in ctx.script.assignments if a.name == var and a.shell == BATCH
                                    and a.prefix_of is None]
                        if p.shell == BATCH and not [a for a in assigned if a.seq <= cmd.seq]:
                            problem = "is never set in this script"
                        elif p.shell == TASK and assigned and not any(a.exported for a in assigned):
                            problem = f"is set at line {assigned[0].line} but not exported, so tasks do not see it"
                        elif p.shell == TASK and not assigned:
                            problem = "is never set in this script"
                        else:
                            continue
                        seen.add((var, p.line))
                        fix = MASTER_ADDR_FIX if var == "MASTER_ADDR" else MASTER_PORT_FIX
                        if assigned and problem.startswith("is set"):
                            a = assigned[0]
                            afile = ctx.file_of(a)
                            aline = ctx.script.line_text(a.line, afile)
                            edits = [Edit(afile, a.line, a.line, indent_of(aline) + "export " + aline.strip())]
                        else:
                            edits = [_insert_before(ctx, cmd, fix)]
                        file = ctx.file_of(cmd)
                        yield ctx.finding(
                            p.line, WARNING, "unset-launcher-variable",
                            f"${var} {problem}: unless the submitting shell exports it, {launch.kind} gets an "
                            f"empty value and falls back to {'127.0.0.1' if var == 'MASTER_ADDR' else '29500'}"
                            + (f": on {ctx.nodes_text()} each node rendezvous with itself" if var == "MASTER_ADDR"
                               else ""), fix_text(edits, p.line, file), file=file, edits=edits)
