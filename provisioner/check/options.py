"""Options as sbatch and srun read them: the #SBATCH header (parse_header: the options before
the first command, and those after it, which sbatch ignores) and an srun command line's
options (srun_options: which take a value, which an optional one)."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from provisioner.check.script import HeaderOpt, Word


SHORT_OPTIONS = {"N": "nodes", "n": "ntasks", "c": "cpus-per-task", "G": "gpus", "p": "partition", "t": "time",
          "J": "job-name", "o": "output", "e": "error", "a": "array", "A": "account", "w": "nodelist",
          "C": "constraint", "D": "chdir", "q": "qos", "L": "licenses"}


def parse_header(text: str) -> Tuple[List[HeaderOpt], List[HeaderOpt]]:
    """#SBATCH options (those sbatch reads: before the first command) and any later ones."""
    head: List[HeaderOpt] = []
    late: List[HeaderOpt] = []
    started = False
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if i == 1 and line.startswith("#!"):
            continue
        if not line or (line.startswith("#") and not line.startswith("#SBATCH")):
            continue
        if not line.startswith("#SBATCH"):
            started = True
            continue
        body = line[len("#SBATCH"):]
        if "#" in body:
            body = body[:body.index("#")]
        tokens = body.split()
        opts = _header_tokens(tokens)
        target = late if started else head
        for key, value in opts:
            target.append(HeaderOpt(key, value, i, raw))
    return head, late


def _header_tokens(tokens: Sequence[str]) -> List[Tuple[str, str]]:
    out = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--"):
            key, eq, value = tok[2:].partition("=")
            if not eq and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                value = tokens[i + 1]
                i += 1
            out.append((key.replace("_", "-"), value))
        elif tok.startswith("-") and len(tok) >= 2:
            key = SHORT_OPTIONS.get(tok[1], tok[1])
            value = tok[2:]
            if value.startswith("="):
                value = value[1:]
            if not value and i + 1 < len(tokens):
                value = tokens[i + 1]
                i += 1
            out.append((key, value))
        i += 1
    return out


# srun options that take a value as the next word when not written --opt=value
SRUN_SHORT_WITH_ARG = set("ANncpGtJoewxmrDTCdLqSkBbijlMOsuvXZ") - set("lkOsuvXZ")
SRUN_LONG_WITH_ARG = {
    "nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "partition", "time", "job-name", "output",
    "error", "input", "nodelist", "exclude", "distribution", "relative", "chdir", "threads", "constraint",
    "dependency", "licenses", "qos", "account", "gres", "gpus", "gpus-per-node", "gpus-per-task", "gpu-bind",
    "mem", "mem-per-cpu", "mem-per-gpu", "cpu-bind", "mpi", "export", "label-format", "signal", "ntasks-per-gpu",
    "cpus-per-gpu", "reservation", "kill-on-bad-exit", "wait", "het-group", "container", "container-image",
    "container-env", "container-save", "container-entrypoint-log",
    "container-mounts", "container-workdir", "container-name", "network", "propagate", "slurmd-debug",
    "open-mode", "task-prolog", "task-epilog", "tres-per-task", "exact", "overlap", "cores-per-socket",
    "sockets-per-node", "threads-per-core", "hint", "begin", "deadline", "comment", "prolog", "epilog",
    "jobid", "mem-bind", "cpu-freq", "ntasks-per-core", "ntasks-per-socket", "switches", "wckey", "acctg-freq",
    "core-spec", "gres-flags", "mcs-label", "mail-type", "mail-user", "power", "priority", "profile",
    "thread-spec", "tmp", "uid", "gid", "time-min", "export-file", "cluster-constraint", "resv-ports",
    "tres-bind", "tres-per-node", "segment", "het-job",
}
# those among them whose value is optional (--kill-on-bad-exit alone means 1)
SRUN_LONG_OPTIONAL = {"kill-on-bad-exit", "export", "exact", "overlap", "propagate"}


def srun_options(argv: Sequence[Word]) -> Tuple[Dict[str, Tuple[str, Word]], int]:
    """srun's options {name: (value, word)} and the index of the program it runs."""
    opts: Dict[str, Tuple[str, Word]] = {}
    i = 1
    while i < len(argv):
        text = argv[i].flat()
        if text == "--":
            return opts, i + 1
        if text.startswith("--"):
            key, eq, value = text[2:].partition("=")
            if not eq and key in SRUN_LONG_WITH_ARG and key not in SRUN_LONG_OPTIONAL and i + 1 < len(argv):
                i += 1
                value = argv[i].flat()
            opts[key] = (value, argv[i])
        elif text.startswith("-") and len(text) >= 2:
            key = text[1]
            value = text[2:]
            if not value and key in SRUN_SHORT_WITH_ARG and i + 1 < len(argv):
                i += 1
                value = argv[i].flat()
            opts[SHORT_OPTIONS.get(key, key)] = (value, argv[i])
        else:
            return opts, i
        i += 1
    return opts, len(argv)
