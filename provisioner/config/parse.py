"""Small parsers for values users type: GPU lists, memory sizes."""

from __future__ import annotations

import re
from typing import List, Union

_MEM_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
MAX_GPU_ID = 255
_MEM_FACTOR_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_gpu_list(value: Union[str, int, List]) -> List[int]:
    """Parse ``"6,7"``, ``"0-3"``, ``"0-1,6"``, ``[6, 7]`` or ``5`` into a list of GPU ids.

    Raises ValueError with a message fit for the user.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected GPU ids like '6,7' or '0-3', got {value!r}")
    if isinstance(value, int):
        items: List = [value]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, str):
        items = [p.strip() for p in value.split(",")] if value.strip() else []
    else:
        raise ValueError(f"expected GPU ids like '6,7' or '0-3', got {value!r}")
    ids: List[int] = []
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"bad GPU id {item!r}")
        if isinstance(item, int):
            ids.append(item)
            continue
        text = str(item).strip()
        m = re.fullmatch(r"(\d+)-(\d+)", text)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise ValueError(f"bad GPU range {text!r}: start is after end")
            if hi > MAX_GPU_ID:  # before expanding: '0-99999999999' must not build a huge list
                raise ValueError(f"GPU id {hi} out of range 0-{MAX_GPU_ID}")
            ids.extend(range(lo, hi + 1))
        elif text.isdecimal():
            ids.append(int(text))
        else:
            raise ValueError(f"bad GPU id {text!r}: use numbers like '6,7' or a range like '0-3'")
    for g in ids:
        if g < 0 or g > MAX_GPU_ID:
            raise ValueError(f"GPU id {g} out of range 0-{MAX_GPU_ID}")
    dupes = sorted({g for g in ids if ids.count(g) > 1})
    if dupes:
        raise ValueError(f"GPU id {dupes[0]} listed twice")
    return ids


def parse_memory_mb(value: Union[str, int]) -> int:
    """Parse ``240000`` (MB), ``"240G"``, ``"200GB"``, ``"1T"`` into whole megabytes."""
    if isinstance(value, bool):
        raise ValueError(f"bad memory size {value!r}")
    if isinstance(value, int):
        mb = value
    else:
        m = _MEM_RE.match(str(value))
        if not m:
            raise ValueError(f"bad memory size {value!r}: use megabytes (240000) or a unit (240G)")
        mb = int(int(m.group(1)) * _MEM_FACTOR_MB[m.group(2).upper()])
    if mb < 1:
        raise ValueError(f"memory must be at least 1 MB, got {value!r}")
    return mb


def split_gpus(gpus: List[int], node_count: int) -> List[List[int]]:
    """Give GPUs to nodes in order, evenly; an uneven split is an error."""
    if not gpus:
        return [[] for _ in range(node_count)]
    if len(gpus) % node_count:
        raise ValueError(
            f"{len(gpus)} GPUs cannot be split evenly over {node_count} nodes "
            f"(give a multiple of {node_count} GPUs, or list nodes with their own 'gpus')"
        )
    per = len(gpus) // node_count
    return [gpus[i * per:(i + 1) * per] for i in range(node_count)]
