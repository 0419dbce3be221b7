"""The static rules of `simcluster check`: one function per rule, each yielding Findings.

A rule sees the parsed script (parse.Script: its commands and those of the helper scripts
it runs, each with its file), the job shape (shape.Shape: the header's, `check --nodes`, or
-N 2 for a clearly multi-node script without --nodes), the launches (launch.classify) and
the Python entry points beside the script (entry.read_entry). Each finding carries its fix
as line edits (Edit) and shows their text as the fix line. Each family of rules is a module
here (ranks, signals, gpus, rendezvous, launchers, nnodes, header) whose functions register
themselves with ``@rule(id, level, title)`` into RULES; docs/check.md explains each one.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence

from provisioner.check.entry import read_entry
from provisioner.check.launch import classify
from provisioner.check.script import Script
from provisioner.check.rules.core import Context, Edit, Finding, RULES
from provisioner.check.shape import shape_of
# Each family registers its rules (core.RULES) as it is imported.
from provisioner.check.rules import gpus, header, launchers, nnodes, ranks, rendezvous, signals  # noqa: F401


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
