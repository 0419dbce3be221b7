"""The docs' command transcripts (`$ command` lines and the output under them) as tests.

Every fenced block of README.md and docs/*.md with a line starting with `$ ` is a
transcript. byexample (pinned in pyproject.toml's `test` extra) runs each page's
transcripts in one bash, in order, so a page's later examples use the cluster its earlier
ones brought up; it compares what each command prints (stdout and stderr, as a terminal
shows them) with the lines under it. `<...>` matches anything (times, addresses, long
lists; several lines too) and a named tag such as `<port>` matches anything once.

A page runs in a scratch directory of its own, holding the files its commands name
(PAGES), with a private SIMCLUSTER_HOME and the checkout's simcluster first on PATH. A
transcript that cannot run where CI runs (real GPUs, remote hosts, other users) says so
where a reader sees it: the line before its block holds NOT_RUN ("Not run in CI: needs
..."); on a page that runs, its commands also end with byexample's `# byexample: +skip`.

tests/integration/test_doc_transcripts.py runs the pages against real clusters;
tests/unit/test_doc_transcripts.py checks that every transcript of the docs is run or
marked, and that a wrong output fails. How to run and update them: docs/dev/docs-tests.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[1]

# Each page with transcripts that run, and the files its commands use: name in the page's
# scratch directory -> a file or directory of the repository.
PAGES: Dict[str, Dict[str, str]] = {
    "README.md": {},
    "docs/accounting.md": {},
    "docs/check.md": {
        "train_ddp.sh": "tests/data/check/seeds/ch8a-3.2-train_ddp.sh",
        "prod": "tests/data/check/like/other",
        "train.sbatch": "tests/data/check/seeds/enroot-prelaunch.sh",
    },
    "docs/faults.md": {
        "job.sh": "tests/data/transcripts/job.sh",
        "cluster.yaml": "tests/data/signals/preempt.yaml",
        "gpu.yaml": "tests/data/transcripts/gpu-faults.yaml",
    },
    "docs/like.md": {"prod": "tests/data/like/h100-site"},
    "docs/verify.md": {},
}

# What the line before a transcript that does not run says, for readers and for the check.
NOT_RUN = "not run in CI"
SKIP_OPTION = "byexample: +skip"

# Per command; `simcluster test --suite all` takes about a minute on 2 busy cores.
TIMEOUT_S = 300

_FENCE = re.compile(r"^\s*(```|~~~)")


def doc_pages() -> List[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def transcript_blocks(text: str) -> List[Tuple[int, List[str], str]]:
    """(line number of the opening fence, the block's lines, the text just before it) of
    every fenced block that holds a `$ ` command line."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if _FENCE.match(lines[i]):
            j = i + 1
            while j < len(lines) and not _FENCE.match(lines[j]):
                j += 1
            body = lines[i + 1:j]
            if any(line.startswith("$ ") for line in body):
                before, k = [], i - 1
                while k >= 0 and not lines[k].strip():
                    k -= 1
                while k >= 0 and lines[k].strip() and not _FENCE.match(lines[k]):
                    before.insert(0, lines[k])
                    k -= 1
                blocks.append((i + 1, body, " ".join(before)))
            i = j + 1
        else:
            i += 1
    return blocks


def unmarked_skips(page: str, text: str) -> List[str]:
    """Where the transcripts of ``page`` (a path in the repository) are skipped without a
    reader being told, or told but not skipped: 'page:line: why' for each."""
    problems = []
    for line_no, body, before in transcript_blocks(text):
        commands = [line for line in body if line.startswith("$ ")]
        skipped = all(SKIP_OPTION in c for c in commands)
        marked = NOT_RUN.lower() in before.lower()
        where = f"{page}:{line_no}"
        if page not in PAGES:
            if not marked:
                problems.append(f"{where}: a transcript on a page that tests/transcripts.py's PAGES does not run, "
                                f"and no '{NOT_RUN}: <why>' in the lines before it")
        elif any(SKIP_OPTION in c for c in commands) and not marked:
            problems.append(f"{where}: skipped commands without '{NOT_RUN}: <why>' in the lines before the block")
        elif marked and not skipped:
            problems.append(f"{where}: marked '{NOT_RUN}' but its commands run")
    return problems


def byexample(paths: List[Path], cwd: Path, env: Dict[str, str], dry: bool = False,
              timeout: float = 1800) -> subprocess.CompletedProcess:
    """byexample over ``paths`` (shell examples only), stopping at a page's first failure."""
    argv = [str(Path(sys.executable).parent / "byexample"), "-l", "shell", "--timeout", str(TIMEOUT_S),
            "--ff", "--no-progress-bar", "--diff", "unified"]
    if dry:
        argv.append("--dry")
    return subprocess.run(argv + [str(p) for p in paths], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def page_env(home: Path) -> Dict[str, str]:
    """A user's environment: the checkout's simcluster first on PATH, a private
    SIMCLUSTER_HOME, no SLURM_*/SIMCLUSTER_* of this process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SIMCLUSTER"))}
    env["SIMCLUSTER_HOME"] = str(home)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def scratch_dir(page: str, where: Path) -> Path:
    """A fresh directory holding the files ``page``'s commands use (PAGES)."""
    work = where / re.sub(r"[^A-Za-z0-9]+", "-", page)
    work.mkdir(parents=True)
    for name, source in PAGES[page].items():
        src = REPO / source
        if src.is_dir():
            shutil.copytree(src, work / name)
        else:
            shutil.copy(src, work / name)
    return work
