"""Run Slurm client commands against one cluster and parse what they print."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

# Node states in which a node answers and can run work.
READY_STATES = {"idle", "mixed", "allocated", "completing"}


def client_env(slurm_conf: Path, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["SLURM_CONF"] = str(slurm_conf)
    return env


def run_client(slurm_conf: Path, argv: Sequence[str], timeout: float = 15.0) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), env=client_env(slurm_conf), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


@dataclass
class NodeState:
    name: str
    state: str
    reason: str = ""

    @property
    def ready(self) -> bool:
        base = self.state.lower().split("+")[0].rstrip("*~#!%$@^-")
        return base in READY_STATES and not self.state.endswith("*")


def node_states(slurm_conf: Path, timeout: float = 10.0) -> Optional[Dict[str, NodeState]]:
    """{node: NodeState} from sinfo, or None if the controller does not answer."""
    try:
        proc = run_client(slurm_conf, SINFO_NODE_ARGS, timeout=timeout)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if proc.returncode != 0:
        return None
    return parse_sinfo(proc.stdout)


SINFO_NODE_ARGS = ["sinfo", "--noheader", "--Node", "--format=%N|%T|%E"]


def parse_sinfo(text: str) -> Dict[str, NodeState]:
    """Parse the output of SINFO_NODE_ARGS (one line per node and partition)."""
    states: Dict[str, NodeState] = {}
    for line in text.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3:
            reason = parts[2].strip()
            states[parts[0]] = NodeState(parts[0], parts[1].strip(), "" if reason == "none" else reason)
    return states


def scontrol_show(slurm_conf: Path, what: str) -> str:
    """`scontrol show <what>` output, or the error it gave."""
    try:
        proc = run_client(slurm_conf, ["scontrol", "show", what], timeout=10)
    except (subprocess.TimeoutExpired, OSError) as exc:
        return f"(scontrol show {what} failed: {exc})"
    return proc.stdout if proc.returncode == 0 else f"(scontrol show {what} failed: {proc.stderr.strip()})"


def format_node_table(states: Dict[str, NodeState], names: List[str]) -> str:
    rows = []
    for name in names:
        st = states.get(name)
        rows.append(f"  {name:<14} {st.state if st else 'missing':<14} {st.reason if st else ''}")
    return "\n".join(rows)
