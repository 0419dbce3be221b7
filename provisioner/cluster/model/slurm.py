"""The one Slurm client: Slurm commands run through a node's runner, and their output parsed.

Local clusters run the commands on this host with the cluster's SLURM_CONF, docker
clusters in the controller container, deployed clusters on the controller over SSH; the
callers (up's readiness gate, status, export-logs, verify) cannot tell the difference.
Timeouts follow the runner convention: rc 124, never an exception.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

from provisioner.cluster.model.command_runner import DEFAULT_TIMEOUT, Result, Runner

# Node states in which a node answers and can run work.
READY_STATES = {"idle", "mixed", "allocated", "completing"}
SINFO_NODE_ARGS = ["sinfo", "--noheader", "--Node", "--format=%N|%T|%E"]
# Variables a Slurm command inherits from a job it runs in: a client started inside a job
# (verify in CI under Slurm) must not leak that job's settings into ours.
JOB_VARIABLE_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")


# `scontrol show config`: "Key = value". Blanks, not \s: an empty value ("PowerPlugin = ")
# must not take the next line as its value.
_CONFIG_LINE = re.compile(r"^(\S+)[ \t]*=[ \t]*(.*?)[ \t]*$", re.M)


def parse_show_config(text: str) -> Dict[str, str]:
    """`scontrol show config` -> {Key: value}."""
    return dict(_CONFIG_LINE.findall(text))


class SlurmError(Exception):
    """A Slurm command failed where the caller needs its answer (sbatch)."""


@dataclass
class NodeState:
    name: str
    state: str
    reason: str = ""

    @property
    def ready(self) -> bool:
        base = self.state.lower().split("+")[0].rstrip("*~#!%$@^-")
        return base in READY_STATES and not self.state.endswith("*")

    @property
    def responding(self) -> bool:
        """The node's slurmd answers slurmctld (idle, allocated, drained ...; not DOWN, not '*')."""
        base = self.state.lower().split("+")[0].rstrip("*~#!%$@^-")
        return not self.state.endswith("*") and base not in ("down", "unknown", "future")


def parse_sinfo(text: str) -> Dict[str, NodeState]:
    """Parse the output of SINFO_NODE_ARGS (one line per node and partition)."""
    states: Dict[str, NodeState] = {}
    for line in text.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3:
            reason = parts[2].strip()
            states[parts[0]] = NodeState(parts[0], parts[1].strip(), "" if reason == "none" else reason)
    return states


def format_node_table(states: Dict[str, NodeState], names: List[str]) -> str:
    rows = []
    for name in names:
        st = states.get(name)
        rows.append(f"  {name:<14} {st.state if st else 'missing':<14} {st.reason if st else ''}")
    return "\n".join(rows)


def parse_oneliner(text: str) -> List[Dict[str, str]]:
    """`scontrol show <thing> --oneliner` -> one {Key: value} dict per line (values without spaces)."""
    rows = []
    for line in text.splitlines():
        fields: Dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
        if fields:
            rows.append(fields)
    return rows


def parse_registered_port(stdout: str, name: str) -> Optional[int]:
    """slurmctld's port in `sacctmgr show cluster` output for cluster ``name`` (None: not registered)."""
    for line in stdout.splitlines():
        cluster, _, port = line.partition("|")
        if cluster == name and port.strip().isdecimal() and int(port) > 0:
            return int(port)
    return None


class SlurmClient:
    """Slurm client commands against one cluster, through the runner of its controller."""

    def __init__(self, runner: Runner, env: Optional[Mapping[str, str]] = None, poll_s: float = 0.2):
        self.runner = runner
        self.env = dict(env or {})
        self.poll_s = poll_s  # how often a job tracker should ask squeue through this runner

    def run(self, argv: Sequence[str], timeout: float = DEFAULT_TIMEOUT, env: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None, stdin: Optional[str] = None) -> Result:
        """Run a Slurm command; ``cwd`` is a path as the cluster sees it."""
        full = dict(self.env)
        full.update(env or {})
        return self.runner.run(argv, env=full, stdin=stdin, timeout=timeout, cwd=cwd)

    def node_states(self, timeout: float = 10.0) -> Optional[Dict[str, NodeState]]:
        """{node: NodeState} from sinfo, or None if the controller does not answer."""
        res = self.run(SINFO_NODE_ARGS, timeout=timeout)
        return parse_sinfo(res.stdout) if res.ok else None

    def ping(self, timeout: float = 10.0) -> bool:
        res = self.run(["scontrol", "ping"], timeout=timeout)
        return res.ok and " is UP" in res.stdout

    def show(self, what: str, timeout: float = 10.0) -> str:
        """`scontrol show <what>` output, or the error it gave (for reports)."""
        res = self.run(["scontrol", "show", what], timeout=timeout)
        return res.stdout if res.ok else f"(scontrol show {what} failed: {res.error_line()})"

    def show_nodes(self, timeout: float = 10.0) -> List[Dict[str, str]]:
        res = self.run(["scontrol", "show", "nodes", "--oneliner"], timeout=timeout)
        return parse_oneliner(res.stdout) if res.ok else []

    def show_job(self, job_id: str) -> Dict[str, str]:
        """`scontrol show job -o` as a dict (empty when the job is unknown)."""
        res = self.run(["scontrol", "show", "job", "-o", job_id], timeout=10)
        rows = parse_oneliner(res.stdout) if res.ok else []
        return rows[0] if rows else {}

    def sbatch(self, script: str, args: Sequence[str] = (), env: Optional[Mapping[str, str]] = None) -> str:
        """Submit ``script`` (a path as the cluster sees it) from its directory; return the job id."""
        res = self.run(["sbatch", "--parsable", *args, script], env=env, cwd=posixpath.dirname(script))
        if not res.ok:
            raise SlurmError(f"sbatch {posixpath.basename(script)} failed: {res.error_line()}")
        return res.stdout.strip().split(";")[0]

    def scancel(self, *job_ids: str) -> None:
        if job_ids:
            self.run(["scancel", *job_ids], timeout=10)

    def registered_port(self, cluster: str, timeout: float = 10.0) -> Optional[int]:
        """slurmctld's port as slurmdbd recorded it for ``cluster``; None if not (yet) there."""
        res = self.run(["sacctmgr", "-n", "-P", "show", "cluster", cluster, "format=Cluster,ControlPort"],
                       timeout=timeout)
        return parse_registered_port(res.stdout, cluster) if res.ok else None

    def version(self) -> str:
        res = self.run(["sinfo", "--version"], timeout=10)
        return res.stdout.strip() if res.ok else f"(unknown: {res.error_line()})"
