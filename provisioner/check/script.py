"""A batch script as data, as parse.py reads it: its #SBATCH options (HeaderOpt), its commands
(Command: words made of parts, each expanded by the batch shell or by the tasks), its
assignments in execution order, and the helper scripts it runs (Script)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple


BATCH = "batch"  # expanded/run once by the batch shell, on the first node
TASK = "task"    # expanded/run by each task an srun step starts


@dataclass
class Part:
    """One piece of a word: literal text, a variable, a command substitution, arithmetic."""
    kind: str            # "lit" | "var" | "cmd" | "arith"
    text: str            # literal text, or the source text of the expansion
    shell: str = BATCH   # which shell expands it
    line: int = 0
    names: Tuple[str, ...] = ()  # variables referenced (var: one; arith/cmd: any)
    default: Optional[str] = None  # ${X:-default}


@dataclass
class Word:
    parts: List[Part]
    line: int
    text: str  # as written (after bash -c unquoting, for inner words)

    def literal(self) -> Optional[str]:
        """The word's value when it is plain literal text, else None."""
        if all(p.kind == "lit" for p in self.parts):
            return "".join(p.text for p in self.parts)
        return None

    def refs(self, shell: Optional[str] = None) -> Iterator[Part]:
        """Parts that reference variables (optionally only those expanded by ``shell``)."""
        for p in self.parts:
            if p.names and (shell is None or p.shell == shell):
                yield p

    def flat(self) -> str:
        """The word with expansions kept as written: '--node_rank=$SLURM_NODEID'."""
        return "".join(p.text for p in self.parts)


@dataclass
class Assignment:
    name: str
    value: Optional[Word]
    line: int
    shell: str
    exported: bool
    prefix_of: Optional["Command"] = None  # `VAR=x cmd`: only cmd sees it
    file: str = ""       # the file it is written in (a helper script's path, else the script's)
    seq: int = 0         # execution order across the script and the helpers it runs
    appends: bool = False  # `VAR+=...`: its value is the earlier one with this appended


@dataclass
class Command:
    argv: List[Word]
    line: int            # first line of the command
    end_line: int
    shell: str           # BATCH: the batch shell runs it; TASK: every task of an srun step runs it
    source: str          # the command's text in the file (outer text for inner commands)
    background: bool = False
    assigns: List[Assignment] = field(default_factory=list)
    srun: Optional["Command"] = None  # for a per-task command: the srun that starts it
    in_bash_c: bool = False           # came from a `bash -c STRING`
    expanded: bool = False            # `srun $CMD`: the command $CMD holds, rebuilt from its assignments
    prog_index: int = 0               # srun: index in argv of the program it runs
    file: str = ""                    # the file it is written in (a helper script's path, else the script's)
    seq: int = 0                      # execution order across the script and the helpers it runs
    cwd: Optional[str] = None         # the batch shell's directory when it runs (where a `cd` resolved)
    entry: Optional[str] = None       # python FILE / -m MODULE: the file found for it, if any

    @property
    def name(self) -> str:
        return (self.argv[0].literal() or "") if self.argv else ""

    def words(self) -> List[str]:
        return [w.flat() for w in self.argv]


@dataclass
class HeaderOpt:
    key: str    # long name without dashes: "nodes", "gres", "signal"
    value: str
    line: int
    text: str   # the whole line


@dataclass
class Script:
    path: str
    text: str
    header: List[HeaderOpt]
    late_header: List[HeaderOpt]  # #SBATCH lines after the first command: sbatch ignores them
    commands: List[Command]
    assignments: List[Assignment]
    functions: Dict[str, int]
    parse_errors: List[int]
    files: Dict[str, str] = field(default_factory=dict)  # helper scripts followed: path -> text
    helper_calls: Dict[str, int] = field(default_factory=dict)  # helper path -> line that runs it

    @property
    def lines(self) -> List[str]:
        return self.text.splitlines()

    @property
    def dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.path))

    def entry_display(self, abspath: str) -> str:
        """How findings name a file found beside the script (an entry point, a helper)."""
        rel = os.path.relpath(abspath, self.dir)
        if rel.startswith(".."):
            return abspath
        return os.path.join(os.path.dirname(self.path), rel)

    def line_text(self, line: int, file: str = "") -> str:
        if file and file != self.path:
            text = self.files.get(file)
            if text is None:
                try:
                    with open(file, encoding="utf-8", errors="replace") as fh:
                        text = fh.read()
                except OSError:
                    text = ""
                self.files[file] = text
        else:
            text = self.text
        lines = text.splitlines()
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def opt(self, key: str) -> Optional[HeaderOpt]:
        found = [o for o in self.header if o.key == key]
        return found[-1] if found else None

    def assignment_before(self, name: str, seq: int, shell: str = BATCH) -> Optional[Assignment]:
        """The last batch-shell assignment of ``name`` made before the statement numbered ``seq``
        (execution order: the script's lines, a helper's lines where the script runs it)."""
        best = None
        for a in self.assignments:
            if a.name == name and a.shell == shell and a.prefix_of is None and a.seq <= seq:
                best = a
        return best

    def exported(self, name: str) -> bool:
        return any(a.name == name and a.exported for a in self.assignments)
