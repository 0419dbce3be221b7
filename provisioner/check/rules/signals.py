"""Rules on signals: --signal without B: while the script traps it, and a trap in the batch
shell that a foreground step blocks."""

from __future__ import annotations

import re
from typing import Iterator, List, Optional, Tuple

from provisioner.check.launch import classify
from provisioner.check.script import BATCH, Command, TASK
from provisioner.check.rules.core import Context, ERROR, Edit, Finding, SIGNALS, WARNING, rule
from provisioner.check.rules.helpers import SHORT_STEPS, indent_of, one_line


def _signal_name(text: str) -> str:
    text = text.upper()
    if text.startswith("SIG"):
        text = text[3:]
    return SIGNALS.get(text, text)


def _header_signal(ctx: Context) -> Optional[Tuple[str, bool, int, str]]:
    """(signal name, delivered to the batch shell, header line, value) from --signal."""
    opt = ctx.script.opt("signal")
    if opt is None:
        return None
    value = opt.value
    flags, sep, rest = value.partition(":")
    if not sep:
        flags, rest = "", value
    sig = rest.split("@")[0]
    return _signal_name(sig), "B" in flags.upper(), opt.line, value


def _traps(ctx: Context) -> List[Tuple[Command, List[str]]]:
    out = []
    for c in ctx.script.commands:
        if c.shell == BATCH and c.name == "trap" and len(c.argv) >= 3:
            out.append((c, [_signal_name(w.flat()) for w in c.argv[2:]]))
    return out


@rule("signal-not-to-batch", ERROR, "--signal without B: while the script traps it")
def rule_signal_not_to_batch(ctx: Context) -> Iterator[Finding]:
    """#SBATCH --signal without B: while the batch script traps that signal."""
    sig = _header_signal(ctx)
    if sig is None or sig[1]:
        return
    name, _, line, value = sig
    trapped = [c for c, sigs in _traps(ctx) if name in sigs]
    if not trapped:
        return
    fixed = f"B:{value}" if ":" not in value else "B" + value
    header = ctx.script.line_text(line)
    new = re.sub(r"(--signal[= ])" + re.escape(value), lambda m: m.group(1) + fixed, header, count=1)
    edits = [Edit(ctx.script.path, line, line, new)] if new != header else []
    yield ctx.finding(
        line, ERROR, "signal-not-to-batch",
        f"--signal={value} goes to the job steps (every task on {ctx.nodes_text()}), never to the batch shell: "
        f"the trap at line {trapped[0].line} never runs and no checkpoint is written before the time limit",
        f"#SBATCH --signal={fixed}", edits=edits)


def _long_step(ctx: Context, c: Command) -> bool:
    """Whether a batch-shell command is the job's long-running work: a training launch, an srun
    of one (or of anything but a short utility), or a helper script that runs one."""
    if classify(c.words()) is not None:
        return True
    if c.name == "srun":
        task = next((t for t in ctx.script.commands if t.srun is c and t.shell == TASK), None)
        if task is None:
            return False
        if any(classify(t.words()) is not None for t in ctx.script.commands if t.srun is c):
            return True
        return task.name.rsplit("/", 1)[-1] not in SHORT_STEPS
    if c.name.rsplit("/", 1)[-1] in ("bash", "sh", "source", ".") or c.name.startswith("./"):
        return any(t.seq > c.seq and t.file != c.file and classify(t.words()) is not None
                   for t in ctx.script.commands)
    return False


@rule("trap-blocked-by-foreground", WARNING, "trap in the batch shell, step in the foreground")
def rule_trap_blocked_by_foreground(ctx: Context) -> Iterator[Finding]:
    """A trap in the batch shell and the long-running step in the foreground."""
    sig = _header_signal(ctx)
    traps = [t for t, s in _traps(ctx) if sig is not None and sig[0] in s]
    if not traps:
        return
    after = traps[0].seq
    for c in ctx.script.commands:
        if c.shell != BATCH or c.background or c.file != ctx.script.path or c.seq < after or c.in_bash_c:
            continue
        if not _long_step(ctx, c):
            continue
        lines = ctx.script.lines[c.line - 1:c.end_line]
        if any(re.search(r"(^|[^&])&\s*$|\|\||&&|;", x.split("#")[0]) for x in lines) or c.name == "exec":
            fix = ""
            edits: List[Edit] = []
        else:
            cmd_text = one_line("\n".join(lines))
            new = indent_of(lines[0]) + f"{cmd_text} &\n{indent_of(lines[0])}wait"
            edits = [Edit(ctx.script.path, c.line, c.end_line, new)]
            fix = f"{cmd_text} & wait"
        yield ctx.finding(
            c.line, WARNING, "trap-blocked-by-foreground",
            f"bash runs a trap only after the foreground command exits: the {sig[0]} trap (line {traps[0].line}) "
            "fires when this step has already ended (or been killed at the time limit), too late to checkpoint",
            fix, edits=edits)
        return
