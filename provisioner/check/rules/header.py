"""Rules on the #SBATCH header: a directive after the first command (sbatch ignores it)."""

from __future__ import annotations

from typing import Iterator

from provisioner.check.rules.core import Context, Edit, Finding, WARNING, rule


@rule("sbatch-after-command", WARNING, "#SBATCH after the first command")
def rule_late_sbatch(ctx: Context) -> Iterator[Finding]:
    """#SBATCH lines after the first command are ignored by sbatch."""
    last_header = max((o.line for o in ctx.script.header), default=1)
    for opt in ctx.script.late_header:
        text = ctx.script.line_text(opt.line)
        edits = [Edit(ctx.script.path, opt.line, opt.line, ""),
                 Edit(ctx.script.path, last_header + 1, last_header, text.strip())]
        yield ctx.finding(
            opt.line, WARNING, "sbatch-after-command",
            f"#SBATCH --{opt.key} comes after the first command: sbatch ignores it",
            f"{text.strip()}   # move it up, after line {last_header}", edits=edits)

