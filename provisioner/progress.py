"""Progress lines on standard error, for every command that prints them (up, start, scale,
image build, deploy, the pytest plugin's clusters).

A reader that goes away (`simcluster up 2>&1 | head -1`) closes the pipe: the next write
fails with EPIPE. Progress is a courtesy, the work is not: a failed write must not abort an
`up` half-way (namespaces made, daemons not yet started) or the rollback that would clear
it. So the first failed write silences standard error for the rest of the command (what
would still be written there has no reader) and the work goes on; the command's result
still goes to standard output where that is open.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

# What every command that reports progress is handed: a function taking one line.
Progress = Callable[[str], None]

_silenced = False


def stderr(msg: str) -> None:
    """Print ``msg`` and a newline on standard error now; nothing once the reader is gone."""
    global _silenced
    if _silenced:
        return
    try:
        print(msg, file=sys.stderr, flush=True)
    except (BrokenPipeError, ValueError, OSError):
        # ValueError: stderr was closed. Python's own flush at exit would fail once more
        # and print "Exception ignored": point stderr at /dev/null instead.
        _silenced = True
        try:
            sys.stderr = open(os.devnull, "w")
        except OSError:  # pragma: no cover - no /dev/null
            pass
