"""What the steps of `up` share: the spec, the cluster's paths and state, started daemons."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

from provisioner.config.types import ClusterSpec
from provisioner.procs import MARKER_VAR
from provisioner.state import ClusterState


# Added to each slurmd's environment unless the user's own environment sets the variable.
# Measured with Slurm 22.05 on Debian 12 (docs/benchmarks.md has the numbers):
# - To read the CPU topology, all slurmd asks of hwloc, hwloc dlopens every plugin it has
#   (OpenCL, GL, PCI, libxml2); OpenCL pulls in libstdc++, which is never unloaded.
#   Without them a slurmd starts on 7-13 ms less CPU (21 -> 8 ms on a 2-node cluster,
#   41 -> 34 ms at 256 nodes) and keeps ~1 MB less RSS; hwloc's own XML code reads and
#   writes the topology files instead of libxml2.
# - One malloc arena and a heap top trimmed on free: ~80 KB less private memory per slurmd.
# Only slurmd (and the slurmstepd it starts) gets these: there is one per node, while
# slurmctld and the database are single and busier. Job tasks get the environment of
# srun/sbatch, not slurmd's, so training jobs never see them.
SLURMD_ENV_DEFAULTS = {
    "HWLOC_PLUGINS_BLACKLIST": "hwloc_gl,hwloc_opencl,hwloc_pci,hwloc_xml_libxml",
    "GLIBC_TUNABLES": "glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=0:glibc.malloc.top_pad=0",
}


def _stderr_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class UpContext:
    spec: ClusterSpec
    state: ClusterState
    progress: Callable[[str], None] = _stderr_progress
    daemons: Dict[str, subprocess.Popen] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)

    @property
    def layout(self):
        return self.state.layout

    def daemon_env(self) -> Dict[str, str]:
        """Environment for every daemon: the cluster's config and the cluster marker."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.layout.slurm_conf)
        env[MARKER_VAR] = str(self.layout.root)
        return env

    def slurmd_env(self) -> Dict[str, str]:
        """daemon_env() plus SLURMD_ENV_DEFAULTS: less start-up CPU and memory per node."""
        env = self.daemon_env()
        for key, value in SLURMD_ENV_DEFAULTS.items():
            env.setdefault(key, value)
        return env

    def record(self, key: str, proc: subprocess.Popen) -> None:
        self.daemons[key] = proc
        self.state.pids[key] = proc.pid

    def step(self, text: str) -> "_Step":
        return _Step(self, text)


class _Step:
    """Prints ' - text ... done (0.12s)' around one step of `up`."""

    def __init__(self, ctx: UpContext, text: str):
        self.ctx, self.text = ctx, text

    def __enter__(self) -> "_Step":
        self.t0 = time.monotonic()
        return self

    def __exit__(self, exc_type, exc, tb) -> Optional[bool]:
        took = time.monotonic() - self.t0
        status = "done" if exc_type is None else "FAILED"
        self.ctx.progress(f" - {self.text} ... {status} ({took:.2f}s)")
        return None
