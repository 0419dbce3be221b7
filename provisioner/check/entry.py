"""What a Python entry point does about ranks, read from its source when it is beside the script.

`srun python train.py` with several tasks gives each process SLURM_PROCID, not the RANK /
WORLD_SIZE that `init_process_group('env://')` reads. Many programs handle that themselves:
DeepSpeed's `init_distributed()` / `initialize()`, Lightning's Trainer (its SLURMEnvironment),
Accelerate, submitit, mpi4py, or a plain `os.environ["SLURM_PROCID"]`. Others start one
process per GPU themselves (`torch.multiprocessing.spawn`). The entry file (and the modules
beside it that it imports, one level) is searched for those patterns; nothing is imported
or run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import List, Optional, Tuple

MAX_BYTES = 1 << 20

# (pattern, what the finding-free explanation calls it); the first that matches names it
_MAPS: Tuple[Tuple[str, str], ...] = (
    (r"deepspeed\.(init_distributed|initialize)\s*\(", "DeepSpeed's init_distributed()"),
    (r"SLURMEnvironment", "Lightning's SLURMEnvironment"),
    (r"^\s*(from|import)\s+(lightning|pytorch_lightning|nemo)\b", "Lightning's Trainer (SLURMEnvironment)"),
    (r"\bAccelerator\s*\(|^\s*(from|import)\s+accelerate\b", "Accelerate"),
    (r"\bsubmitit\b", "submitit"),
    (r"\bidr_torch\b", "idr_torch"),
    (r"^\s*from\s+mpi4py\b|^\s*import\s+mpi4py\b", "mpi4py"),
    (r"SLURM_PROCID|SLURM_LOCALID|SLURM_NODEID", "its own SLURM_PROCID/SLURM_LOCALID mapping"),
    (r"OMPI_COMM_WORLD_RANK|PMI_RANK|PMIX_RANK", "its MPI/PMI rank mapping"),
)
_SPAWN = re.compile(r"\b(?:mp|multiprocessing|torch\.multiprocessing)\.(?:spawn|start_processes)\s*\(", re.M)
_NPROCS = re.compile(r"nprocs\s*=\s*(\d+)")
_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.M)


@dataclass(frozen=True)
class Entry:
    path: str                    # the file read
    maps: Optional[str]          # what maps Slurm's variables to ranks, or None
    spawns: bool                 # starts its own worker processes (mp.spawn)
    nprocs: Optional[int]        # a literal nprocs=N of that spawn; None: one per GPU or not known
    distributed: bool            # uses torch.distributed / a framework at all
    nprocs_line: int = 0         # where that nprocs=N is in the entry file (0: not in it)
    nprocs_text: str = ""        # that line


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _with_imports(path: str) -> List[str]:
    """The entry's text and that of the modules beside it that it imports (one level)."""
    text = _read(path)
    texts = [text]
    base = os.path.dirname(path)
    for m in _IMPORT.finditer(text):
        mod = (m.group(1) or m.group(2) or "").lstrip(".")
        if not mod:
            continue
        rel = mod.replace(".", os.sep)
        for cand in (os.path.join(base, rel + ".py"), os.path.join(base, rel, "__init__.py")):
            if os.path.isfile(cand) and os.path.abspath(cand) != os.path.abspath(path):
                texts.append(_read(cand))
                break
    return texts


@lru_cache(maxsize=256)
def read_entry(path: str) -> Entry:
    texts = _with_imports(path)
    joined = "\n".join(texts)
    maps = None
    for pattern, what in _MAPS:
        if re.search(pattern, joined, re.M):
            maps = what
            break
    spawn = _SPAWN.search(joined)
    nprocs, line, line_text = None, 0, ""
    if spawn:
        m = _NPROCS.search(joined, spawn.start(), spawn.start() + 400)
        nprocs = int(m.group(1)) if m else None
        if m and m.start() < len(texts[0]):
            line = texts[0].count("\n", 0, m.start()) + 1
            line_text = texts[0].splitlines()[line - 1]
    distributed = bool(maps or spawn or re.search(r"torch\.distributed|init_process_group|dist\.", joined))
    return Entry(path=path, maps=maps, spawns=bool(spawn), nprocs=nprocs, distributed=distributed,
                 nprocs_line=line, nprocs_text=line_text)
