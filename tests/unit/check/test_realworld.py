"""`simcluster check` on batch scripts written by others (tests/data/check/realworld/): every
finding matches the verdict table, errors plus warnings are right at least 80% of the time, and
every real bug the table records is reported.

The scripts come from public repositories (MANIFEST.tsv: repository, path, commit, licence)
and are not kept in this repository: the corpus test runs where `scripts/` holds them (or
$SIMCLUSTER_CHECK_REALWORLD points at them) and is skipped elsewhere. The table itself is
checked everywhere. Pure logic: nothing is started."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

from provisioner.check.report import check_text
from tests.conftest import REPO

REAL = REPO / "tests" / "data" / "check" / "realworld"
SCRIPTS = Path(os.environ.get("SIMCLUSTER_CHECK_REALWORLD", REAL / "scripts"))
MIN_PRECISION = 0.8


def _rows(path):
    return [line.rstrip("\n").split("\t") for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


MANIFEST = _rows(REAL / "MANIFEST.tsv")
VERDICTS = [dict(zip(("script", "line", "rule", "before", "now", "verdict", "why"), r))
            for r in _rows(REAL / "verdicts.tsv")]


def precision(rows, when):
    judged = [r for r in rows if r[when] in ("error", "warning")]
    return sum(r["verdict"] == "right" for r in judged) / len(judged), len(judged)


def test_manifest_and_table_agree():
    ids = {r[0] for r in MANIFEST}
    assert len(ids) >= 40 and all(len(r) == 5 and r[1].count("/") == 1 and len(r[3]) == 40 for r in MANIFEST)
    assert all(v["script"] in ids and v["verdict"] in ("right", "wrong") and v["why"] for v in VERDICTS)
    assert len({(v["script"], v["line"], v["rule"]) for v in VERDICTS}) == len(VERDICTS)


def test_precision_of_the_table():
    """What the table records: errors and warnings now right >= 80%, and better than before."""
    now, n_now = precision(VERDICTS, "now")
    before, _ = precision(VERDICTS, "before")
    assert n_now >= 20 and now >= MIN_PRECISION and now > before
    bugs = [v for v in VERDICTS if v["verdict"] == "right" and v["before"] in ("error", "warning")]
    assert all(v["now"] == v["before"] for v in bugs), "every right finding is still reported, at its level"


def test_recall_of_the_table():
    """Every real multi-node bug of the corpus (a right finding whose why starts with "bug:") is
    reported now, as an error or a warning, and none is listed as missed."""
    bugs = [v for v in VERDICTS if v["verdict"] == "right" and v["why"].startswith("bug:")]
    missed = [line for line in (REAL / "verdicts.tsv").read_text().splitlines() if line.startswith("# missed:")]
    found = [v for v in bugs if v["now"] in ("error", "warning")]
    assert len(bugs) >= 3 and len(found) / (len(bugs) + len(missed)) == 1.0, (missed, bugs)
    assert {v["rule"] for v in found} >= {"launcher-without-srun", "single-node-launch", "nnodes-mismatch"}


def _corpus_present():
    return SCRIPTS.is_dir() and all((SCRIPTS / r[0]).is_file() for r in MANIFEST)


@pytest.mark.skipif(not _corpus_present(), reason=f"the real-world scripts are not in {SCRIPTS} (see MANIFEST.tsv)")
def test_findings_match_the_verdicts():
    """Each script gives exactly the findings the table says it gives now, at their levels."""
    want = defaultdict(set)
    for v in VERDICTS:
        if v["now"] != "-":
            want[v["script"]].add((int(v["line"]), v["rule"], v["now"]))
    diffs = []
    for sid, *_ in MANIFEST:
        path = SCRIPTS / sid
        got = {(f.line, f.rule, f.severity) for f in check_text(str(path), path.read_text(), use_shellcheck=False)}
        if got != want[sid]:
            diffs.append(f"{sid}: new {sorted(got - want[sid])}, gone {sorted(want[sid] - got)}")
    assert not diffs, "\n".join(diffs)
