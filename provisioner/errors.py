"""One error hierarchy for simcluster.

Every error a user can cause or meet carries a one-line message, an optional hint
(how to fix it), optionally the section of docs/troubleshooting.md that explains it, and
an exit code. The CLI prints ``error: <message> (<hint>; see <doc>)`` and exits with the
code; a traceback is shown only with ``-v``.
"""

from __future__ import annotations

from typing import Optional, Sequence


class SimclusterError(Exception):
    """Base class: something went wrong that the user should hear about in one line."""

    exit_code = 1
    doc: Optional[str] = None  # e.g. "docs/troubleshooting.md#gpu-not-found"

    def __init__(self, message: str, hint: Optional[str] = None, details: str = "", doc: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        # Multi-line context (node states, log tails) printed after the one-line summary.
        self.details = details
        if doc:
            self.doc = doc

    def one_line(self) -> str:
        extra = "; ".join(x for x in (self.hint, f"see {self.doc}" if self.doc else None) if x)
        return f"{self.message} ({extra})" if extra else self.message


class UsageError(SimclusterError):
    """Bad input: flags, YAML, names, GPU lists, ports in use. Exit 2."""

    exit_code = 2


class ConfigError(UsageError):
    """The cluster spec is invalid; carries every problem found, not just the first."""

    def __init__(self, problems: Sequence[str], source: str = "cluster spec"):
        self.problems = list(problems)
        if len(self.problems) == 1:
            message = f"invalid {source}: {self.problems[0]}"
            details = ""
        else:
            message = f"invalid {source}: {len(self.problems)} problems"
            details = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message, details=details)


class PrerequisiteError(UsageError):
    """A program or file simcluster needs is missing on this host. Exit 2."""

    doc = "docs/troubleshooting.md"


class ClusterNotFound(SimclusterError):
    """The named cluster does not exist on this machine."""


class ClusterConflict(SimclusterError):
    """`up` on a running cluster whose spec differs. Exit 2: the request conflicts."""

    exit_code = 2


class StartupError(SimclusterError):
    """A daemon failed to start or the cluster did not become ready in time."""

    doc = "docs/troubleshooting.md#a-cluster-does-not-come-up"
