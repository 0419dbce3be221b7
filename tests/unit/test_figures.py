"""One figure per fact: the times the docs quote come from the tables `make bench` writes.

- every figure of scripts/figures.py is a cell of a generated table (docs/benchmarks*.md);
- every quote (a link titled "figure: NAME") says what that cell says today;
- no page states a measured time outside a quote: after a word that makes it one ("~7 s",
  "about 25 s", "takes 4-5 s"), with a fraction ("0.61 s": settings, timeouts and Slurm's
  intervals are whole seconds), or alone in a table cell ("| 79 s |"). The generated part of
  docs/reliability.md (below its soak-results marker) is a results page like the tables.
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

_UNIT = r"(?:s|ms|seconds?|minutes?|min)\b"
_NUMBER = r"\d+(?:\.\d+)?"
_SPAN = rf"{_NUMBER}(?: ?(?:-|–|to) ?{_NUMBER})?"  # "25", "4-5", "3–4", "6 to 8"

# A measured duration as prose states one: "~7 s", "about 25 s", "takes 4-5 s", "took 147 s".
MEASURED = re.compile(rf"(?:~ ?|\b(?:about|around|roughly|nearly|almost|takes?|took|taking|lasts?|lasted|"
                      rf"costs?(?: about)?) ){_SPAN} ?{_UNIT}", re.IGNORECASE)
# A bare duration with a fraction ("4.2 s", "0.61 s", "5.7-6.8 s"): what a config sets, a timeout
# and Slurm's fixed intervals are whole seconds, so a fraction was measured. A poll interval
# ("every 0.2 s") is not.
FRACTION = re.compile(rf"(?<![\w.=+/-])(?<!every )\d+\.\d+(?: ?(?:-|–|to) ?{_NUMBER})? ?{_UNIT}", re.IGNORECASE)
# A table cell that is a duration and nothing else ("| 79 s |", "| 11.5-12.5 s (n=6) |"): a
# measurement table, which belongs in a generated page.
CELL = re.compile(rf"~?{_SPAN} ?{_UNIT}(?: \(.*\))?", re.IGNORECASE)

# Where a page's generated part starts (scripts/soak.py writes docs/reliability.md's results).
GENERATED_FROM = "<!-- soak results -->"


def measured_times(text: str):
    """(line, words) of every measured time ``text`` states outside a quote: after a word that
    says so ("about 25 s"), with a fraction ("0.61 s"), or alone in a table cell ("| 79 s |")."""
    text = text.split(GENERATED_FROM)[0]
    for n, line in prose_lines(text):
        bare = figures.QUOTE.sub("", strip_code_spans(line))
        found = [(m.start(), m.group(0)) for m in MEASURED.finditer(bare)]
        found += [(m.start(), m.group(0)) for m in FRACTION.finditer(bare)
                  if not any(m.group(0) in w for _, w in found)]
        if bare.lstrip().startswith("|"):
            found += [(bare.index(c), c.strip()) for c in bare.strip().strip("|").split("|")
                      if CELL.fullmatch(c.strip()) and not any(c.strip() in w or w in c for _, w in found)]
        for _, words in sorted(found):
            yield n, words


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
    found = [f"{page.relative_to(ROOT)}:{n}: '{words}': quote it from a generated table "
             f"([value](docs/benchmarks....md \"figure: NAME\"), scripts/figures.py), link there, or say "
             f"it without a measured number"
             for page in user_pages() for n, words in measured_times(page.read_text())]
    assert found == []


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


def test_bare_measured_times_are_found_and_settings_are_not():
    text = ("An import took 4.2 s here, `up` 0.61 s; accounting adds about 3–4 s, the check takes 6 to 8 s.\n"
            "| settings | node2 DOWN after |\n|---|---|\n| default | 79 s |\n| fast | 11.5-12.5 s (n=6) |\n"
            # settings, timeouts and Slurm's intervals: whole seconds, or a poll interval
            "SlurmdTimeout=5; MessageTimeout (10 s; 3 s with --fast-failure); a 120 s timeout, default 60 s;\n"
            "slurmctld's pass runs every 30 s, up to 30 s late; sinfo polled every 0.2 s; Slurm 22.05, `--in 90`.\n"
            "| setting | default | fast |\n|---|---|---|\n| SlurmdTimeout | 60 | 5 |\n"
            "<!-- soak results -->\nA run's own figures: 30.2 min, kill-controller ~5.7 s.\n")
    assert [w for _, w in measured_times(text)] == ["took 4.2 s", "0.61 s", "about 3–4 s", "takes 6 to 8 s", "79 s",
                                                    "11.5-12.5 s"]
