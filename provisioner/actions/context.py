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
