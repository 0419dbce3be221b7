"""What every rule of `simcluster check` is made of: the levels, Finding and its Edits (the
fix as line edits, fix_text shows them), the Context a rule reads, and the registry: each
rule function is registered with ``@rule(id, level, title)`` into RULES."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Sequence

from provisioner.check.entry import Entry, read_entry
from provisioner.check.script import Command, Script
from provisioner.check.shape import Shape


ERROR = "error"
WARNING = "warning"
# What check cannot decide: the outcome depends on a program it cannot read (an entry point not
# beside the script, a module of an installed package). Shown, never counted as a warning, never
# an exit status.
NOTE = "note"

# Set by Slurm per task; in the batch shell they hold the values of task 0 on the first node.
PER_TASK_VARS = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_TASK_PID")
RANK_ENV = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")
LOOPBACK_RE = re.compile(r"^(localhost|127(\.\d+){3}|::1|0\.0\.0\.0)$")
MASTER_ADDR_FIX = 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
MASTER_PORT_FIX = "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))"
SIGNALS = {"1": "HUP", "2": "INT", "10": "USR1", "12": "USR2", "15": "TERM", "18": "CONT", "19": "STOP"}


@dataclass
class Edit:
    """Lines ``start``..``end`` of ``file`` replaced by ``text`` (end = start - 1: inserted before
    ``start``; empty text: deleted)."""
    file: str
    start: int
    end: int
    text: str

    def to_dict(self):
        return {"file": self.file, "start": self.start, "end": self.end, "text": self.text}


@dataclass
class Finding:
    path: str
    line: int
    severity: str
    rule: str
    message: str
    fix: str = ""
    source: str = "simcluster"
    edits: List[Edit] = field(default_factory=list)

    def to_dict(self):
        return {"file": self.path, "line": self.line, "severity": self.severity, "rule": self.rule,
                "message": self.message, "fix": self.fix, "source": self.source,
                "edits": [e.to_dict() for e in self.edits]}


@dataclass
class Context:
    script: Script
    shape: Shape
    assumed_nodes: bool = False  # no --nodes: analysed as submitted with -N 2 or more

    def finding(self, line: int, severity: str, rule: str, message: str, fix: str = "", file: str = "",
                edits: Sequence[Edit] = ()) -> Finding:
        if self.assumed_nodes and self.shape.multi_node:
            message = f"when submitted with -N {self.n} or more: {message}"
        if file and file != self.script.path and file in self.script.helper_calls:
            message += f" ({os.path.basename(file)} is run at line {self.script.helper_calls[file]} of " \
                       f"{os.path.basename(self.script.path)})"
        return Finding(file or self.script.path, line, severity, rule, message, fix, edits=list(edits))

    @property
    def n(self) -> int:
        return self.shape.nodes_max

    def nodes_text(self) -> str:
        return f"{self.n} node{'s' if self.n != 1 else ''}"

    def file_of(self, item) -> str:
        return getattr(item, "file", "") or self.script.path

    def text_of(self, item, line: int) -> str:
        return self.script.line_text(line, self.file_of(item))

    def entry(self, cmd: Command) -> Optional[Entry]:
        return read_entry(cmd.entry) if cmd.entry else None


def fix_text(edits: Sequence[Edit], line: int, file: str) -> str:
    """The fix as shown: each edit's new text, valid bash, with a comment where it goes when that
    is not the finding's own line (a deletion is a comment itself); one line per edit."""
    out = []
    for e in edits:
        span = f"line {e.start}" if e.end <= e.start else f"lines {e.start}-{e.end}"
        of = f" of {e.file}" if e.file != file else ""
        body = "\n".join(x.strip() for x in e.text.split("\n")) if e.text.strip() else ""
        if not body:
            out.append(f"# delete {span}{of}" if (e.start, e.file) != (line, file) else "# delete this line")
            continue
        if e.end < e.start:
            where = f"insert before line {e.start}{of}"
        elif (e.start, e.file) == (line, file):
            where = ""
        else:
            where = f"replaces {span}{of}"
        if where and not body.endswith("\\"):  # a comment after a continued line would end the command
            body += f"   # {where}"
        out.append(body)
    return "\n".join(out)


@dataclass(frozen=True)
class Rule:
    id: str
    level: str  # the highest level it reports
    func: Callable[[Context], Iterator[Finding]]
    title: str


# Every rule, as its family module registered it (rules/__init__.py imports every family).
RULES: List[Rule] = []


def rule(rule_id: str, level: str, title: str):
    """Register the decorated function as rule ``rule_id``: ``level`` is the highest level it
    reports, ``title`` one line on what it catches (docs/check.md explains each rule)."""
    def register(func: Callable[[Context], Iterator[Finding]]):
        RULES.append(Rule(rule_id, level, func, title))
        return func
    return register
