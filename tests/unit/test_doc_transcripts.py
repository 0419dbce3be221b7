"""The transcript machinery without a cluster: every `$ command` block of the docs runs in
tests/integration/test_doc_transcripts.py or says why not where a reader sees it, every
page parses, and the comparison fails on a wrong output while its patterns match what
varies (times, ports, ids)."""

from __future__ import annotations

import pytest

from tests.transcripts import PAGES, REPO, byexample, doc_pages, page_env, transcript_blocks, unmarked_skips


def test_every_transcript_of_the_docs_runs_or_says_why_not():
    problems = []
    for page in doc_pages():
        problems += unmarked_skips(str(page.relative_to(REPO)), page.read_text())
    assert problems == []


def test_every_page_that_runs_has_transcripts_and_parses(tmp_path):
    for page in PAGES:
        assert transcript_blocks((REPO / page).read_text()), f"{page} is in PAGES but has no `$ ` transcript"
    proc = byexample([REPO / page for page in sorted(PAGES)], cwd=tmp_path, env=page_env(tmp_path), dry=True)
    assert proc.returncode == 0, proc.stdout


def test_marks_checker_finds_an_unmarked_skip_and_a_transcript_nobody_runs():
    unmarked = "Run it:\n\n```\n$ nvidia-smi -L   # byexample: +skip\nGPU 0: H100\n```\n"
    marked = "Not run in CI: needs a real GPU.\n\n```\n$ nvidia-smi -L   # byexample: +skip\nGPU 0: H100\n```\n"
    marked_but_runs = "Not run in CI: needs a real GPU.\n\n```\n$ nvidia-smi -L\nGPU 0: H100\n```\n"
    assert unmarked_skips("README.md", marked) == []
    assert "without 'not run in CI" in unmarked_skips("README.md", unmarked)[0]
    assert "but its commands run" in unmarked_skips("README.md", marked_but_runs)[0]
    assert "does not run" in unmarked_skips("docs/elsewhere.md", "```\n$ echo hi\nhi\n```\n")[0]
    assert unmarked_skips("docs/elsewhere.md", marked) == []
    assert unmarked_skips("docs/elsewhere.md", marked_but_runs) == []
    assert unmarked_skips("docs/elsewhere.md", "```\nsimcluster up   # no prompt: not a transcript\n```\n") == []


@pytest.mark.parametrize("expected, passes", [
    ("port <port>, up in <...>s\nsecond line", True),
    ("port 27914, up in 0.21s\nsecond line", True),
    ("port <port>, up in <...>s\nanother line", False),
    ("port <port>, down in <...>s\nsecond line", False),
])
def test_a_transcript_passes_on_its_output_and_fails_on_another(tmp_path, expected, passes):
    page = tmp_path / "page.md"
    page.write_text(f"```\n$ echo 'port 27914, up in 0.21s'; echo 'second line'\n{expected}\n```\n")
    proc = byexample([page], cwd=tmp_path, env=page_env(tmp_path))
    assert (proc.returncode == 0) is passes, proc.stdout
