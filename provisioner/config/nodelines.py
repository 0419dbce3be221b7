"""slurm.conf's NodeName lines for many nodes: consecutive nodes of one shape as one line.

``NodeName=node[1-1024] NodeAddr=198.18.62.[3-255] Port=[20712-20964] ...`` instead of 1024
lines, as production confs write them. Every slurmd parses the whole slurm.conf and gres.conf
when it starts, and Slurm's parser runs its key regexes over every line: with one line per
node a slurmd's start cost grew with the cluster (1024 slurmds x 1024 lines), with one line
per run of alike nodes it stays flat. Slurm expands the host lists of a line in step
(NodeName's i-th name gets NodeAddr's, NodeHostname's and Port's i-th value, or their only
value), so a run only grows while every listed field either keeps its value or counts up by
one, and it prints exactly the nodes it holds, in order.

Stdlib only: the Ansible roles load this file by path (ansible/filter_plugins/simcluster.py),
so a deployed cluster's conf is grouped by the same code as a local one's.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

# The fields that may differ between the nodes of one line; every other key must be equal.
LISTED = ("name", "hostname", "addr", "port")
_NUMBERED = re.compile(r"(.*?)(\d+)")


def _numbered(value) -> Optional[Tuple[str, int, str]]:
    """(prefix, number, digits) of 'gpu007' -> ('gpu', 7, '007'); None where the value
    ends in no number."""
    m = _NUMBERED.fullmatch(str(value))
    return (m.group(1), int(m.group(2)), m.group(2)) if m else None


def _padded(digits: str) -> bool:
    return len(digits) > 1 and digits.startswith("0")


def _follows(prev, value, kind: str) -> bool:
    """Whether ``value`` continues a run whose last value is ``prev``: 'same' (one value
    for all) or 'step' (the number after prev's, with the same prefix, written with as many
    digits as prev's or, neither padded, as a plain number: node9 -> node10, gpu099 -> gpu100,
    not gpu9 -> gpu010). Slurm pads a range's numbers to its first number's width."""
    if kind == "same":
        return value == prev
    a, b = _numbered(prev), _numbered(value)
    if not a or not b or a[0] != b[0] or b[1] != a[1] + 1:
        return False
    return len(a[2]) == len(b[2]) or not (_padded(a[2]) or _padded(b[2]))


def _kind(first, second) -> Optional[str]:
    if first == second:
        return "same"
    return "step" if _follows(first, second, "step") else None


def _range(values: Sequence) -> str:
    """'node[1-4]' for a stepping run, the value itself for one value."""
    if len(values) == 1 or values[0] == values[-1]:
        return values[0]
    prefix, _, lo = _numbered(values[0])
    return f"{prefix}[{lo}-{_numbered(values[-1])[2]}]"


def _shape(node: Dict, gpu_ids: bool) -> Tuple:
    return tuple(sorted((k, repr(v if gpu_ids or k != "gpus" else len(v)))
                        for k, v in node.items() if k not in LISTED))


def node_lines(nodes: Sequence[Dict], gpu_ids: bool = True) -> List[Dict]:
    """The node entries of a template context grouped into lines: each a dict with the same
    keys as a node, where name/hostname/addr/port may be Slurm host lists (as strings).
    ``gpu_ids=False`` (slurm.conf, which counts GPUs) groups nodes whose GPU ids differ but
    not their number; gres.conf names each device file, so there the ids must match."""
    runs: List[List[Dict]] = []
    kinds: List[Dict[str, str]] = []
    for node in nodes:
        run = runs[-1] if runs else None
        if run and _shape(run[0], gpu_ids) == _shape(node, gpu_ids):
            if len(run) == 1:
                kind = {f: _kind(run[0].get(f), node.get(f)) for f in LISTED}
                if kind["name"] == "step" and all(kind.values()):
                    run.append(node)
                    kinds[-1] = kind
                    continue
            elif all(_follows(run[-1].get(f), node.get(f), kinds[-1][f]) for f in LISTED):
                run.append(node)
                continue
        runs.append([node])
        kinds.append({})
    lines = []
    for run in runs:
        line = dict(run[0])
        for f in LISTED:
            if f in line:
                line[f] = _range([n[f] for n in run])
        lines.append(line)
    return lines


def host_list(names: Sequence[str]) -> str:
    """A partition's Nodes= value: runs of consecutive names as ranges, in the order given."""
    out: List[str] = []
    run: List[str] = []
    for name in names:
        if run and _follows(run[-1], name, "step"):
            run.append(name)
            continue
        if run:
            out.append(_range(run))
        run = [name]
    if run:
        out.append(_range(run))
    return ",".join(out)
