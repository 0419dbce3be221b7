"""torchrun's node count against the step's: srun starts torchrun on several nodes while
torchrun is told of one (no --nnodes, --standalone), through options, variables and
`bash -c` strings."""

from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Tuple

from provisioner.check.launch import Launch, classify, parse_nnodes
from provisioner.check.options import (SRUN_LONG_OPTIONAL, SRUN_LONG_WITH_ARG, SRUN_SHORT_WITH_ARG,
                                       srun_options)
from provisioner.check.script import BATCH, Command, Part, TASK, Word
from provisioner.check.rules.core import Context, ERROR, Edit, Finding, LOOPBACK_RE, fix_text, rule
from provisioner.check.rules.helpers import WHOLE_VAR, count_value, int_value, is_bash_c, is_c10d, locate, whole_node


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
        return "=" not in word and word[2:] in SRUN_LONG_WITH_ARG and word[2:] not in SRUN_LONG_OPTIONAL
    return len(word) == 2 and word.startswith("-") and word[1] in SRUN_SHORT_WITH_ARG


def _follow_options(ctx: Context, words: List[str], seq: int, stop: int,
                    decides: "re.Pattern[str]") -> Optional[List[str]]:
    """``words`` with each whole-word variable among the first ``stop`` expanded to the options it
    carries; None where one cannot be followed."""
    out: List[str] = []
    for i, w in enumerate(words):
        if i >= stop or "$" not in w:
            out.append(w)
            continue
        m = WHOLE_VAR.fullmatch(w)
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
        m = WHOLE_VAR.fullmatch(prog)
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
    nodes = count_value(opts["nodes"][0], -1) if "nodes" in opts else None
    if nodes is None and "ntasks" in opts and "ntasks-per-node" not in opts and count_value(opts["ntasks"][0], 0) == 1:
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
    if not is_c10d(launch) and "node_rank" not in launch.opts:
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
    line_no = locate(ctx, file, start, pattern)
    line = ctx.script.line_text(line_no, file)
    if repl is None:
        text = re.sub(pattern, lambda m: m.group(1) + " " + new, line, count=1)
    else:
        text = re.sub(pattern, lambda m: repl, line, count=1)
    return [Edit(file, line_no, line_no, text)] if text != line else []


def _nnodes_problem(ctx: Context, launch: Launch, nodes: int, fixed: bool) -> Optional[str]:
    """What goes wrong when srun starts one agent on each of ``nodes`` nodes, or None."""
    name = "torchrun" if launch.kind == "torchrun" else "torch.distributed.launch"
    nproc = int_value(launch.opt("nproc_per_node"))
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
        if is_c10d(launch) and endpoint and not LOOPBACK_RE.match(endpoint.rsplit(":", 1)[0]):
            spare = "the other node waits as a spare and never trains" if nodes == 2 else \
                f"the other {nodes - 1} nodes wait as spares and never train"
            how = (f"the first agent to reach their shared rendezvous ({endpoint}) forms a one-node job and trains "
                   f"alone ({one}); {spare}")
        elif not is_c10d(launch) and addr and not LOOPBACK_RE.match(addr):
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
            m = WHOLE_VAR.fullmatch(c.argv[0].flat())
            a = ctx.script.assignment_before(m.group(1), c.seq) if m else None
            value = a.value.flat().strip("\"' ") if a is not None and a.value is not None else ""
            return value.startswith("-")
    return False


@rule("nnodes-mismatch", ERROR,
      "srun starts torchrun on several nodes, torchrun is told of one (no --nnodes, --standalone)")
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
        if cmd.shell != TASK or cmd.srun is None or is_bash_c(cmd) or cmd.srun.seq in seen:
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
        literal = count_value(srun_opts["nodes"][0], 0) if "nodes" in srun_opts else None
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
