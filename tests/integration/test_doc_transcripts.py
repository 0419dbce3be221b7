"""The command transcripts of README.md and docs/*.md, run against real clusters.

Each page of tests/transcripts.py's PAGES runs in one bash (byexample) in a scratch
directory with the files it names, all pages sharing one private SIMCLUSTER_HOME: the
clusters the transcripts bring up carry names of their own and their own free ports, so
they run beside a user's clusters. Every page takes down what it brought up; the module's
teardown takes down anything a failed page left, and fails if a daemon is still running.
"""

from __future__ import annotations

import shutil
import uuid

import pytest

from tests.conftest import TEST_HOME_ROOT, daemons_under, run_cli
from tests.transcripts import PAGES, REPO, byexample, page_env, scratch_dir

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def home():
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    path = TEST_HOME_ROOT / f"doc-{uuid.uuid4().hex[:6]}"
    path.mkdir()
    yield path
    for child in sorted(path.iterdir()):
        if (child / "state.json").exists():
            run_cli(["down", "--name", child.name], path)
    leftover = daemons_under(path)
    shutil.rmtree(path, ignore_errors=True)
    assert not leftover, f"processes left running after the transcripts: {leftover}"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_transcripts_of_page_print_what_the_page_shows(page, home, tmp_path):
    work = scratch_dir(page, tmp_path)
    try:
        proc = byexample([REPO / page], cwd=work, env=page_env(home))
        assert proc.returncode == 0, f"{page}: a transcript printed something else\n{proc.stdout[-12000:]}"
        assert "[PASS]" in proc.stdout, proc.stdout[-2000:]
        # Each page leaves no cluster behind: its transcripts end with their `down`.
        left = sorted(p.name for p in home.iterdir() if (p / "state.json").exists())
        assert left == [], f"{page} left clusters up: {left}"
    finally:
        # A page that failed half-way leaves its cluster: taken down here, so the next
        # page is judged on its own transcripts.
        for child in sorted(home.iterdir()):
            if (child / "state.json").exists():
                run_cli(["down", "--name", child.name], home)
