"""Which pytest process owns which cluster, so that no test cluster outlives its session.

Before a session makes a cluster it writes $SIMCLUSTER_HOME/.pytest-owners/<name>.json with
its pid and that process's start time (a pid alone may be reused). A session that ends
normally (or on Ctrl-C) takes its clusters down and removes the records; one that was
killed (SIGKILL, a crashed xdist worker, a CI runner cancelled hard) leaves them, and the
next session, or the xdist controller at its end, takes down every cluster whose owner is
gone. Only `pyt-` clusters named in a record are ever touched.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable, List, Optional

from provisioner import named_clusters
from provisioner.errors import ClusterNotFound, SimclusterError
from provisioner.paths import simcluster_home

PREFIX = "pyt-"


def registry_dir() -> Path:
    return simcluster_home() / ".pytest-owners"


def process_start(pid: int) -> Optional[str]:
    """The start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if fields and fields[0] in ("Z", "X"):
        return None  # a zombie has ended, whatever its parent does with it
    return fields[19] if len(fields) > 19 else None


def record(name: str) -> Path:
    """Mark cluster ``name`` as owned by this process (before it is made)."""
    d = registry_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = d / f"{name}.json"
    path.write_text(json.dumps({"name": name, "pid": os.getpid(), "start": process_start(os.getpid()),
                                "since": round(time.time(), 3)}))
    return path


def forget(name: str) -> None:
    try:
        (registry_dir() / f"{name}.json").unlink()
    except FileNotFoundError:
        pass


def owner_alive(entry: dict) -> bool:
    pid = entry.get("pid")
    return isinstance(pid, int) and process_start(pid) is not None and process_start(pid) == entry.get("start")


def orphaned() -> List[str]:
    """Names of recorded clusters whose owning process is gone."""
    d = registry_dir()
    if not d.is_dir():
        return []
    names = []
    for path in sorted(d.glob(f"{PREFIX}*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            entry = {}
        if not owner_alive(entry):
            names.append(path.stem)
    return names


def sweep(log: Callable[[str], None] = lambda line: None) -> List[str]:
    """Take down every recorded cluster whose owner is gone; return their names."""
    removed = []
    for name in orphaned():
        try:
            log(named_clusters.down(name) + " (its pytest session had ended without taking it down)")
            removed.append(name)
        except ClusterNotFound:
            pass  # never made, or another session swept it first
        except SimclusterError as exc:
            log(f"could not take down leftover cluster '{name}': {exc.one_line()}")
            continue
        forget(name)
    return removed
