"""What the benchmark scripts share: the checkout's simcluster run under a SIMCLUSTER_HOME of
the benchmark's own, and a cluster's Slurm environment (its `simcluster env` exports)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Dict

REPO = Path(__file__).resolve().parents[1]
SIMCLUSTER = str(REPO / ".venv" / "bin" / "simcluster")


class Simcluster:
    """`simcluster` with SIMCLUSTER_HOME=``home``."""

    def __init__(self, home: str):
        self.home = home
        self.env = dict(os.environ, SIMCLUSTER_HOME=home)

    def cli(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        """Run `simcluster ARGS`; a failure raises with its output (unless check=False)."""
        p = subprocess.run([SIMCLUSTER, *args], capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and p.returncode != 0:
            raise RuntimeError(f"simcluster {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def slurm_env(self, name: str) -> Dict[str, str]:
        """This environment plus the exports of `simcluster env --name NAME` (SLURM_CONF, PATH ...)."""
        env = dict(self.env)
        for line in self.cli("env", "--name", name).stdout.splitlines():
            if line.startswith("export "):
                k, _, v = line[7:].partition("=")
                env[k] = shlex.split(v)[0] if v else ""
        return env
