"""The cgroup filesystem of this host, as every part of the nodes' cgroups sees it: where it
is mounted, whether it is cgroup v2, which controllers a cgroup has, making a probe cgroup,
removing a tree deepest first, and the programs and Slurm release the node's chain needs.
cgroups.py (v1 hierarchies, the entry points), cgroups_v2.py and cgroups_delegated.py build on it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Optional

ROOT = Path("/sys/fs/cgroup")
MOUNT_SOURCE = "simcluster-cgroup"  # a source no existing mount has: `mount -a` then mounts it


def probe(cgroup: Path) -> str:
    """Make and remove one cgroup: "" when that works, else why limits cannot be enforced."""
    try:
        cgroup.mkdir()
        cgroup.rmdir()
    except OSError as exc:
        return f"cannot make a cgroup ({exc.strerror}): limits are not enforced"
    return ""


NVIDIA_MAJOR = 195  # /dev/nvidiaN is char 195:N (simcluster's fake GPU devices too)


def remove_tree(top: Path) -> List[str]:
    """rmdir every cgroup under ``top`` and ``top`` itself, deepest first (a cgroup goes only
    once empty of children and processes); the paths that could not be removed."""
    left: List[str] = []
    for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
        try:
            os.rmdir(dirpath)
        except OSError:
            left.append(dirpath)
    return left


def is_v2(root: Path = ROOT) -> bool:
    """A unified (cgroup v2 only) host."""
    return (root / "cgroup.controllers").exists()


def controllers_of(path: Path) -> List[str]:
    try:
        return (path / "cgroup.controllers").read_text().split()
    except OSError:
        return []


def slurm_release(version: Optional[str]) -> Optional[tuple]:
    m = re.search(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def find_program(name: str) -> Optional[str]:
    from provisioner.cluster.model.command_runner import find_binary  # the same lookup as the node start chain
    return find_binary(name)
