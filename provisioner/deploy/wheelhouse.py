"""The wheelhouse `deploy --training` copies to the hosts: torch and its dependencies as
wheels, collected on this machine with pip (which uses pip's configured find-links, so the
local CPU torch 2.13.0 wheel is found instead of a multi-GB CUDA download).

Assumes the hosts run the same Python minor version as this machine (Debian 12: 3.11).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, List

from provisioner.errors import SimclusterError

# Pinned: an unpinned torch pulls multi-GB CUDA builds. numpy: torch does not require it,
# but its object collectives (all_gather_object, which verify's workloads use) call
# tensor.numpy() and fail with "Numpy is not available" without it.
TRAINING_REQUIREMENTS: List[str] = ["torch==2.13.0", "numpy==2.4.6"]


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "simcluster"


def fill_wheelhouse(progress: Callable[[str], None], requirements: List[str] = TRAINING_REQUIREMENTS) -> Path:
    """Collect exactly the wheels ``requirements`` need into a directory of their own (only
    it is copied to the hosts); wheels already in the image builds' cache are reused."""
    dest = _cache_root() / "wheelhouse-deploy"
    dest.mkdir(parents=True, exist_ok=True)
    shared = _cache_root() / "wheelhouse"  # `simcluster image build --train` fills this one
    progress(f" - collecting wheels for {', '.join(requirements)} in {dest}")
    links = [a for d in (dest, shared) if d.is_dir() for a in ("--find-links", str(d))]
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
                           "--wheel-dir", str(dest), *links, *requirements],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise SimclusterError("could not collect the training wheels", details=proc.stdout[-3000:])
    return dest
