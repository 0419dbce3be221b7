"""The Slurm versions simcluster can run, and the Debian suite each one is installed from.

Pure data and parsing: the docker backend builds one node image per version from its
Debian suite (no compiling); the local backend runs whatever Slurm this host has.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any, Dict, Optional

# Slurm release (major.minor) -> the Debian suite that ships it. sid moves: the image
# build checks that what it installed really is this release (docs/slurm-versions.md).
SLURM_SUITES: Dict[str, str] = {"22.05": "bookworm", "24.11": "trixie", "26.05": "sid"}
# What a docker cluster runs when no version is asked for: the host's Debian 12 release,
# so its images keep their names and its clients can drive it.
DEFAULT_SLURM = "22.05"


def normalize(value: Any) -> str:
    """'24.11', 24.11 (YAML reads an unquoted 24.11 as a number), '24.11.5' -> '24.11';
    ValueError naming the supported releases otherwise."""
    text = f"{value:.2f}" if isinstance(value, float) else str(value).strip()
    m = re.match(r"^(\d+)\.(\d+)(?:\.\d+)?$", text)
    major = f"{int(m.group(1))}.{int(m.group(2)):02d}" if m else None
    if isinstance(value, bool) or major not in SLURM_SUITES:
        raise ValueError(f"{value!r} is not a Slurm release simcluster can run "
                         f"(choose one of {', '.join(SLURM_SUITES)})")
    return major


def release_of(version: str) -> Optional[str]:
    """'slurm 24.11.5' or '24.11.5' -> '24.11'; None when it names no release."""
    m = re.search(r"(\d+)\.(\d+)\.\d+", version or "")
    return f"{int(m.group(1))}.{int(m.group(2)):02d}" if m else None


def host_slurm_version() -> Optional[str]:
    """The exact Slurm version of this host's daemons ('22.05.8'); None without Slurm.
    (slurmctld -V, because the client commands want a configuration even for --version.)"""
    exe = shutil.which("slurmctld") or shutil.which("slurmctld", path="/usr/sbin:/usr/local/sbin")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-V"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\d+\.\d+\.\d+\S*", out)
    return m.group(0) if m else None


# From 24.11 on (observed with Debian's 24.11.5; 22.05 does not) slurmctld resolves the host
# name of an srun inside a job ("node1") to answer it: a local cluster's controller needs the
# cluster's hosts file as the nodes have it, or every step launched from a batch script hangs
# ("slurm_set_addr: Unable to resolve \"node1\"").
CONTROLLER_RESOLVES_NODE_NAMES_FROM = (24, 11)


def controller_resolves_node_names(version: Optional[str]) -> bool:
    """Does slurmctld of ``version`` ('24.11.5') look node names up by name?"""
    m = re.search(r"(\d+)\.(\d+)\.\d+", version or "")
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= CONTROLLER_RESOLVES_NODE_NAMES_FROM
