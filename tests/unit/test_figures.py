"""One figure per fact: the times the docs quote come from the tables `make bench` writes.

- every figure of scripts/figures.py is a cell of a generated table (docs/benchmarks*.md);
- every quote (a link titled "figure: NAME") says what that cell says today;
- no page states a measured time ("~7 s", "about 25 s", "takes 4-5 s") outside a quote,
  except the ones listed in UNSOURCED, which no `make bench` table measures yet; an entry
  that is gone from its page fails too, so the list only shrinks.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import figures  # noqa: E402

from tests.unit.test_docs import prose_lines, strip_code_spans  # noqa: E402

# A measured duration as prose states one: "~7 s", "about 25 s", "takes 4-5 s", "took 147 s".
MEASURED = re.compile(r"(?:~|\babout |\btakes? |\btook |\bcosts? (?:about )?)\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?"
                      r"(?:s|ms|seconds|minutes?|min)\b", re.IGNORECASE)

# Measured times still stated in prose that no generated table holds: (page, the words).
UNSOURCED = [
    ("docs/check.md", "takes about 25 s"), ("docs/check.md", "about 3 s"),
    ("docs/commands.md", "takes 1-2 minutes"), ("docs/commands.md", "About 4 s"),
    ("docs/docker.md", "~0.12 s"), ("docs/docker.md", "~0.2 s"), ("docs/docker.md", "~50-60 ms"),
    ("docs/docker.md", "~0.1-0.2 s"), ("docs/docker.md", "about 40 s"),
    ("docs/faults.md", "~70 s"), ("docs/faults.md", "about 2 s"),
    ("docs/fidelity.md", "took 10 s"),
    ("docs/make.md", "about 15 minutes"), ("docs/make.md", "About 2 minutes"),
    ("docs/pytest.md", "about 2 minutes"),
    ("docs/reliability.md", "takes ~5.7 s"),
    ("docs/rest.md", "takes about 11 s"), ("docs/rest.md", "about 2.7 s"),
    ("docs/scale.md", "about 0.1 s"), ("docs/scale.md", "about 12 s"),
    ("docs/schedmd-testsuite.md", "about 3 minutes"), ("docs/schedmd-testsuite.md", "took 147 s"),
    ("docs/verify.md", "about 0.1 s"), ("docs/verify.md", "about 2.5 minutes"), ("docs/verify.md", "takes 1-2 minutes"),
    ("docs/verify.md", "about 3 s"), ("docs/verify.md", "about 31 s"),
    # Slurm's own fixed interval (RPC_RETRY_INTERVAL), not a measurement.
    ("docs/verify.md", "about 60 s"),
]


def measured_times(text: str):
    """(line, words) of every measured time ``text`` states in prose outside a quote."""
    for n, line in prose_lines(text):
        for m in MEASURED.finditer(figures.QUOTE.sub("", strip_code_spans(line))):
            yield n, m.group(0)


def test_every_figure_is_a_cell_of_a_generated_table():
    for name, figure in figures.FIGURES.items():
        assert re.fullmatch(r"\d+(\.\d+)? s", figures.value(name, figure)), name


def test_every_quote_says_what_the_tables_say():
    problems = [f"{p.relative_to(ROOT)}: {x}" for p in figures.pages() for x in figures.stale(p.read_text())]
    assert problems == []
    quoted = {m.group("name") for p in figures.pages() for m in figures.QUOTE.finditer(p.read_text())}
    assert {"demo", "up-2", "up-256", "docker-up-2"} <= quoted


def user_pages():
    """The pages a measured time must be quoted on: all but the generated tables."""
    return [p for p in figures.pages() if not p.name.startswith("benchmarks")]


def test_no_page_states_a_measured_time_the_tables_do_not_hold():
    found = []
    for page in user_pages():
        name = str(page.relative_to(ROOT))
        for n, words in measured_times(page.read_text()):
            if not any(w in words or words in w for p, w in UNSOURCED if p == name):
                found.append(f"{name}:{n}: '{words}': quote it from a generated table "
                             f"([value](docs/benchmarks....md \"figure: NAME\"), scripts/figures.py) or link there")
    assert found == []


def test_unsourced_list_only_names_what_the_pages_still_say():
    gone = [(p, w) for p, w in UNSOURCED
            if not any(w in words or words in w for _, words in measured_times((ROOT / p).read_text()))]
    assert gone == [], "no longer on the page: take them out of UNSOURCED"


def test_a_stale_quote_is_found_and_filled_from_the_table(tmp_path):
    (tmp_path / "benchmarks.md").write_text(
        "| nodes | up min / median / max | down min / median / max |\n|---|---|---|\n"
        "| 2 | 0.26 / 0.27 / 0.30 | 0.18 / 0.18 / 0.19 |\n| 256 | 2.66 / 2.73 / 2.79 | 0.67 / 0.69 / 0.72 |\n")
    page = 'Up in [~7 s](benchmarks.md "figure: up-256"), [0.27 s](benchmarks.md "figure: up-2").'
    assert figures.stale(page, docs=tmp_path) == ["up-256: says ~7 s, the tables say 2.73 s"]
    assert figures.fill(page, docs=tmp_path) == \
        'Up in [2.73 s](benchmarks.md "figure: up-256"), [0.27 s](benchmarks.md "figure: up-2").'
    assert figures.stale('[1 s](benchmarks.md "figure: no-such")', docs=tmp_path) == \
        ["no-such: no such figure (scripts/figures.py FIGURES)"]
    with pytest.raises(LookupError):
        figures.value("up-64", figures.FIGURES["up-64"], docs=tmp_path)


def test_measured_times_in_prose_are_found():
    text = "Starts in ~7 s; the suite takes about 25 s, `up` took 4-5 s.\n```\nabout 9 s in code\n```\n" \
           'Quoted: about [2.73 s](benchmarks.md "figure: up-256").\n'
    assert [w for _, w in measured_times(text)] == ["~7 s", "takes about 25 s"[6:], "took 4-5 s"]
