"""Progress lines survive a reader that went away (provisioner/progress.py)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_progress_after_the_pipe_closed_is_silent_and_the_work_goes_on(tmp_path):
    # The child prints one progress line, the reader closes the pipe, then the child
    # prints more and must still reach its end (exit 0, nothing on the dead pipe).
    child = ("import sys, time\n"
             "from provisioner import progress\n"
             "progress.stderr('first')\n"
             "time.sleep(0.3)\n"
             "for i in range(50): progress.stderr('more %d' % i)\n"
             "open(sys.argv[1], 'w').write('reached the end')\n")
    marker = str(tmp_path / "end")
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", child, marker], stderr=w,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    os.close(w)
    got = b""
    while not got.endswith(b"\n"):  # print may write the text and its newline apart
        chunk = os.read(r, 64)
        assert chunk, f"the child ended before its first line: {got!r}"
        got += chunk
    assert got == b"first\n"
    os.close(r)
    assert proc.wait(timeout=30) == 0
    with open(marker) as f:
        assert f.read() == "reached the end"
