"""Slurm's compressed host lists: ``gpu[001-128]``, ``node[1-4,7],login1``, ``r[1-2]n[01-04]``.

``expand`` gives the names in Slurm's order (bracket groups left to right, each range in
order, zero padding as written), split at commas, blanks and tabs outside brackets with empty
names skipped, as Slurm's hostlist_create does; ``compress`` is the inverse, for short report
lines. Slurm refuses text after a bracket group (``n[1-2]-ib``); this reads it as a suffix.
"""

from __future__ import annotations

import itertools
import re
from typing import Dict, List, Sequence, Tuple

# A production list can be large (gpu[0001-4096]); a typo like n[1-99999999] must not build
# a huge list before the node limit says no.
MAX_NAMES = 100000


class HostlistError(ValueError):
    """A host list Slurm would not parse; the message says what is wrong with it."""


def _split_top(expr: str) -> List[str]:
    """Split at commas, blanks and tabs outside brackets (Slurm's hostlist separators)."""
    parts, depth, cur = [], 0, []
    for c in expr:
        if c == "[":
            if depth:
                raise HostlistError(f"bad host list '{expr}': brackets inside brackets")
            depth = 1
        elif c == "]":
            if not depth:
                raise HostlistError(f"bad host list '{expr}': ']' without '['")
            depth = 0
        if c in ", \t" and not depth:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if depth:
        raise HostlistError(f"bad host list '{expr}': '[' is not closed")
    parts.append("".join(cur))
    return parts


def _range(expr: str, group: str) -> List[str]:
    """The values of one bracket group: '001-004,7' -> ['001', '002', '003', '004', '7']."""
    out: List[str] = []
    for item in group.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item.strip())
        if not m:
            raise HostlistError(f"bad host list '{expr}': '[{group}]' is not a list of numbers and ranges")
        lo, hi = m.group(1), m.group(2)
        if hi is None:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise HostlistError(f"bad host list '{expr}': range {lo}-{hi} runs backwards")
        if int(hi) - int(lo) >= MAX_NAMES:
            raise HostlistError(f"bad host list '{expr}': more than {MAX_NAMES} names")
        width = len(lo)
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


def expand(expr: str) -> List[str]:
    """Every name of a host list, in order; raise HostlistError for a malformed one."""
    expr = expr.strip()
    if not expr:
        raise HostlistError("empty host list")
    names: List[str] = []
    for piece in _split_top(expr):
        if not piece:
            continue  # "n1,,n2", "n[1-2],": Slurm skips empty names
        tokens = re.split(r"(\[[^\]]*\])", piece)
        choices = [_range(expr, t[1:-1]) if t.startswith("[") else [t] for t in tokens if t]
        count = 1
        for c in choices:
            count *= len(c)
        if len(names) + count > MAX_NAMES:
            raise HostlistError(f"bad host list '{expr}': more than {MAX_NAMES} names")
        names.extend("".join(combo) for combo in itertools.product(*choices))
    return names


def compress(names: Sequence[str]) -> str:
    """A short host list of ``names`` (their order kept where it can be): 'gpu[001-004],login1'."""
    groups: Dict[Tuple[str, int], List[int]] = {}
    order: List[Tuple[str, int]] = []
    plain: List[str] = []
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)", name)
        if not m:
            key = (name, -1)
            if key not in groups:
                groups[key] = []
                order.append(key)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    for prefix, width in order:
        numbers = groups[(prefix, width)]
        if width < 0:
            plain.append(prefix)
            continue
        if len(numbers) == 1:
            plain.append(f"{prefix}{str(numbers[0]).zfill(width)}")
            continue
        spans: List[str] = []
        start = prev = numbers[0]
        for n in numbers[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            spans.append(str(start).zfill(width) if start == prev
                         else f"{str(start).zfill(width)}-{str(prev).zfill(width)}")
            if n is not None:
                start = prev = n
        plain.append(f"{prefix}[{','.join(spans)}]")
    return ",".join(plain)
