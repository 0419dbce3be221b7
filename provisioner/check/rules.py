"""The static rules of `simcluster check`: one function per rule, each yielding Findings.

A rule sees the parsed script (parse.Script), the job shape from its header
(shape.Shape) and the launches (launch.classify). RULES lists them with their id and
level; docs/check.md explains each one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from provisioner.check.launch import Launch, classify, parse_nnodes
from provisioner.check.parse import BATCH, TASK, Assignment, Command, Part, Script, Word, srun_options
from provisioner.check.shape import Shape, shape_of

ERROR = "error"
WARNING = "warning"

# Set by Slurm per task; in the batch shell they hold the values of task 0 on the first node.
PER_TASK_VARS = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_TASK_PID")
RANK_ENV = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")
LOOPBACK_RE = re.compile(r"^(localhost|127(\.\d+){3}|::1|0\.0\.0\.0)$")
MASTER_ADDR_FIX = 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
MASTER_PORT_FIX = "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))"
SIGNALS = {"1": "HUP", "2": "INT", "10": "USR1", "12": "USR2", "15": "TERM", "18": "CONT", "19": "STOP"}


@dataclass
class Finding:
    path: str
    line: int
    severity: str
    rule: str
    message: str
    fix: str = ""
    source: str = "simcluster"

    def to_dict(self):
        return {"file": self.path, "line": self.line, "severity": self.severity, "rule": self.rule,
                "message": self.message, "fix": self.fix, "source": self.source}


@dataclass
class Context:
    script: Script
    shape: Shape

    def finding(self, line: int, severity: str, rule: str, message: str, fix: str = "") -> Finding:
        return Finding(self.script.path, line, severity, rule, message, fix)

    @property
    def n(self) -> int:
        return self.shape.nodes_max

    def nodes_text(self) -> str:
        return f"{self.n} node{'s' if self.n != 1 else ''}"


# ---------------------------------------------------------------- helpers

def tainted(ctx: Context, part: Part, line: int, depth: int = 0) -> Optional[str]:
    """The per-task Slurm variable ``part`` carries when the batch shell expands it, or None:
    `$SLURM_NODEID` itself, or `$NODE_RANK` after `NODE_RANK=$SLURM_NODEID`."""
    if part.shell != BATCH or depth > 8:
        return None
    for name in part.names:
        if name in PER_TASK_VARS:
            return name
        a = ctx.script.assignment_before(name, line)
        if a is not None and a.value is not None:
            for p in a.value.refs(BATCH):
                found = tainted(ctx, p, a.line, depth + 1)
                if found:
                    return found
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
    return ctx.shape.nodes_max if nodes is None else nodes


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
        out.append(one_line(text).replace('"', '\\"'))
    return " ".join(out)


def _var_pattern(name: str) -> str:
    return r"\$(\{" + re.escape(name) + r"\}|" + re.escape(name) + r"\b)"


# ---------------------------------------------------------------- the rules

def rule_rank_var_in_batch_shell(ctx: Context) -> Iterator[Finding]:
    """A per-task Slurm variable expanded by the batch shell, handed to a per-task command."""
    for cmd in ctx.script.commands:
        if cmd.shell != TASK or cmd.srun is None:
            continue
        tasks = step_nodes(ctx, cmd.srun) * step_tasks_per_node(ctx, cmd.srun)
        if tasks <= 1:
            continue
        for word in cmd.argv:
            for part in word.refs(BATCH):
                var = tainted(ctx, part, cmd.line)
                if var is None:
                    continue
                written = part.text
                if cmd.in_bash_c:
                    fix = re.sub(re.escape(written), "\\\\$" + var, ctx.script.line_text(part.line), count=1).strip()
                else:
                    fix = f'{srun_prefix(cmd.srun)} bash -c "{prog_text(cmd, [(written, chr(92) + "$" + var)])}"'
                launch = classify(cmd.words())
                alt = ""
                if launch is not None and launch.kind in ("torchrun", "torch.distributed.launch") \
                        and "node_rank" in launch.opts:
                    alt = ("   (or drop --node_rank and let torchrun agree on node ranks: "
                           "--rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT)")
                value = "0" if var != "SLURMD_NODENAME" else "the first node's name"
                yield ctx.finding(
                    part.line, ERROR, "rank-var-in-batch-shell",
                    f"{written} is expanded once by the batch shell, to {value}: on {ctx.nodes_text()} all "
                    f"{tasks} tasks get {var}={value} (duplicate ranks: on one host EADDRINUSE, "
                    f"on real hosts a hang)", fix + alt)


def rule_rank_env_before_srun(ctx: Context) -> Iterator[Finding]:
    """RANK/LOCAL_RANK exported from SLURM_PROCID/SLURM_LOCALID in the batch shell, then srun."""
    sruns = [c for c in ctx.script.commands if c.shell == BATCH and c.name == "srun" and c.prog_index < len(c.argv)]
    for a in ctx.script.assignments:
        if a.shell != BATCH or a.name not in RANK_ENV or a.value is None:
            continue
        if not (a.exported or (a.prefix_of is not None and a.prefix_of.name == "srun")):
            continue
        var = next((v for p in a.value.refs(BATCH) for v in [tainted(ctx, p, a.line)] if v), None)
        if var is None:
            continue
        later = [s for s in sruns if (s is a.prefix_of) or (a.prefix_of is None and s.line > a.line)]
        if not later:
            continue
        direct = [s for s in later if not _resets_rank(ctx, s, a.name)]
        srun = (direct or later)[0]
        task = next((c for c in ctx.script.commands if c.srun is srun and c.shell == TASK), None)
        prog = prog_text(task) if task is not None else "..."
        fix = f'{srun_prefix(srun)} bash -c "export {a.name}=\\${var}; exec {prog}"'
        tasks = ctx.shape.total_tasks
        if direct:
            yield ctx.finding(
                a.line, ERROR, "rank-env-before-srun",
                f"{a.name}=${var} is set in the batch shell, where {var} is 0: srun (line {srun.line}) hands "
                f"{a.name}=0 to all {tasks} tasks on {ctx.nodes_text()}: every process claims {a.name} 0",
                f"delete this line and set it in each task: {fix}")
        else:
            yield ctx.finding(
                a.line, WARNING, "rank-env-before-srun",
                f"{a.name}=${var} is set in the batch shell, where {var} is 0; the launcher at line {srun.line} "
                f"sets {a.name} for its workers, but any other step gets {a.name}=0 on all {ctx.nodes_text()}",
                "delete this line (the launcher sets it)")


def _resets_rank(ctx: Context, srun: Command, name: str) -> bool:
    """Whether the step started by ``srun`` sets ``name`` itself: a spawning launcher, or an
    assignment inside its `bash -c`."""
    for c in ctx.script.commands:
        if c.srun is srun:
            launch = classify(c.words())
            if launch is not None and launch.spawns:
                return True
    return any(
        x.name == name and x.shell == TASK and _owner(ctx, x) is srun for x in ctx.script.assignments)


def _owner(ctx: Context, a: Assignment) -> Optional[Command]:
    """The srun whose `bash -c` text holds assignment ``a`` (by line range)."""
    for c in ctx.script.commands:
        if c.shell == BATCH and c.name == "srun" and c.line <= a.line <= c.end_line:
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
        yield ctx.finding(
            cmd.line, WARNING, "no-rank-env",
            f"the {tasks} tasks on {ctx.nodes_text()} get no RANK/LOCAL_RANK (Slurm sets SLURM_PROCID, not "
            "what init_process_group('env://') reads): it fails unless the program maps SLURM_PROCID itself",
            f'{srun_prefix(cmd.srun)} bash -c "RANK=\\$SLURM_PROCID LOCAL_RANK=\\$SLURM_LOCALID '
            f'WORLD_SIZE=\\$SLURM_NTASKS exec {prog_text(cmd)}"')


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
    yield ctx.finding(
        line, ERROR, "signal-not-to-batch",
        f"--signal={value} goes to the job steps (every task on {ctx.nodes_text()}), never to the batch shell: "
        f"the trap at line {trapped[0].line} never runs and no checkpoint is written before the time limit",
        f"#SBATCH --signal={fixed}")


def rule_trap_blocked_by_foreground(ctx: Context) -> Iterator[Finding]:
    """A trap in the batch shell and the long-running step in the foreground."""
    sig = _header_signal(ctx)
    traps = _traps(ctx)
    if sig is None or not any(sig[0] in s for _, s in traps):
        return
    for c in ctx.script.commands:
        if c.shell != BATCH or c.background:
            continue
        if c.name == "srun" or classify(c.words()) is not None:
            cmd_line = one_line(c.source)
            if len(cmd_line) > 160:
                cmd_line = c.source.splitlines()[0].rstrip(" \\") + " ..."
            yield ctx.finding(
                c.line, WARNING, "trap-blocked-by-foreground",
                f"bash runs a trap only after the foreground command exits: the {sig[0]} trap fires when this "
                f"step has already ended (or been killed at the time limit), too late to checkpoint",
                f"{cmd_line} & wait")
            return


def rule_cuda_visible_devices(ctx: Context) -> Iterator[Finding]:
    """CUDA_VISIBLE_DEVICES overridden with a rank or local id."""
    for a in ctx.script.assignments:
        if a.name != "CUDA_VISIBLE_DEVICES" or a.value is None:
            continue
        names = {n for p in a.value.refs() for n in p.names}
        if names & {"SLURM_LOCALID", "SLURM_PROCID", "LOCAL_RANK", "SLURM_NODEID", "RANK"}:
            yield ctx.finding(
                a.line, WARNING, "cuda-visible-devices-override",
                f"CUDA_VISIBLE_DEVICES={a.value.flat()} replaces the GPUs Slurm gave each task: on "
                f"{ctx.nodes_text()} a task's local id is not its GPU (with device cgroups id 1 does not exist, "
                "without them tasks land on GPUs of other jobs)",
                "delete this line: Slurm sets CUDA_VISIBLE_DEVICES for every task (ask --gpus-per-task=1 "
                "for one GPU per task)")


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


def rule_master_addr_loopback(ctx: Context) -> Iterator[Finding]:
    """MASTER_ADDR (or --master_addr / --rdzv_endpoint) is a loopback address in a multi-node job."""
    if not ctx.shape.multi_node:
        return
    for a in ctx.script.assignments:
        if a.name == "MASTER_ADDR" and a.value is not None and LOOPBACK_RE.match(a.value.literal() or ""):
            yield ctx.finding(
                a.line, ERROR, "master-addr-loopback",
                f"MASTER_ADDR={a.value.literal()} is each node itself: on {ctx.nodes_text()} every node waits "
                "for a rendezvous on its own loopback (a hang until the timeout)", MASTER_ADDR_FIX)
    for cmd, launch, value, word in _launch_opt_words(ctx, ("master_addr", "rdzv_endpoint", "main_process_ip")):
        host = value.rsplit(":", 1)[0] if ":" in value and not value.startswith("[") else value
        if LOOPBACK_RE.match(host):
            yield ctx.finding(
                word.line, ERROR, "master-addr-loopback",
                f"{value} is each node itself: on {ctx.nodes_text()} every node rendezvous with itself (a hang)",
                ctx.script.line_text(word.line).replace(host, "$MASTER_ADDR", 1).strip()
                + f"   (with {MASTER_ADDR_FIX})")


def rule_fixed_master_port(ctx: Context) -> Iterator[Finding]:
    """A fixed MASTER_PORT: two jobs sharing a node collide on it."""
    for a in ctx.script.assignments:
        if a.name != "MASTER_PORT" or a.value is None:
            continue
        lit = a.value.literal()
        port = lit if lit and lit.isdigit() else None
        if port is None and len(a.value.parts) == 1 and a.value.parts[0].default \
                and a.value.parts[0].default.isdigit() and a.value.parts[0].names == ("MASTER_PORT",):
            port = a.value.parts[0].default
        if port:
            yield ctx.finding(
                a.line, WARNING, "fixed-master-port",
                f"MASTER_PORT={port} is the same for every job: two jobs that share a node (or the seeds' "
                "one host) both bind it, and the second fails with EADDRINUSE", MASTER_PORT_FIX)
    for cmd, launch, value, word in _launch_opt_words(ctx, ("master_port", "main_process_port", "rdzv_endpoint")):
        port = value.rsplit(":", 1)[-1] if ":" in value or value.isdigit() else ""
        if port.isdigit():
            yield ctx.finding(
                word.line, WARNING, "fixed-master-port",
                f"port {port} is the same for every job: two jobs that share a node both bind it (EADDRINUSE)",
                ctx.script.line_text(word.line).replace(port, "$MASTER_PORT", 1).strip()
                + f"   (with {MASTER_PORT_FIX})")


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def rule_double_launch(ctx: Context) -> Iterator[Finding]:
    """--ntasks-per-node > 1 with a launcher that spawns the processes itself."""
    for cmd, launch in launches(ctx):
        if cmd.srun is None or not launch.spawns:
            continue
        t = step_tasks_per_node(ctx, cmd.srun)
        if t <= 1:
            continue
        nproc = launch.opt("nproc_per_node", "num_gpus", "num_processes") or "?"
        opt = ctx.script.opt("ntasks-per-node")
        where = f" (#SBATCH line {opt.line})" if opt else ""
        yield ctx.finding(
            cmd.line, ERROR, "double-launch",
            f"{t} tasks per node{where} each start {launch.kind}, which spawns {nproc} workers itself: "
            f"on {ctx.nodes_text()} {t} launchers per node claim the same node rank and ranks collide",
            "#SBATCH --ntasks-per-node=1   (one launcher per node; it starts one process per GPU)")


def rule_gpus_per_node(ctx: Context) -> Iterator[Finding]:
    """Processes per node (tasks x nproc_per_node) against the GPUs per node the job asks for."""
    g = ctx.shape.gpus_per_node
    if not g:
        return
    for cmd, launch in launches(ctx):
        t = step_tasks_per_node(ctx, cmd.srun) if cmd.srun is not None else 1
        if launch.spawns:
            if t > 1:
                continue  # double-launch says it
            nproc = _int(launch.opt("nproc_per_node", "num_gpus"))
            if nproc is None:
                continue
            procs = t * nproc
            idx = launch.opts.get("nproc_per_node", launch.opts.get("num_gpus", ("", 0)))[1]
            line = cmd.argv[idx].line if idx < len(cmd.argv) else cmd.line
            fix = ctx.script.line_text(line).replace(str(nproc), str(g // t), 1).strip()
        elif launch.kind == "python" and cmd.srun is not None and not ctx.shape.gpus_per_task:
            procs, line = t, cmd.line
            fix = f"#SBATCH --ntasks-per-node={g}"
        else:
            continue
        if procs > g:
            yield ctx.finding(
                line, ERROR, "gpus-per-node-mismatch",
                f"{procs} processes per node but {g} GPU{'s' if g != 1 else ''} per node: on {ctx.nodes_text()} "
                "ranks share a GPU (NCCL fails with 'Duplicate GPU detected')", fix)
        elif procs < g:
            yield ctx.finding(
                line, WARNING, "gpus-per-node-mismatch",
                f"{procs} process{'es' if procs != 1 else ''} per node for {g} GPUs per node: {g - procs} GPUs "
                f"per node sit idle on each of {ctx.nodes_text()}", fix)


def rule_kill_on_bad_exit(ctx: Context) -> Iterator[Finding]:
    """A multi-node training step without --kill-on-bad-exit."""
    if not ctx.shape.multi_node or ctx.script.exported("SLURM_KILL_BAD_EXIT"):
        return
    for cmd in ctx.script.commands:
        if cmd.shell != BATCH or cmd.name != "srun" or cmd.prog_index >= len(cmd.argv):
            continue
        opts, _ = srun_options(cmd.argv)
        value = opts.get("kill-on-bad-exit", opts.get("K", (None, None)))[0]
        if value is not None and value != "0":
            continue
        if not any(c.srun is cmd and classify(c.words()) is not None for c in ctx.script.commands):
            continue
        first = ctx.script.line_text(cmd.line)
        yield ctx.finding(
            cmd.line, WARNING, "no-kill-on-bad-exit",
            f"without --kill-on-bad-exit a rank that dies leaves the others of the {ctx.nodes_text()} waiting in "
            "collectives until the job's time limit", first.replace("srun", "srun --kill-on-bad-exit=1", 1).strip())


def rule_deprecated_launch(ctx: Context) -> Iterator[Finding]:
    """python -m torch.distributed.launch."""
    for cmd, launch in launches(ctx):
        if launch.kind == "torch.distributed.launch":
            line = ctx.script.line_text(cmd.argv[0].line)
            fix = re.sub(r"python3?\s+-m\s+torch\.distributed\.launch", "torchrun", line).strip()
            yield ctx.finding(
                cmd.argv[0].line, WARNING, "deprecated-torch-launch",
                "torch.distributed.launch is deprecated: it passes --local_rank as an argument (newer "
                "scripts read LOCAL_RANK from the environment and fail to parse it); use torchrun",
                fix if fix != line.strip() else "torchrun ...")


def rule_launcher_without_srun(ctx: Context) -> Iterator[Finding]:
    """A multi-node launch run by the batch shell alone: it starts on the first node only."""
    if not ctx.shape.multi_node:
        return
    any_srun = any(c.name == "srun" for c in ctx.script.commands)
    for cmd, launch in launches(ctx):
        if cmd.shell != BATCH:
            continue
        if launch.kind in ("torchrun", "torch.distributed.launch", "accelerate"):
            nn = launch.opt("nnodes", "num_machines")
            lo, _ = parse_nnodes(nn)
            if "standalone" in launch.opts or lo == 1:
                continue
            yield ctx.finding(
                cmd.line, ERROR, "launcher-without-srun",
                f"{launch.kind} runs only in the batch shell, on the first node: it waits for "
                f"{ctx.n - 1} more node{'s' if ctx.n != 2 else ''} that never start an agent (a hang until "
                "the rendezvous timeout)",
                "srun --ntasks-per-node=1 --kill-on-bad-exit=1 " + one_line(ctx.script.line_text(cmd.line)))
        elif launch.kind == "python" and not any_srun:
            yield ctx.finding(
                cmd.line, WARNING, "single-node-launch",
                f"runs once, on the first node: the other {ctx.n - 1} of {ctx.nodes_text()} sit idle",
                "srun " + one_line(ctx.script.line_text(cmd.line)))


def rule_unset_launcher_variable(ctx: Context) -> Iterator[Finding]:
    """$MASTER_ADDR/$MASTER_PORT handed to a launcher but never set in the script."""
    if not ctx.shape.multi_node:
        return
    seen = set()
    for cmd, launch in launches(ctx):
        for name in ("master_addr", "master_port", "rdzv_endpoint", "main_process_ip", "main_process_port"):
            if name not in launch.opts:
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
                        if p.shell == BATCH and not [a for a in assigned if a.line <= cmd.line]:
                            problem = "is never set in this script"
                        elif p.shell == TASK and assigned and not any(a.exported for a in assigned):
                            problem = f"is set at line {assigned[0].line} but not exported, so tasks do not see it"
                        elif p.shell == TASK and not assigned:
                            problem = "is never set in this script"
                        else:
                            continue
                        seen.add((var, p.line))
                        fix = MASTER_ADDR_FIX if var == "MASTER_ADDR" else MASTER_PORT_FIX
                        yield ctx.finding(
                            p.line, WARNING, "unset-launcher-variable",
                            f"${var} {problem}: unless the submitting shell exports it, {launch.kind} gets an "
                            f"empty value and falls back to {'127.0.0.1' if var == 'MASTER_ADDR' else '29500'}"
                            + (f": on {ctx.nodes_text()} each node rendezvous with itself" if var == "MASTER_ADDR"
                               else ""), f"{fix}   (before line {cmd.line})")


def rule_late_sbatch(ctx: Context) -> Iterator[Finding]:
    """#SBATCH lines after the first command are ignored by sbatch."""
    for opt in ctx.script.late_header:
        yield ctx.finding(
            opt.line, WARNING, "sbatch-after-command",
            f"#SBATCH --{opt.key} comes after the first command: sbatch ignores it",
            "move this line above the first command")


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
    Rule("gpus-per-node-mismatch", ERROR, rule_gpus_per_node, "processes per node vs GPUs per node"),
    Rule("no-kill-on-bad-exit", WARNING, rule_kill_on_bad_exit, "multi-node step without --kill-on-bad-exit"),
    Rule("deprecated-torch-launch", WARNING, rule_deprecated_launch, "python -m torch.distributed.launch"),
    Rule("launcher-without-srun", ERROR, rule_launcher_without_srun,
         "a multi-node launch started by the batch shell only (single-node-launch: plain python)"),
    Rule("unset-launcher-variable", WARNING, rule_unset_launcher_variable,
         "$MASTER_ADDR/$MASTER_PORT used but never set"),
    Rule("sbatch-after-command", WARNING, rule_late_sbatch, "#SBATCH after the first command"),
)


def check_script(script: Script) -> List[Finding]:
    """Every finding of every rule on ``script``, by line (one per rule and line)."""
    ctx = Context(script, shape_of(script))
    seen = set()
    out: List[Finding] = []
    for rule in RULES:
        for f in rule.func(ctx):
            key = (f.rule, f.line)
            if key not in seen:
                seen.add(key)
                out.append(f)
    return sorted(out, key=lambda f: (f.line, f.rule))
