"""What a check returns or raises: PASS with a message, FAIL with the job's output, SKIP with a reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass
class Outcome:
    """A passed check: one line for the report, facts for --json."""

    message: str
    data: Dict = field(default_factory=dict)
    output: Optional[Path] = None


class CheckFailed(Exception):
    """The cluster did not do what it must. ``output``: the job output file to show."""

    def __init__(self, message: str, output: Optional[Path] = None, hint: str = "", data: Optional[Dict] = None):
        super().__init__(message)
        self.message, self.output, self.hint, self.data = message, output, hint, data or {}


class CheckSkipped(Exception):
    """The check cannot run here (no GPUs, training stack not installed): never a PASS."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
