"""Reading a batch script into data (script.py): its #SBATCH header and its commands, from a real
bash parse tree.

The tree comes from tree-sitter-bash (error tolerant, so a script with one odd line still
yields every other command). On top of it this module keeps what the rules need and a
regex cannot see:

* which shell expands each variable: the batch shell (once, on the first node) or the
  shell of each task (`srun bash -c "...\\$SLURM_NODEID..."`). The string handed to
  `bash -c` is rebuilt the way bash would (unescaping `\\$`, `\\"`, dropping `\\<newline>`),
  parsed again, and every variable the outer shell already expanded is marked as such;
* where each inner node sits in the file (line numbers survive the re-parse);
* assignments in execution order, so a variable can be resolved to what it held at a given
  statement;
* srun's options and the program it runs per task; for `srun $CMD` / `srun bash -c "$CMD"`
  also the command $CMD holds, rebuilt from the assignments (marked ``expanded``);
* helper scripts the job runs (`bash FILE`, `sh FILE`, `source FILE`, `. FILE`, `./FILE`,
  `srun bash FILE`), found beside the script or where a resolved `cd` points, walked in
  place with their own file and lines, in the shell that runs them;
* the Python entry point a launch names, where it exists (read by entry.py).

This module walks the statements; the words, the parse tree and the text a `bash -c`
receives are words.py's.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

from provisioner.check.options import parse_header, srun_options
from provisioner.check.script import Assignment, BATCH, Command, Part, Script, TASK, Word
from provisioner.check.words import WordReader, _Source, parse_tree


_WRAPPERS = {"exec", "time", "nohup", "command", "builtin", "stdbuf", "nice"}


_HELPER_SHELLS = ("bash", "sh", "dash", "source", ".")
MAX_HELPER_DEPTH = 4
MAX_HELPER_BYTES = 1 << 20


class _Walker(WordReader):
    """The statements of a script, in execution order (its words: words.py)."""

    def __init__(self, file_text: str, path: str = ""):
        self.file_lines = file_text.splitlines()
        self.commands: List[Command] = []
        self.assignments: List[Assignment] = []
        self.functions: Dict[str, int] = {}
        self.errors: List[int] = []
        self.sentinels: Dict[int, Part] = {}
        self.path = path           # the batch script
        self.file = path           # the file being walked (the script or a helper)
        self.script_dir = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
        self.cwd: Optional[str] = self.script_dir  # the batch shell's directory; None once a cd is unknown
        self.values: Dict[str, str] = {"SLURM_SUBMIT_DIR": self.script_dir}
        self.seq = 0
        self.depth = 0
        self.expanding = False
        self.files: Dict[str, str] = {}
        self.helper_calls: Dict[str, int] = {}

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    # -- paths: `cd DIR`, `bash FILE`, `source FILE`

    def resolve(self, word: Word) -> Optional[str]:
        """A word's value where the batch shell's literal assignments and the script's own
        directory ($SLURM_SUBMIT_DIR, $(dirname "$0"), ${BASH_SOURCE[0]}) determine it, else None."""
        out = []
        for p in word.parts:
            if p.kind == "lit":
                out.append(p.text)
            elif p.kind == "var" and p.names and p.names[0] in self.values:
                out.append(self.values[p.names[0]])
            elif p.kind == "var" and p.names and p.names[0] in ("PWD",) and self.cwd:
                out.append(self.cwd)
            elif p.kind == "cmd" and re.search(r"dirname|BASH_SOURCE|\$0|pwd", p.text):
                out.append(self.script_dir if self.file == self.path else os.path.dirname(self.file))
            else:
                return None
        value = "".join(out)
        if value.startswith("~"):
            value = os.path.expanduser(value)
        return value

    def find_file(self, name: str) -> Optional[str]:
        """A helper or entry point named ``name``: where a resolved `cd` points, else beside the script."""
        if os.path.isabs(name):
            return name if os.path.isfile(name) else None
        for base in (self.cwd, os.path.dirname(self.file) if self.file else None, self.script_dir):
            if base:
                cand = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(cand):
                    return cand
        return None

    def display(self, abspath: str) -> str:
        """How findings name a helper: next to the script's path as it was given."""
        rel = os.path.relpath(abspath, self.script_dir)
        if rel.startswith(".."):
            return abspath
        return os.path.join(os.path.dirname(self.path), rel) if self.path else rel

    def find_entry(self, cmd: Command) -> None:
        """The Python file a launch runs (`python train.py`, `python -m pkg.train`, the script a
        launcher starts), where it can be found: srun --chdir, a resolved `cd`, beside the script."""
        from provisioner.check.launch import classify  # lazy: launch.py imports nothing from here, kept one-way
        launch = classify(cmd.words())
        if launch is None or launch.program_index >= len(cmd.argv):
            return
        value = self.resolve(cmd.argv[launch.program_index])
        if not value:
            return
        names = [value]
        if launch.kind == "python" and cmd.argv[launch.program_index - 1].literal() == "-m":
            base = value.replace(".", "/")
            names = [base + ".py", base + "/__main__.py"]
        saved = self.cwd
        if cmd.srun is not None:
            opts, _ = srun_options(cmd.srun.argv)
            chdir = opts.get("chdir", opts.get("D", (None, None)))[1]
            if chdir is not None:
                target = self.resolve(Word([p for p in chdir.parts], chdir.line, chdir.text))
                if target and "=" in target and target.startswith("--"):
                    target = target.split("=", 1)[1]
                if target:
                    self.cwd = os.path.normpath(os.path.join(self.cwd or self.script_dir, target))
        try:
            for name in names:
                found = self.find_file(name)
                if found:
                    cmd.entry = found
                    return
        finally:
            self.cwd = saved

    def track_cd(self, cmd: Command) -> None:
        if len(cmd.argv) < 2:
            self.cwd = os.path.expanduser("~")
            return
        target = self.resolve(cmd.argv[-1])
        if target is None or target == "-":
            self.cwd = None
            return
        base = self.cwd or self.script_dir
        path = os.path.normpath(os.path.join(base, target))
        self.cwd = path if os.path.isdir(path) else None

    def helper_of(self, cmd: Command) -> Optional[str]:
        """The file `bash FILE` / `sh FILE` / `source FILE` / `. FILE` / `./FILE` runs, where it exists."""
        name = cmd.name.rsplit("/", 1)[-1]
        words = cmd.argv
        arg = None
        if name in _HELPER_SHELLS:
            for w in words[1:]:
                flag = w.literal()
                if flag is not None and flag.startswith("-"):
                    if "c" in flag[1:] or flag in ("--version", "--help"):
                        return None
                    continue
                arg = w
                break
        elif cmd.name.startswith("./") or cmd.name.endswith(".sh"):
            arg = words[0]
        if arg is None:
            return None
        value = self.resolve(arg)
        if not value:
            return None
        return self.find_file(value)

    def follow(self, cmd: Command, shell: str, srun: Optional[Command]) -> None:
        """Walk the helper script ``cmd`` runs as if its lines stood here (its own file and lines)."""
        path = self.helper_of(cmd)
        if path is None or self.depth >= MAX_HELPER_DEPTH or os.path.abspath(path) == os.path.abspath(self.path):
            return
        roots = [r for r in (self.script_dir, self.cwd) if r]
        if not any(os.path.abspath(path).startswith(os.path.join(os.path.abspath(r), "")) for r in roots):
            return  # the project's own helpers only: not conda.sh, a venv's activate, /etc/profile
        try:
            data = open(path, "rb").read(MAX_HELPER_BYTES)
        except OSError:
            return
        if b"\0" in data[:4096]:
            return
        text = data.decode("utf-8", "replace")
        shown = self.display(os.path.abspath(path))
        self.files[shown] = text
        self.helper_calls.setdefault(shown, cmd.line)
        saved = (self.file, self.file_lines, self.cwd)
        self.file, self.file_lines = shown, text.splitlines()
        self.depth += 1
        try:
            tree = parse_tree(data)
            self.walk(tree.root_node, _Source(data, None, self.sentinels, shell), shell, srun)
        finally:
            self.depth -= 1
            self.file, self.file_lines = saved[0], saved[1]
            if cmd.name.rsplit("/", 1)[-1] not in ("source", ".") or shell != BATCH:
                self.cwd = saved[2]  # a child shell's cd stays in the child

    # -- statements

    def walk(self, node, src: _Source, shell: str, srun: Optional[Command] = None, in_bash_c: bool = False) -> None:
        t = node.type
        if (node.is_error or node.is_missing) and self.file == self.path:
            self.errors.append(src.line(node))
        if t in ("heredoc_body", "command_substitution", "comment"):
            return  # data, or a value: not commands this shell runs as steps
        if t == "function_definition":
            name_node = node.child_by_field_name("name")
            if name_node is not None:
                self.functions[src.text(name_node)] = src.line(node)
        if t == "command":
            self.command(node, src, shell, srun, in_bash_c)
            return
        if t == "declaration_command":
            self.declaration(node, src, shell)
            return
        if t == "variable_assignment":
            self.assignment(node, src, shell, exported=False)
            return
        if t == "variable_assignments":
            for child in node.children:
                if child.type == "variable_assignment":
                    self.assignment(child, src, shell, exported=False)
            return
        for child in node.children:
            self.walk(child, src, shell, srun, in_bash_c)

    def assignment(self, node, src: _Source, shell: str, exported: bool,
                   prefix_of: Optional[Command] = None) -> Assignment:
        name_node = node.child_by_field_name("name") or node.children[0]
        value_node = node.child_by_field_name("value")
        name = src.text(name_node)
        value = self.word(value_node, src, shell) if value_node is not None else Word([], src.line(node), "")
        appends = any(c.type == "+=" for c in node.children)
        if appends:
            # `ARGS+=(--max_restarts 3)`, `ARGS+=" --foo"`: appended to what the variable held
            before = next((a.value for a in reversed(self.assignments) if a.name == name and a.shell == shell
                           and a.prefix_of is None and a.value is not None), None)
            if before is not None and before.parts:
                sep = [Part("lit", " ", shell, value.line)] if value_node is not None and value_node.type == "array" \
                    else []
                value = Word(before.parts + sep + value.parts, value.line, value.text)
        a = Assignment(name, value, src.line(node), shell, exported, prefix_of, file=self.file,
                       seq=self.next_seq(), appends=appends)
        self.assignments.append(a)
        if shell == BATCH and prefix_of is None:
            resolved = self.resolve(value)
            if resolved is not None:
                self.values[name] = resolved
            else:
                self.values.pop(name, None)
        return a

    def declaration(self, node, src: _Source, shell: str) -> None:
        keyword = src.text(node.children[0]) if node.children else ""
        exported = keyword == "export" or any(src.text(c) in ("-x", "-gx") for c in node.children[1:])
        for child in node.children[1:]:
            if child.type == "variable_assignment":
                self.assignment(child, src, shell, exported)
            elif child.type == "variable_name" and exported:
                # `export NAME` marks an earlier assignment exported
                for a in self.assignments:
                    if a.name == src.text(child) and a.shell == shell:
                        a.exported = True

    def command(self, node, src: _Source, shell: str, srun: Optional[Command], in_bash_c: bool) -> None:
        children = list(node.children)
        prefix_nodes = []
        argv_nodes = []
        seen_name = False
        for idx, child in enumerate(children):
            if child.type == "variable_assignment" and not seen_name:
                # tree-sitter-bash folds `A=1 B=2<newline>cmd` into one command: an unescaped
                # newline after an assignment ends a statement of its own.
                nxt = children[idx + 1] if idx + 1 < len(children) else None
                gap = src.data[child.end_byte:nxt.start_byte] if nxt is not None else b""
                if b"\n" in gap.replace(b"\\\n", b""):
                    for p in prefix_nodes + [child]:
                        self.assignment(p, src, shell, exported=False)
                    prefix_nodes = []
                    continue
                prefix_nodes.append(child)
            elif child.type == "command_name":
                seen_name = True
                argv_nodes.append(child.children[0] if child.children else child)
            elif seen_name and child.type not in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                argv_nodes.append(child)
        if not argv_nodes:
            for p in prefix_nodes:
                self.assignment(p, src, shell, exported=False)
            return
        argv = [self.word(n, src, shell) for n in argv_nodes]
        start = prefix_nodes[0] if prefix_nodes else argv_nodes[0]
        first_line = src.line(start)
        end_line = src.end_line(node)
        source = "\n".join(self.file_lines[first_line - 1:end_line])
        cmd = Command(argv, first_line, end_line, shell, source, background=_is_background(node),
                      srun=srun, in_bash_c=in_bash_c, file=self.file, seq=self.next_seq(), cwd=self.cwd,
                      expanded=self.expanding)
        cmd.assigns = [self.assignment(p, src, shell, exported=True, prefix_of=cmd) for p in prefix_nodes]
        # wrappers that run their argument as the command: exec srun ..., time srun ...
        while cmd.argv and cmd.name in _WRAPPERS and len(cmd.argv) > 1:
            cmd.argv = cmd.argv[1:]
        if cmd.name == "env":
            rest = cmd.argv[1:]
            while rest and "=" in (rest[0].literal() or "") and not rest[0].flat().startswith("-"):
                rest = rest[1:]
            if rest:
                cmd.argv = rest
        self.commands.append(cmd)
        self.find_entry(cmd)
        if cmd.name == "srun" and shell == BATCH or cmd.name == "srun" and srun is None:
            opts, prog = srun_options(cmd.argv)
            cmd.prog_index = prog
            if prog < len(cmd.argv):
                self.task_command(cmd, argv_nodes[-(len(cmd.argv) - prog):], src)
            return
        if shell == BATCH and cmd.name == "cd" and not in_bash_c:
            self.track_cd(cmd)
        self.maybe_bash_c(cmd, argv_nodes[-len(cmd.argv):], src, shell, srun)
        self.follow(cmd, shell, srun)
        if shell == TASK and srun is not None:
            self.expand_var_command(cmd, srun)

    def task_command(self, srun_cmd: Command, prog_nodes, src: _Source) -> None:
        """The program srun runs: a command of its own, run per task (its words were
        already expanded by the batch shell)."""
        argv = srun_cmd.argv[srun_cmd.prog_index:]
        task = Command(argv, srun_cmd.line, srun_cmd.end_line, TASK, srun_cmd.source, srun=srun_cmd,
                       file=self.file, seq=self.next_seq(), cwd=self.cwd)
        while task.argv and task.name in _WRAPPERS and len(task.argv) > 1:
            task.argv = task.argv[1:]
            prog_nodes = prog_nodes[1:]
        self.commands.append(task)
        self.find_entry(task)
        self.maybe_bash_c(task, prog_nodes, src, TASK, srun_cmd)
        self.follow(task, TASK, srun_cmd)
        self.expand_var_command(task, srun_cmd)

    # -- `srun $CMD`, `srun bash -c "$LAUNCHER $ARGS"`: the command a variable holds

    def _value_of(self, name: str) -> Optional[Word]:
        for a in reversed(self.assignments):
            if a.name == name and a.shell == BATCH and a.prefix_of is None:
                return a.value
        return None

    def _expand(self, word: Word, out: List[Tuple[str, int]], depth: int) -> None:
        """``word``'s text with the batch shell's variables replaced by what they were assigned
        (as written, recursively), each piece with the line it comes from."""
        for p in word.parts:
            if p.kind == "var" and p.shell == BATCH and p.names and depth < 4 and p.default is None:
                value = self._value_of(p.names[0])
                if value is not None:
                    self._expand(value, out, depth + 1)
                    continue
            out.append((p.text, p.line))

    def expand_var_command(self, cmd: Command, srun: Command) -> None:
        if self.expanding or not cmd.argv:
            return
        first = cmd.argv[0]
        if len(first.parts) != 1 or first.parts[0].kind != "var" or first.parts[0].shell != BATCH:
            return
        pieces: List[Tuple[str, int]] = []
        for w in cmd.argv:
            self._expand(w, pieces, 0)
            pieces.append((" ", w.line))
        text = "".join(t for t, _ in pieces).strip()
        if not text or text.startswith("$"):
            return
        byte_lines: List[int] = []
        for t, line in pieces:
            byte_lines += [line] * len(t.encode("utf-8"))
        lead = len("".join(t for t, _ in pieces)) - len("".join(t for t, _ in pieces).lstrip())
        data = text.encode("utf-8")
        byte_lines = byte_lines[lead:lead + len(data)] or [cmd.line]
        self.expanding = True
        start = len(self.commands)
        try:
            tree = parse_tree(data)
            self.walk(tree.root_node, _Source(data, byte_lines, self.sentinels, BATCH), TASK, srun, cmd.in_bash_c)
        finally:
            self.expanding = False
        for c in self.commands[start:]:  # reported where the step runs them
            c.line, c.end_line, c.source = cmd.line, cmd.end_line, cmd.source

    def maybe_bash_c(self, cmd: Command, nodes, src: _Source, shell: str, srun: Optional[Command]) -> None:
        """`bash -c STRING` / `sh -lc STRING`: parse STRING as the script that shell runs."""
        name = cmd.name.rsplit("/", 1)[-1]
        if name not in ("bash", "sh", "zsh", "dash") or len(nodes) != len(cmd.argv):
            return
        for i in range(1, len(cmd.argv) - 1):
            flag = cmd.argv[i].literal() or ""
            if not flag.startswith("-"):
                return
            if "c" in flag[1:]:
                self.inner_script(nodes[i + 1], src, shell, srun)
                return

    def inner_script(self, node, src: _Source, shell: str, srun: Optional[Command]) -> None:
        text, line_of = self.unquote(node, src)
        data = text.encode("utf-8")
        byte_lines: List[int] = []
        for ch, ln in zip(text, line_of):
            byte_lines += [ln] * len(ch.encode("utf-8"))
        inner = _Source(data, byte_lines, src.sentinels, shell)
        tree = parse_tree(data)
        self.walk(tree.root_node, inner, shell, srun, in_bash_c=True)


def _is_background(node) -> bool:
    sib = node.next_sibling
    return sib is not None and sib.type == "&"


def parse_script(path: str, text: str) -> Script:
    """Parse a batch script (already read) into its header and commands."""
    header, late = parse_header(text)
    tree = parse_tree(text.encode("utf-8"))
    walker = _Walker(text, path)
    walker.walk(tree.root_node, _Source(text.encode("utf-8"), None, walker.sentinels, BATCH), BATCH)
    return Script(path=path, text=text, header=header, late_header=late, commands=walker.commands,
                  assignments=walker.assignments, functions=walker.functions,
                  parse_errors=sorted(set(walker.errors)), files=walker.files,
                  helper_calls=walker.helper_calls)
