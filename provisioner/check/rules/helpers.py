"""What the rules ask of a script: its launches and steps (tasks and nodes per step), the
batch shell's variables that reach a command, the words of a launcher, and where a fix goes."""

from __future__ import annotations

import re
from typing import Iterator, List, Optional, Sequence, Tuple

from provisioner.check.launch import Launch, classify
from provisioner.check.options import srun_options
from provisioner.check.script import Assignment, BATCH, Command, Part
from provisioner.check.rules.core import Context, Edit, PER_TASK_VARS


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


def count_value(value: str, end: int) -> Optional[int]:
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
        per_node = count_value(opts["ntasks-per-node"][0], 0)
        return ctx.shape.tasks_per_node if per_node is None else per_node
    if "ntasks" in opts:
        nodes = count_value(opts["nodes"][0], 0) if "nodes" in opts else ctx.shape.nodes_max
        tasks = count_value(opts["ntasks"][0], 0)
        if nodes is None or tasks is None or "-" in opts["ntasks"][0]:
            return ctx.shape.tasks_per_node
        return -(-tasks // max(nodes, 1))
    return ctx.shape.tasks_per_node


def step_nodes(ctx: Context, srun: Optional[Command]) -> int:
    """Nodes of an srun step: its own --nodes (a range's upper bound), else the header's."""
    if srun is None:
        return 1
    opts, _ = srun_options(srun.argv)
    nodes = count_value(opts["nodes"][0], -1) if "nodes" in opts else None
    if nodes is None and "ntasks" in opts and "ntasks-per-node" not in opts and count_value(opts["ntasks"][0], 0) == 1:
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


def indent_of(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def locate(ctx: Context, file: str, line: int, pattern: str, span: int = 40) -> int:
    """The first line from ``line`` on (within ``span``) whose text matches ``pattern``: a word's
    line inside a multi-line string is where the string's piece starts, not always its own."""
    for x in range(line, line + span):
        text = ctx.script.line_text(x, file)
        if re.search(pattern, text):
            return x
    return line


def is_c10d(launch: Optional[Launch]) -> bool:
    """torchrun with a dynamic rendezvous: it numbers the nodes itself and ignores --node_rank."""
    if launch is None or launch.kind != "torchrun":
        return False
    backend = (launch.opt("rdzv_backend") or "static").strip("'\"")
    return backend in ("c10d", "etcd", "etcd-v2", "etcd_v2")


_DYNAMIC_RDZV = re.compile(r"--rdzv[_-]backend(?:=|\s+)['\"]?(c10d|etcd|etcd-v2|etcd_v2)\b")


def ignores_node_rank(launch: Optional[Launch], words: Sequence[str] = ()) -> bool:
    """A launcher whose node (machine) rank does not matter: torchrun (or its module forms) with
    a dynamic rendezvous, and `accelerate launch --rdzv_backend c10d`, which hands its
    --machine_rank to torchrun as --node_rank. ``words``: the command's words, searched too
    (an option the launcher's parse stopped before, behind one it does not know)."""
    if launch is None or launch.kind not in ("torchrun", "torch.distributed.launch", "accelerate"):
        return False
    backend = (launch.opt("rdzv_backend") or "static").strip("'\"")
    return backend in ("c10d", "etcd", "etcd-v2", "etcd_v2") or bool(_DYNAMIC_RDZV.search(" ".join(words)))


_RANK_OPT_RE = re.compile(r"--(?:node|machine)[_-]rank")


def rank_opt_value(words: Sequence[str], i: int) -> bool:
    """Whether word ``i`` is the value of --node_rank / --machine_rank (`--node_rank X`, `--node_rank=X`)."""
    if re.match(_RANK_OPT_RE.pattern + "=", words[i]):
        return True
    return i > 0 and _RANK_OPT_RE.fullmatch(words[i - 1]) is not None


def only_as_rank_opt(text: str, name: str) -> bool:
    """Whether every $name in ``text`` (the value of a variable that carries launcher options,
    `DIST_ARGS="--nnodes 2 --node_rank $NODE_RANK ..."`) is the value of a node-rank option."""
    ref = re.compile(r"\$\{?" + re.escape(name) + r"\b")
    words = text.replace('"', " ").replace("'", " ").split()
    hits = [i for i, w in enumerate(words) if ref.search(w)]
    return bool(hits) and all(rank_opt_value(words, i) for i in hits)


_WRAPPER_WORD = re.compile(r"(bash|sh|env|exec|-\S+|\w+=\S*)")


def launch_in(words: Sequence[str]) -> Optional[Launch]:
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
WHOLE_VAR = re.compile(r'"?\$\{?(\w+)(?:\[[@*]\])?\}?"?')


def launch_with_vars(ctx: Context, cmd: Command) -> Optional[Launch]:
    """The launch ``cmd`` makes with the variables that carry its options expanded
    (`srun torchrun $DIST_ARGS train.py`, DIST_ARGS="--rdzv_backend c10d ..." set before)."""
    words: List[str] = []
    for w in cmd.argv:
        text = w.flat()
        m = WHOLE_VAR.fullmatch(text)
        a = ctx.script.assignment_before(m.group(1), cmd.seq) if m else None
        if a is not None and a.value is not None:
            words.extend(a.value.flat().replace('"', " ").split())
        else:
            words.append(w.literal() or text)
    return classify(words)


def ignores_node_rank_with_vars(ctx: Context, cmd: Command) -> bool:
    launch = launch_with_vars(ctx, cmd)
    if launch is None:
        return False
    words = []
    for w in cmd.argv:
        m = WHOLE_VAR.fullmatch(w.flat())
        a = ctx.script.assignment_before(m.group(1), cmd.seq) if m else None
        words.append(a.value.flat() if a is not None and a.value is not None else w.flat())
    return ignores_node_rank(launch, words)


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


SHORT_STEPS = {"pkill", "kill", "killall", "hostname", "nvidia-smi", "mkdir", "rm", "cp", "mv", "echo", "touch",
                "date", "ls", "cat", "true", "env", "printenv", "scontrol", "sleep", "sync", "df", "free", "uname",
                "ln", "chmod", "tar", "rsync", "pip", "nvcc", "which", "id", "whoami", "test", "["}


def is_bash_c(cmd: Command) -> bool:
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


def delete_assignment(ctx: Context, a: Assignment) -> List[Edit]:
    """Deleting an assignment's line, where the line holds nothing else."""
    file = ctx.file_of(a)
    line = ctx.script.line_text(a.line, file).strip()
    if a.value is None or not re.fullmatch(r"(export\s+|declare\s+-x\s+)?" + re.escape(a.name) + r"=\S+(\s+#.*)?", line):
        return []
    return [Edit(file, a.line, a.line, "")]


def int_value(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def tasks_per_node_edit(ctx: Context, srun: Command, value: int) -> List[Edit]:
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


def deepspeed_per_node(launch: Launch) -> bool:
    """deepspeed started on every node by srun on purpose: --no_ssh (one runner per node)."""
    return any(k in launch.opts for k in ("no_ssh", "no_ssh_check"))
