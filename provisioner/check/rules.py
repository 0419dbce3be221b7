"""The static rules of `simcluster check`: one function per rule, each yielding Findings.

A rule sees the parsed script (parse.Script: its commands and those of the helper scripts
it runs, each with its file), the job shape (shape.Shape: the header's, `check --nodes`, or
-N 2 for a clearly multi-node script without --nodes), the launches (launch.classify) and
the Python entry points beside the script (entry.read_entry). Each finding carries its fix
as line edits (Edit) and shows their text as the fix line. RULES lists the rules with their
id and level; docs/check.md explains each one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from provisioner.check.entry import Entry, read_entry
from provisioner.check.launch import Launch, classify, parse_nnodes
from provisioner.check.parse import (_SRUN_LONG_OPTIONAL, _SRUN_LONG_WITH_ARG, _SRUN_SHORT_WITH_ARG, BATCH, TASK,
                                     Assignment, Command, Part, Script, Word, srun_options)
from provisioner.check.shape import Shape, shape_of

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


# ---------------------------------------------------------------- helpers

def tainted(ctx: Context, part: Part, seq: int, depth: int = 0) -> Optional[Tuple[str, List[Assignment]]]:
    """The per-task Slurm variable ``part`` carries when the batch shell expands it, and the
    assignments it went through: `$SLURM_NODEID` itself, or `$NODE_RANK` after `NODE_RANK=$SLURM_NODEID`."""
    if part.shell != BATCH or depth > 8:
        return None
    for name in part.names:
        if name in PER_TASK_VARS:
            return name, []
        a = ctx.script.assignment_before(name, seq)
        if a is not None and a.value is not None:
            for p in a.value.refs(BATCH):
                found = tainted(ctx, p, a.seq, depth + 1)
                if found:
                    return found[0], [a] + found[1]
    return None


def launches(ctx: Context) -> Iterator[Tuple[Command, Launch]]:
    for cmd in ctx.script.commands:
        launch = classify(cmd.words())
        if launch is not None:
            yield cmd, launch


def _count(value: str, end: int) -> Optional[int]:
    """An srun count option's number; for a range ('2-4') its first (end=0) or last (-1) bound."""
    try:
        return int(value.split("-")[end])
    except ValueError:
        return None


def step_tasks_per_node(ctx: Context, srun: Optional[Command]) -> int:
    """Tasks per node of an srun step: its own options, else the header's."""
    if srun is None:
        return 1
    opts, _ = srun_options(srun.argv)
    if "ntasks-per-node" in opts:
        per_node = _count(opts["ntasks-per-node"][0], 0)
        return ctx.shape.tasks_per_node if per_node is None else per_node
    if "ntasks" in opts:
        nodes = _count(opts["nodes"][0], 0) if "nodes" in opts else ctx.shape.nodes_max
        tasks = _count(opts["ntasks"][0], 0)
        if nodes is None or tasks is None or "-" in opts["ntasks"][0]:
            return ctx.shape.tasks_per_node
        return -(-tasks // max(nodes, 1))
    return ctx.shape.tasks_per_node


def step_nodes(ctx: Context, srun: Optional[Command]) -> int:
    """Nodes of an srun step: its own --nodes (a range's upper bound), else the header's."""
    if srun is None:
        return 1
    opts, _ = srun_options(srun.argv)
    nodes = _count(opts["nodes"][0], -1) if "nodes" in opts else None
    if nodes is None and "ntasks" in opts and "ntasks-per-node" not in opts and _count(opts["ntasks"][0], 0) == 1:
        return 1
    return ctx.shape.nodes_max if nodes is None else min(nodes, ctx.shape.nodes_max)


def one_line(text: str) -> str:
    """A multi-line command (backslash continuations) as one line."""
    return re.sub(r"\s+", " ", text.replace("\\\n", " ")).strip()


def srun_prefix(srun: Command) -> str:
    return " ".join(w.text for w in srun.argv[:srun.prog_index])


def prog_text(cmd: Command, replace: Sequence[Tuple[str, str]] = ()) -> str:
    """A per-task command's words for a double-quoted `bash -c "..."`."""
    out = []
    for w in cmd.argv:
        text = w.text
        for old, new in replace:
            text = text.replace(old, new)
        # "${ARGS[@]}" inside the string would cut it into several arguments of bash -c:
        # ${ARGS[*]} joins the elements, and the task's shell splits them again
        text = re.sub(r'^"?\$\{(\w+)\[@\]\}"?$', r"${\1[*]}", text)
        out.append(one_line(text).replace('"', '\\"'))
    return " ".join(out)


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _locate(ctx: Context, file: str, line: int, pattern: str, span: int = 40) -> int:
    """The first line from ``line`` on (within ``span``) whose text matches ``pattern``: a word's
    line inside a multi-line string is where the string's piece starts, not always its own."""
    for x in range(line, line + span):
        text = ctx.script.line_text(x, file)
        if re.search(pattern, text):
            return x
    return line


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


def _is_c10d(launch: Optional[Launch]) -> bool:
    """torchrun with a dynamic rendezvous: it numbers the nodes itself and ignores --node_rank."""
    if launch is None or launch.kind != "torchrun":
        return False
    backend = (launch.opt("rdzv_backend") or "static").strip("'\"")
    return backend in ("c10d", "etcd", "etcd-v2", "etcd_v2")


_DYNAMIC_RDZV = re.compile(r"--rdzv[_-]backend(?:=|\s+)['\"]?(c10d|etcd|etcd-v2|etcd_v2)\b")


def _ignores_node_rank(launch: Optional[Launch], words: Sequence[str] = ()) -> bool:
    """A launcher whose node (machine) rank does not matter: torchrun (or its module forms) with
    a dynamic rendezvous, and `accelerate launch --rdzv_backend c10d`, which hands its
    --machine_rank to torchrun as --node_rank. ``words``: the command's words, searched too
    (an option the launcher's parse stopped before, behind one it does not know)."""
    if launch is None or launch.kind not in ("torchrun", "torch.distributed.launch", "accelerate"):
        return False
    backend = (launch.opt("rdzv_backend") or "static").strip("'\"")
    return backend in ("c10d", "etcd", "etcd-v2", "etcd_v2") or bool(_DYNAMIC_RDZV.search(" ".join(words)))


_RANK_OPT_RE = re.compile(r"--(?:node|machine)[_-]rank")


def _rank_opt_value(words: Sequence[str], i: int) -> bool:
    """Whether word ``i`` is the value of --node_rank / --machine_rank (`--node_rank X`, `--node_rank=X`)."""
    if re.match(_RANK_OPT_RE.pattern + "=", words[i]):
        return True
    return i > 0 and _RANK_OPT_RE.fullmatch(words[i - 1]) is not None


def _only_as_rank_opt(text: str, name: str) -> bool:
    """Whether every $name in ``text`` (the value of a variable that carries launcher options,
    `DIST_ARGS="--nnodes 2 --node_rank $NODE_RANK ..."`) is the value of a node-rank option."""
    ref = re.compile(r"\$\{?" + re.escape(name) + r"\b")
    words = text.replace('"', " ").replace("'", " ").split()
    hits = [i for i, w in enumerate(words) if ref.search(w)]
    return bool(hits) and all(_rank_opt_value(words, i) for i in hits)


_WRAPPER_WORD = re.compile(r"(bash|sh|env|exec|-\S+|\w+=\S*)")


def _launch_in(words: Sequence[str]) -> Optional[Launch]:
    """The launch in ``words`` past what only wraps it: srun options, `bash -c`, `env`, `exec`, `VAR=value`
    prefixes (`bash -c "ACCELERATE_LOG_LEVEL=info accelerate launch ..."` rebuilt from `srun $CMD`)."""
    for i, w in enumerate(words):
        launch = classify(words[i:])
        if launch is not None:
            return launch
        if not _WRAPPER_WORD.fullmatch(w):
            return None
    return None


# a word that is one variable, whole: $ARGS, "${ARGS}", "${ARGS[@]}" (an array's every element)
_WHOLE_VAR = re.compile(r'"?\$\{?(\w+)(?:\[[@*]\])?\}?"?')


def _launch_with_vars(ctx: Context, cmd: Command) -> Optional[Launch]:
    """The launch ``cmd`` makes with the variables that carry its options expanded
    (`srun torchrun $DIST_ARGS train.py`, DIST_ARGS="--rdzv_backend c10d ..." set before)."""
    words: List[str] = []
    for w in cmd.argv:
        text = w.flat()
        m = _WHOLE_VAR.fullmatch(text)
        a = ctx.script.assignment_before(m.group(1), cmd.seq) if m else None
        if a is not None and a.value is not None:
            words.extend(a.value.flat().replace('"', " ").split())
        else:
            words.append(w.literal() or text)
    return classify(words)


def _ignores_node_rank_with_vars(ctx: Context, cmd: Command) -> bool:
    launch = _launch_with_vars(ctx, cmd)
    if launch is None:
        return False
    words = []
    for w in cmd.argv:
        m = _WHOLE_VAR.fullmatch(w.flat())
        a = ctx.script.assignment_before(m.group(1), cmd.seq) if m else None
        words.append(a.value.flat() if a is not None and a.value is not None else w.flat())
    return _ignores_node_rank(launch, words)


def _opt_word_indexes(launch: Launch, name: str) -> Tuple[int, ...]:
    if name not in launch.opts:
        return ()
    idx = launch.opts[name][1]
    return (idx, idx + 1)


def whole_node(ctx: Context) -> bool:
    """Whether the job takes whole nodes (--exclusive, --mem=0): no other job shares them."""
    ex = ctx.script.opt("exclusive")
    if ex is not None and ex.value in ("", "exclusive"):
        return True
    mem = ctx.script.opt("mem")
    return mem is not None and mem.value.strip() == "0"


_SHORT_STEPS = {"pkill", "kill", "killall", "hostname", "nvidia-smi", "mkdir", "rm", "cp", "mv", "echo", "touch",
                "date", "ls", "cat", "true", "env", "printenv", "scontrol", "sleep", "sync", "df", "free", "uname",
                "ln", "chmod", "tar", "rsync", "pip", "nvcc", "which", "id", "whoami", "test", "["}


# ---------------------------------------------------------------- the rules

_CONSEQUENCE = {
    "SLURM_NODEID": "every node claims node rank 0",
    "SLURM_PROCID": "every task claims rank 0",
    "SLURM_LOCALID": "every task on a node claims local rank 0 (and GPU 0)",
    "SLURMD_NODENAME": "every task sees the first node's name",
    "SLURM_TASK_PID": "every task sees the batch shell's pid",
}


def _is_bash_c(cmd: Command) -> bool:
    """`bash -c STRING` (or sh, with any flags that include c)."""
    if cmd.name.rsplit("/", 1)[-1] not in ("bash", "sh", "zsh", "dash"):
        return False
    for w in cmd.argv[1:]:
        flag = w.literal() or ""
        if not flag.startswith("-"):
            return False
        if "c" in flag[1:]:
            return True
    return False


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
        ignore_rank = _ignores_node_rank(_launch_in(words), words)
        for i, w in enumerate(c.argv):
            if ignore_rank and _rank_opt_value(words, i):
                continue
            for p in w.refs(BATCH):
                found = tainted(ctx, p, c.seq)
                if found:
                    out.add(found[0])
    return out


def _expanded_value(var: str) -> str:
    return "the first node's name" if var == "SLURMD_NODENAME" else "0"


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
        if _is_bash_c(cmd) or cmd.expanded:
            continue  # the commands of its string (of the variable) are checked themselves / at the step
        words = cmd.words()
        ignore_rank = _ignores_node_rank_with_vars(ctx, cmd)
        reaching = _vars_reaching_expanded(ctx, cmd)
        for i, word in enumerate(cmd.argv):
            if ignore_rank and _rank_opt_value(words, i):
                continue  # c10d/etcd rendezvous: torchrun numbers the nodes itself, --node_rank is ignored
            for part in word.refs(BATCH):
                found = tainted(ctx, part, cmd.seq)
                if found is None:
                    continue
                var, chain = found
                if ignore_rank and chain and _only_as_rank_opt(chain[0].value.flat(), chain[1].name if len(chain) > 1 else var):
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
        at = _locate(ctx, ctx.file_of(chain[-1]), start, r"\$\{?" + re.escape(var) + r"\b")
        what = (f"{written} holds ${var}{through}, which the batch shell on the first node expands once "
                f"(line {at}), to {value}")
    message = (f"{what}: all {tasks} tasks on {ctx.nodes_text()} get {value}, so {_CONSEQUENCE.get(var, 'ranks collide')}"
               " (on one host: EADDRINUSE; on real hosts: a hang)")
    edits = _rank_var_edits(ctx, cmd, part, var, chain)
    fix = fix_text(edits, part.line, file) if edits else ""
    launch = _launch_with_vars(ctx, cmd)  # also options an array or a variable carries
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
        return [Edit(file, cmd.srun.line, cmd.srun.end_line, _indent(ctx.script.line_text(cmd.srun.line, file))
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
    hline_no = _locate(ctx, hfile, inner.line, re.escape(inner.text))
    hline = ctx.script.line_text(hline_no, hfile)
    if inner.text not in hline or (hfile, hline_no) == (file, cmd.srun.line):
        return []
    edits = [Edit(hfile, hline_no, hline_no, hline.replace(inner.text, escaped, 1))]
    if not cmd.in_bash_c:
        first = ctx.script.line_text(cmd.srun.line, file)
        new_srun = _indent(first) + f'{srun_prefix(cmd.srun)} bash -c "{prog_text(cmd)}"'
        edits.append(Edit(file, cmd.srun.line, cmd.srun.end_line, new_srun))
    return edits


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
            edits = _delete_assignment(ctx, a)
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


def _delete_assignment(ctx: Context, a: Assignment) -> List[Edit]:
    """Deleting an assignment's line, where the line holds nothing else."""
    file = ctx.file_of(a)
    line = ctx.script.line_text(a.line, file).strip()
    if a.value is None or not re.fullmatch(r"(export\s+|declare\s+-x\s+)?" + re.escape(a.name) + r"=\S+(\s+#.*)?", line):
        return []
    return [Edit(file, a.line, a.line, "")]


def _rank_env_edits(ctx: Context, a: Assignment, srun: Command, var: str) -> List[Edit]:
    file = ctx.file_of(srun)
    task = next((c for c in ctx.script.commands if c.srun is srun and c.shell == TASK and not c.in_bash_c), None)
    if task is None:
        return []
    if _is_bash_c(task):
        # srun bash -c "...": set it first thing in the string the tasks run
        line_no = _locate(ctx, file, srun.line, r"-\w*c\s+[\"']")
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
        new = _indent(ctx.script.line_text(srun.line, file)) + f'{prefix} bash -c "{set_it}"'
        edit = Edit(file, srun.line, srun.end_line, new)
    if a.prefix_of is srun:
        if edit.start != srun.line:
            return []
        if _is_bash_c(task):
            edit = Edit(file, edit.start, edit.end, re.sub(re.escape(a.name) + r"=\S+\s+", "", edit.text, count=1))
        return [edit]
    delete = _delete_assignment(ctx, a)
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
            edits = [Edit(file, cmd.line, cmd.end_line, _indent(ctx.script.line_text(cmd.line, file)) + text)]
        else:
            text = (f'{srun_prefix(cmd.srun)} bash -c "RANK=\\$SLURM_PROCID LOCAL_RANK=\\$SLURM_LOCALID '
                    f'WORLD_SIZE=\\$SLURM_NTASKS exec {prog_text(cmd)}"')
            edits = [Edit(file, cmd.srun.line, cmd.srun.end_line,
                          _indent(ctx.script.line_text(cmd.srun.line, file)) + text)]
        yield ctx.finding(
            cmd.line, level, "no-rank-env",
            f"the {tasks} tasks on {ctx.nodes_text()} get no RANK/LOCAL_RANK (Slurm sets SLURM_PROCID, not "
            f"what init_process_group('env://') reads): {unless}", fix_text(edits, cmd.line, file),
            file=file, edits=edits)


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
        return task.name.rsplit("/", 1)[-1] not in _SHORT_STEPS
    if c.name.rsplit("/", 1)[-1] in ("bash", "sh", "source", ".") or c.name.startswith("./"):
        return any(t.seq > c.seq and t.file != c.file and classify(t.words()) is not None
                   for t in ctx.script.commands)
    return False


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
            new = _indent(lines[0]) + f"{cmd_text} &\n{_indent(lines[0])}wait"
            edits = [Edit(ctx.script.path, c.line, c.end_line, new)]
            fix = f"{cmd_text} & wait"
        yield ctx.finding(
            c.line, WARNING, "trap-blocked-by-foreground",
            f"bash runs a trap only after the foreground command exits: the {sig[0]} trap (line {traps[0].line}) "
            "fires when this step has already ended (or been killed at the time limit), too late to checkpoint",
            fix, edits=edits)
        return


def rule_cuda_visible_devices(ctx: Context) -> Iterator[Finding]:
    """CUDA_VISIBLE_DEVICES overridden with a rank or local id."""
    for a in ctx.script.assignments:
        if a.name != "CUDA_VISIBLE_DEVICES" or a.value is None:
            continue
        names = {n for p in a.value.refs() for n in p.names}
        if names & {"SLURM_LOCALID", "SLURM_PROCID", "LOCAL_RANK", "SLURM_NODEID", "RANK"}:
            edits = _delete_assignment(ctx, a)
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
    return Edit(file, outer.line, outer.line - 1, _indent(ctx.script.line_text(outer.line, file)) + text)


def rule_master_addr_loopback(ctx: Context) -> Iterator[Finding]:
    """MASTER_ADDR (or --master_addr / --rdzv_endpoint) is a loopback address in a multi-node job."""
    if not ctx.shape.multi_node:
        return
    for a in ctx.script.assignments:
        if a.name == "MASTER_ADDR" and a.value is not None and LOOPBACK_RE.match(a.value.literal() or ""):
            file = ctx.file_of(a)
            line = ctx.script.line_text(a.line, file)
            edits = [Edit(file, a.line, a.line, _indent(line) + MASTER_ADDR_FIX)] if _delete_assignment(ctx, a) else []
            yield ctx.finding(
                a.line, ERROR, "master-addr-loopback",
                f"MASTER_ADDR={a.value.literal()} is each node itself: on {ctx.nodes_text()} every node waits "
                "for a rendezvous on its own loopback (a hang until the timeout)", MASTER_ADDR_FIX,
                file=file, edits=edits)
    for cmd, launch, value, word in _launch_opt_words(ctx, ("master_addr", "rdzv_endpoint", "main_process_ip")):
        host = value.rsplit(":", 1)[0] if ":" in value and not value.startswith("[") else value
        if LOOPBACK_RE.match(host):
            file = ctx.file_of(cmd)
            where = _locate(ctx, file, word.line, re.escape(host))
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
        if not _is_c10d(launch):
            return False
        if any("MASTER_PORT" in p.names for w in c.argv for p in w.refs()):
            return False
    # every srun step runs one of those launches
    for s in later:
        if s.name == "srun" and not any(c.srun is s for c, _ in launches_after):
            return False
    return True


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
        edits = [Edit(file, a.line, a.line, _indent(line) + MASTER_PORT_FIX)] if _delete_assignment(ctx, a) else []
        yield ctx.finding(
            a.line, WARNING, "fixed-master-port",
            f"MASTER_PORT={port} is the same for every job: {shared}", MASTER_PORT_FIX, file=file, edits=edits)
    for cmd, launch, value, word in _launch_opt_words(ctx, ("master_port", "main_process_port", "rdzv_endpoint")):
        port = value.rsplit(":", 1)[-1] if ":" in value or value.isdigit() else ""
        if port.isdigit():
            file = ctx.file_of(cmd)
            where = _locate(ctx, file, word.line, r"(?<![\w$])" + re.escape(port) + r"(?!\w)")
            line = ctx.script.line_text(where, file)
            new = re.sub(r"(?<![\w$])" + re.escape(port) + r"(?!\w)", "$((20000 + SLURM_JOB_ID % 20000))", line,
                         count=1)
            edits = [Edit(file, where, where, new)] if new != line else []
            yield ctx.finding(
                where, WARNING, "fixed-master-port",
                f"port {port} is the same for every job: {shared}", fix_text(edits, where, file) if edits else "",
                file=file, edits=edits)


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _tasks_per_node_edit(ctx: Context, srun: Command, value: int) -> List[Edit]:
    """Setting a step's tasks per node: its srun option, else the header's."""
    file = ctx.file_of(srun)
    line = ctx.script.line_text(srun.line, file)
    opts, _ = srun_options(srun.argv)
    if "ntasks-per-node" in opts:
        new = re.sub(r"--ntasks-per-node[= ]\S+", f"--ntasks-per-node={value}", line, count=1)
        return [Edit(file, srun.line, srun.line, new)] if new != line else []
    if "ntasks" not in opts and "n" not in opts:
        opt = ctx.script.opt("ntasks-per-node")
        if opt is not None:
            header = ctx.script.line_text(opt.line)
            new = re.sub(r"--ntasks-per-node[= ]\S+", f"--ntasks-per-node={value}", header, count=1)
            return [Edit(ctx.script.path, opt.line, opt.line, new)] if new != header else []
    new = re.sub(r"\bsrun\b", f"srun --ntasks-per-node={value}", line, count=1)
    new = re.sub(r"\s(--ntasks|-n)[= ]\S+", "", new, count=1)
    return [Edit(file, srun.line, srun.line, new)] if new != line else []


def _deepspeed_per_node(launch: Launch) -> bool:
    """deepspeed started on every node by srun on purpose: --no_ssh (one runner per node)."""
    return any(k in launch.opts for k in ("no_ssh", "no_ssh_check"))


def rule_double_launch(ctx: Context) -> Iterator[Finding]:
    """--ntasks-per-node > 1 with a launcher that spawns the processes itself; the DeepSpeed
    runner under srun (it starts the workers on every node itself)."""
    for cmd, launch in launches(ctx):
        if cmd.srun is None or not launch.spawns:
            continue
        t = step_tasks_per_node(ctx, cmd.srun)
        nodes = step_nodes(ctx, cmd.srun)
        file = ctx.file_of(cmd)
        if launch.kind == "deepspeed" and not _deepspeed_per_node(launch) and t * nodes > 1:
            if cmd.in_bash_c or cmd.srun.file != cmd.file:
                edits = []
            else:
                first = ctx.script.line_text(cmd.srun.line, file)
                text = one_line("\n".join(ctx.script.line_text(x, file)
                                          for x in range(cmd.srun.line, cmd.srun.end_line + 1)))
                text = text[text.index(cmd.argv[0].text):] if cmd.argv[0].text in text else ""
                edits = [Edit(file, cmd.srun.line, cmd.srun.end_line, _indent(first) + text)] if text else []
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
        edits = _tasks_per_node_edit(ctx, cmd.srun, 1)
        yield ctx.finding(
            cmd.line, ERROR, "double-launch",
            f"{t} tasks per node{where} each start {launch.kind}, which {spawns}: on {ctx.nodes_text()} "
            f"{t} launchers per node claim the same node rank and ranks collide",
            (fix_text(edits, cmd.line, file) + ("" if "#" in fix_text(edits, cmd.line, file) else
                                               "   # one launcher per node; it starts one process per GPU"))
            if edits else "", file=file, edits=edits)


# ---------------------------------------------------------------- torchrun's node count

# torchrun reads each option from PET_<OPTION> too: PET_NNODES=2 is --nnodes=2
_PET_NNODES = re.compile(r"\bPET_NNODES\b")


def _options_value(ctx: Context, name: str, seq: int, decides: "re.Pattern[str]") -> Optional[Word]:
    """What a variable that carries launcher options holds at statement ``seq``: its last value
    (appends, `ARGS+=(...)` or `ARGS="$ARGS ..."`, build on the value before). Where the script sets
    it afresh more than once (an if/else of two option sets: which one runs is not known here),
    the options ``decides`` matches must be the same in each, else None; None where it is never set."""
    mine = [a for a in ctx.script.assignments
            if a.name == name and a.shell == BATCH and a.prefix_of is None and a.seq <= seq]
    if not mine or mine[-1].value is None:
        return None
    fresh = [a for a in mine if not a.appends and not any(name in p.names for p in (a.value.refs() if a.value else ()))]
    choices = {mine[-1].value.flat()} | {a.value.flat() if a.value is not None else "" for a in fresh[:-1]}
    if len({tuple(decides.findall(c)) for c in choices}) > 1:
        return None
    return mine[-1].value


# the options that decide how many nodes a step has (srun's) and how many torchrun waits for
_SRUN_NODE_OPTS = re.compile(r"(?:^|\s)(-[Nnwr]\s*\S+|--(?:nodes|ntasks|nodelist|relative|ntasks-per-node)\b\S*)")
_NNODES_OPTS = re.compile(r"(?:^|\s)(--nnodes?\b\S*|--standalone\b)")


def _takes_value(word: str) -> bool:
    """An srun option written apart from the value that follows it (`--container-image $IMAGE`)."""
    if word.startswith("--"):
        return "=" not in word and word[2:] in _SRUN_LONG_WITH_ARG and word[2:] not in _SRUN_LONG_OPTIONAL
    return len(word) == 2 and word.startswith("-") and word[1] in _SRUN_SHORT_WITH_ARG


def _follow_options(ctx: Context, words: List[str], seq: int, stop: int,
                    decides: "re.Pattern[str]") -> Optional[List[str]]:
    """``words`` with each whole-word variable among the first ``stop`` expanded to the options it
    carries; None where one cannot be followed."""
    out: List[str] = []
    for i, w in enumerate(words):
        if i >= stop or "$" not in w:
            out.append(w)
            continue
        m = _WHOLE_VAR.fullmatch(w)
        if m is None or _takes_value(out[-1] if out else ""):
            out.append(w)  # a value ($IMAGE after --container-image, --nnodes=$N): not options
            continue
        value = _options_value(ctx, m.group(1), seq, decides)
        if value is None:
            return None
        out.extend(value.flat().replace('"', " ").replace("'", " ").split())
    return out


# the arguments of a script or function: "$@", $*, $1
_ARGS_VAR = re.compile(r'"?\$\{?[@*0-9]\}?"?')
_SHELLS = ("bash", "sh", "zsh", "dash")


def _torchrun_of_step(ctx: Context, cmd: Command) -> Optional[Tuple[Launch, int, Dict[str, Tuple[str, Word]]]]:
    """The torchrun (or torch.distributed.run/launch) a task command runs, with the variables and
    arrays that carry its options expanded where they stand (`torchrun $DIST_ARGS train.py`,
    `torchrun "${TORCHRUN_ARGS[@]}" train.py`); where it starts in the command's words; and the
    options of its srun step, also those a variable carries (`srun $SRUN_ARGS ...`,
    `srun "${ARGS[@]}" torchrun ...`) and a program that wraps it (`nsys profile ... torchrun`).
    None where the command runs no torchrun, or where a variable in the place of options
    (torchrun's or srun's) cannot be followed: it may carry any option (`torchrun $EXTRA "$@"`)."""
    words = cmd.words()
    at = None
    for i, w in enumerate(words):
        if w.rsplit("/", 1)[-1] in _SHELLS:
            return None  # `bash -c STRING`: its commands are looked at themselves
        launch = classify(words[i:])
        if launch is not None:
            if launch.kind not in ("torchrun", "torch.distributed.launch"):
                return None
            at = i
            break
    if at is None:
        return None
    before = _follow_options(ctx, [x.flat() for x in cmd.srun.argv[1:cmd.srun.prog_index]] + words[:at], cmd.seq,
                             cmd.srun.prog_index - 1 + at, _SRUN_NODE_OPTS)
    if before is None:
        return None
    srun_opts, _ = srun_options([Word([Part("lit", x)], cmd.line, x) for x in ["srun"] + before])
    rest = words[at:]
    for _ in range(8):
        launch = classify(rest)
        if launch is None:
            return None
        prog = launch.program
        if _ARGS_VAR.fullmatch(prog):
            return None  # "$@": the options a caller gives
        m = _WHOLE_VAR.fullmatch(prog)
        if m is None:
            break  # the program: train.py, $(dirname "$PWD")/ddp.py
        value = _options_value(ctx, m.group(1), cmd.seq, _NNODES_OPTS) if m else None
        if value is None:
            return None
        expanded = value.flat().replace('"', " ").replace("'", " ").split()
        if expanded and not expanded[0].startswith("-"):
            break  # the program itself (TRAIN_SCRIPT=train.py), not options
        i = launch.program_index
        rest = rest[:i] + expanded + rest[i + 1:]
    else:
        return None
    for key in list(launch.opts):
        if len(key) >= 2 and "nnodes".startswith(key) and key != "nnodes":
            launch.opts["nnodes"] = launch.opts.pop(key)  # argparse takes a prefix: --nnode
    return launch, at, srun_opts


def _nodes_of_step(ctx: Context, opts: Dict[str, Tuple[str, Word]]) -> Optional[int]:
    """Nodes of a step from its srun options (as step_nodes); None where hosts named with
    -w/--nodelist decide it."""
    if ("nodelist" in opts or "w" in opts) and "nodes" not in opts:
        return None
    nodes = _count(opts["nodes"][0], -1) if "nodes" in opts else None
    if nodes is None and "ntasks" in opts and "ntasks-per-node" not in opts and _count(opts["ntasks"][0], 0) == 1:
        return 1
    if nodes is None and "nodes" in opts and not re.search(r"SLURM_(JOB_NUM_NODES|NNODES)\b", opts["nodes"][0]):
        return None  # --nodes=$N: not known here
    return ctx.shape.nodes_max if nodes is None else min(nodes, ctx.shape.nodes_max)


def _srun_literal_nodes(srun: Command) -> Optional[str]:
    opts, _ = srun_options(srun.argv)
    value = opts.get("nodes", (None, None))[0]
    return value if value is not None and value.isdigit() else None


def _nnodes_edits(ctx: Context, cmd: Command, launch: Launch, at: int, count: str) -> List[Edit]:
    """Give the launch the step's node count, and a rendezvous that numbers the nodes where it has
    none (a static one without --node_rank would make every node rank 0)."""
    file = ctx.file_of(cmd)
    opts = [f"--nnodes={count}"]
    if not _is_c10d(launch) and "node_rank" not in launch.opts:
        host = launch.opt("master_addr")
        port = launch.opt("master_port")
        if not host or LOOPBACK_RE.match(host.strip("'\"")):
            host = '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
        if not port or port.isdigit() and not whole_node(ctx):
            port = "$((20000 + SLURM_JOB_ID % 20000))"
        opts += ["--rdzv_backend=c10d", f"--rdzv_endpoint={host}:{port}", "--rdzv_id=$SLURM_JOB_ID"]
    new = " ".join(opts)
    start = cmd.argv[at].line if at < len(cmd.argv) else cmd.line
    if "standalone" in launch.opts:
        pattern, repl = r"--standalone\b", new
    elif "nnodes" in launch.opts:
        pattern, repl = r"--nnodes?(?:=|\s+)['\"]?[\w:]+['\"]?", new
    else:
        pattern = r"(?<![\w.-])(torchrun|-m\s+torch\.distributed\.(?:run|launch))(?![\w.-])"
        repl = None
    line_no = _locate(ctx, file, start, pattern)
    line = ctx.script.line_text(line_no, file)
    if repl is None:
        text = re.sub(pattern, lambda m: m.group(1) + " " + new, line, count=1)
    else:
        text = re.sub(pattern, lambda m: repl, line, count=1)
    return [Edit(file, line_no, line_no, text)] if text != line else []


def _nnodes_problem(ctx: Context, launch: Launch, nodes: int, fixed: bool) -> Optional[str]:
    """What goes wrong when srun starts one agent on each of ``nodes`` nodes, or None."""
    name = "torchrun" if launch.kind == "torchrun" else "torch.distributed.launch"
    nproc = _int(launch.opt("nproc_per_node"))
    one = f"WORLD_SIZE {nproc}, not {nproc * nodes}" if nproc else "WORLD_SIZE of one node"
    agents = f"srun starts a {name} agent on each of {nodes} nodes"
    value = (launch.opt("nnodes") or "").strip("'\"")
    lo, hi = parse_nnodes(value) if "nnodes" in launch.opts else (1, 1)
    if "standalone" in launch.opts:
        return (f"--standalone makes each agent a one-node job with a rendezvous of its own on localhost, and "
                f"{agents}: {nodes} separate trainings ({one}), and no error says so")
    if hi == 1:
        said = "has no --nnodes (its default is 1)" if "nnodes" not in launch.opts else f"is given --nnodes {value}"
        endpoint = (launch.opt("rdzv_endpoint") or "").strip("'\"")
        addr = (launch.opt("master_addr") or "").strip("'\"")
        if _is_c10d(launch) and endpoint and not LOOPBACK_RE.match(endpoint.rsplit(":", 1)[0]):
            spare = "the other node waits as a spare and never trains" if nodes == 2 else \
                f"the other {nodes - 1} nodes wait as spares and never train"
            how = (f"the first agent to reach their shared rendezvous ({endpoint}) forms a one-node job and trains "
                   f"alone ({one}); {spare}")
        elif not _is_c10d(launch) and addr and not LOOPBACK_RE.match(addr):
            how = (f"every agent is node 0 of a one-node job at {addr}, so the workers of all {nodes} nodes take the "
                   f"same ranks ({one}): ranks collide (an error or a hang)")
        else:
            how = f"each agent forms a one-node job of its own: {nodes} separate trainings ({one}), and no error says so"
        return f"{name} {said}, and {agents}: {how}"
    if not fixed or lo is None or lo <= nodes <= hi:
        return None  # --nnodes=$SLURM_NNODES, a range that takes the step, or a node count not fixed here
    if lo > nodes:
        more = lo - nodes
        return (f"{name} is given --nnodes {value}, and {agents}: the rendezvous waits for {more} more "
                f"node{'s' if more != 1 else ''} that never come{'s' if more == 1 else ''} (a hang until its timeout)")
    return (f"{name} is given --nnodes {value}, and {agents}: only {hi} of them can join; the other "
            f"{nodes - hi} wait (c10d) or get a node rank out of range (static)")


def _srun_options_in_variable(ctx: Context, cmd: Command) -> bool:
    """For a command rebuilt from `srun $VAR ...`: whether $VAR holds srun's options (its value
    starts with one), not the command (`srun $CMD` with CMD="torchrun ...")."""
    for c in ctx.script.commands:
        if c.srun is cmd.srun and c.shell == TASK and not c.expanded and c.argv:
            m = _WHOLE_VAR.fullmatch(c.argv[0].flat())
            a = ctx.script.assignment_before(m.group(1), c.seq) if m else None
            value = a.value.flat().strip("\"' ") if a is not None and a.value is not None else ""
            return value.startswith("-")
    return False


def rule_nnodes_mismatch(ctx: Context) -> Iterator[Finding]:
    """srun starts a torchrun agent on each of several nodes, and torchrun is told of another
    number of nodes: no --nnodes (its default is 1), --nnodes 1, --standalone, a literal count
    the step does not have."""
    if not ctx.shape.multi_node:
        return
    if any(_PET_NNODES.search(t) for t in [ctx.script.text] + list(ctx.script.files.values())):
        return  # torchrun reads --nnodes from PET_NNODES
    seen = set()
    for cmd in ctx.script.commands:
        if cmd.shell != TASK or cmd.srun is None or _is_bash_c(cmd) or cmd.srun.seq in seen:
            continue
        if cmd.expanded and _srun_options_in_variable(ctx, cmd):
            continue  # `srun $SRUN_ARGS torchrun ...`: the step as written says which options srun gets
        found = _torchrun_of_step(ctx, cmd)
        if found is None:
            continue
        launch, at, srun_opts = found
        nodes = _nodes_of_step(ctx, srun_opts)
        if nodes is None or nodes < 2:
            continue
        literal = _count(srun_opts["nodes"][0], 0) if "nodes" in srun_opts else None
        fixed = not ctx.assumed_nodes and (literal is not None and "-" not in srun_opts["nodes"][0]
                                           or "nodes" not in srun_opts and ctx.shape.nodes == ctx.shape.nodes_max)
        what = _nnodes_problem(ctx, launch, nodes, fixed)
        if what is None:
            continue
        seen.add(cmd.srun.seq)
        file = ctx.file_of(cmd)
        count = str(literal) if literal is not None and literal < ctx.shape.nodes_max else "$SLURM_JOB_NUM_NODES"
        edits = _nnodes_edits(ctx, cmd, launch, at, count)
        yield ctx.finding(cmd.line, ERROR, "nnodes-mismatch", what, fix_text(edits, cmd.line, file) if edits else "",
                          file=file, edits=edits)

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
            if t > 1 or launch.kind == "deepspeed" and cmd.srun is not None and not _deepspeed_per_node(launch):
                continue  # double-launch says it
            nproc = _int(launch.opt("nproc_per_node", "num_gpus"))
            if nproc is None:
                continue
            procs = t * nproc
            idx = launch.opts.get("nproc_per_node", launch.opts.get("num_gpus", ("", 0)))[1]
            line = cmd.argv[idx].line if idx < len(cmd.argv) else cmd.line
            line = _locate(ctx, file, line, r"--(nproc[_-]per[_-]node|num[_-]gpus)[= ]" + str(nproc) + r"\b")
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
                edits = _tasks_per_node_edit(ctx, cmd.srun, g)
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
        if any(launch.kind == "deepspeed" and not _deepspeed_per_node(launch) for launch in steps):
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
            new = _indent(lines[0]) + "srun --ntasks-per-node=1 --kill-on-bad-exit=1 " + one_line("\n".join(lines))
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
            edits = [Edit(file, cmd.line, cmd.line - 1, _indent(lines[0]) + make)]
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
            new = _indent(lines[0]) + f"srun {per_node}--kill-on-bad-exit=1 " + run
            simple = not any(re.search(r"\|\||&&|;|\||&\s*$", x.split("#")[0]) for x in lines)
            edits = [Edit(file, cmd.line, cmd.end_line, new)] if simple and not cmd.in_bash_c else []
            yield ctx.finding(
                cmd.line, WARNING, "single-node-launch",
                f"runs once, on the first node: {_idle(ctx)}", new.strip() if edits else "", file=file, edits=edits)


def rule_unset_launcher_variable(ctx: Context) -> Iterator[Finding]:
    """$MASTER_ADDR/$MASTER_PORT handed to a launcher but never set in the script."""
    if not ctx.shape.multi_node:
        return
    seen = set()
    for cmd, launch in launches(ctx):
        for name in ("master_addr", "master_port", "rdzv_endpoint", "main_process_ip", "main_process_port"):
            if name not in launch.opts:
                continue
            if name == "master_port" and launch.kind == "torchrun" and _is_c10d(launch):
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
                            edits = [Edit(afile, a.line, a.line, _indent(aline) + "export " + aline.strip())]
                        else:
                            edits = [_insert_before(ctx, cmd, fix)]
                        file = ctx.file_of(cmd)
                        yield ctx.finding(
                            p.line, WARNING, "unset-launcher-variable",
                            f"${var} {problem}: unless the submitting shell exports it, {launch.kind} gets an "
                            f"empty value and falls back to {'127.0.0.1' if var == 'MASTER_ADDR' else '29500'}"
                            + (f": on {ctx.nodes_text()} each node rendezvous with itself" if var == "MASTER_ADDR"
                               else ""), fix_text(edits, p.line, file), file=file, edits=edits)


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


@dataclass(frozen=True)
class Rule:
    id: str
    level: str  # the highest level it reports
    func: Callable[[Context], Iterator[Finding]]
    title: str


RULES: Tuple[Rule, ...] = (
    Rule("rank-var-in-batch-shell", ERROR, rule_rank_var_in_batch_shell,
         "per-task variable expanded by the batch shell and handed to srun's tasks"),
    Rule("rank-env-before-srun", ERROR, rule_rank_env_before_srun,
         "RANK/LOCAL_RANK exported from SLURM_PROCID/SLURM_LOCALID before srun"),
    Rule("no-rank-env", WARNING, rule_no_rank_env, "srun python with several tasks and no RANK set"),
    Rule("signal-not-to-batch", ERROR, rule_signal_not_to_batch, "--signal without B: while the script traps it"),
    Rule("trap-blocked-by-foreground", WARNING, rule_trap_blocked_by_foreground,
         "trap in the batch shell, step in the foreground"),
    Rule("cuda-visible-devices-override", WARNING, rule_cuda_visible_devices,
         "CUDA_VISIBLE_DEVICES set from a local id or rank"),
    Rule("master-addr-loopback", ERROR, rule_master_addr_loopback, "MASTER_ADDR=localhost in a multi-node job"),
    Rule("fixed-master-port", WARNING, rule_fixed_master_port, "a fixed MASTER_PORT"),
    Rule("double-launch", ERROR, rule_double_launch, "several tasks per node each running a spawning launcher"),
    Rule("nnodes-mismatch", ERROR, rule_nnodes_mismatch,
         "srun starts torchrun on several nodes, torchrun is told of one (no --nnodes, --standalone)"),
    Rule("gpus-per-node-mismatch", ERROR, rule_gpus_per_node, "processes per node vs GPUs per node"),
    Rule("no-kill-on-bad-exit", WARNING, rule_kill_on_bad_exit, "multi-node step without --kill-on-bad-exit"),
    Rule("deprecated-torch-launch", WARNING, rule_deprecated_launch, "python -m torch.distributed.launch"),
    Rule("launcher-without-srun", ERROR, rule_launcher_without_srun,
         "a multi-node launch started by the batch shell only (single-node-launch: plain python)"),
    Rule("unset-launcher-variable", WARNING, rule_unset_launcher_variable,
         "$MASTER_ADDR/$MASTER_PORT used but never set"),
    Rule("sbatch-after-command", WARNING, rule_late_sbatch, "#SBATCH after the first command"),
)


_MULTI_NODE_TEXT = re.compile(r"SLURM_JOB_NUM_NODES|SLURM_NNODES|SLURM_NODEID|SLURM_JOB_NODELIST|SLURM_NODELIST|"
                              r"scontrol\s+show\s+hostnames?")


def clearly_multi_node(script: Script) -> bool:
    """A script that is written for several nodes: srun and a distributed launcher (torchrun,
    deepspeed, accelerate, a python entry that is distributed), or srun and the node list."""
    sruns = [c for c in script.commands if c.name == "srun"]
    if not sruns:
        return False
    for cmd in script.commands:
        launch = classify(cmd.words())
        if launch is None:
            continue
        if launch.spawns:
            return True
        if cmd.srun is not None and cmd.entry and read_entry(cmd.entry).distributed:
            return True
    return any(_MULTI_NODE_TEXT.search(t) for t in [script.text] + list(script.files.values()))


def context_of(script: Script, nodes: Optional[int] = None) -> Context:
    """The shape the rules speak of: the header's, ``nodes`` as `sbatch -N` gives it, or -N 2 for
    a script without --nodes that is clearly written for several nodes."""
    shape = shape_of(script, nodes)
    if nodes is None and not shape.nodes_stated and clearly_multi_node(script):
        return Context(script, shape_of(script, 2), assumed_nodes=True)
    return Context(script, shape)


def check_script(script: Script, nodes: Optional[int] = None) -> List[Finding]:
    """Every finding of every rule on ``script``, by line (one per rule and place)."""
    ctx = context_of(script, nodes)
    seen = set()
    out: List[Finding] = []
    for rule in RULES:
        for f in rule.func(ctx):
            key = (f.rule, f.path, f.line)
            if key not in seen:
                seen.add(key)
                out.append(f)
    return sorted(out, key=lambda f: (f.path != script.path, f.path, f.line, f.rule))


def apply_edits(texts: Dict[str, str], edits: Sequence[Edit]) -> Dict[str, str]:
    """``texts`` (file -> text) with ``edits`` made; the edits' lines are those before any edit."""
    out = dict(texts)
    by_file: Dict[str, List[Edit]] = {}
    for e in edits:
        by_file.setdefault(e.file, []).append(e)
    for file, es in by_file.items():
        lines = out.get(file, "").split("\n")
        for e in sorted(es, key=lambda e: (-e.start, -e.end)):
            new = e.text.split("\n") if e.text else []
            if e.end < e.start:
                lines[e.start - 1:e.start - 1] = new
            else:
                lines[e.start - 1:e.end] = new
        out[file] = "\n".join(lines)
    return out
