"""Every measured figure the docs quote, read from the tables `make bench` writes.

The generated benchmark pages (docs/benchmarks*.md) are the one place a time, count or
size of simcluster's own commands lives. Another page quotes one as a link to its table
whose title names the figure:

    `make demo` takes [44.6 s](docs/benchmarks-verify.md "figure: demo") on 2 cores

`python scripts/figures.py --write` (the last step of `make bench`) rewrites each such
link's text from the tables; `--check` lists the quotes that differ and exits 1.
tests/unit/test_figures.py fails on a stale quote, on a figure the tables do not have, and
on a measured time a page states without such a link.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


@dataclass(frozen=True)
class Figure:
    """One cell of a generated table: the page, the row whose first cell starts with
    ``row``, the column headed ``column``; ``pick`` takes min, median or max of a
    "min / median / max" cell (or the leading number of any other cell); ``where`` (column,
    text) keeps only rows whose cell in that column holds the text (a number: is exactly that
    number, so "2" does not take the row of 32 nodes). pick="line": the number
    after ``row`` on a line of the page outside tables (a total the generator writes)."""
    page: str
    row: str
    column: str
    pick: str = "median"
    unit: str = " s"
    where: Tuple[str, str] = ("", "")


_MMM = {"min": 0, "median": 1, "max": 2}
_IMAGES = {"base": "base:bookworm", "train": "node:0.1.0-train"}

FIGURES: Dict[str, Figure] = {
    # local backend (scripts/bench.py)
    **{f"up-{n}": Figure("benchmarks.md", str(n), "up min / median / max") for n in (2, 16, 64, 256, 512, 1024)},
    **{f"down-{n}": Figure("benchmarks.md", str(n), "down min / median / max") for n in (2, 256, 1024)},
    # `make demo` and the other whole runs (scripts/bench_verify.py)
    "demo": Figure("benchmarks-verify.md", "`simcluster test --nodes 2 --fake-gpus 2 --suite all`", "wall"),
    "test-basic": Figure("benchmarks-verify.md", "`simcluster test --nodes 2 --fake-gpus 2 --suite basic`", "wall"),
    "verify-basic": Figure("benchmarks-verify.md", "`verify --suite basic` on a standing local", "wall"),
    "verify-all": Figure("benchmarks-verify.md", "`verify --suite all` on a standing local", "wall"),
    # the suites `all` leaves out, and check's dry run (scripts/bench_verify.py, its other suites)
    "verify-signals": Figure("benchmarks-verify.md", "`verify --suite signals` on a standing local", "wall"),
    "verify-faults": Figure("benchmarks-verify.md", "`verify --suite faults` on a standing local", "wall"),
    "verify-rest": Figure("benchmarks-verify.md", "`verify --suite rest` on a standing local", "wall"),
    "check-run": Figure("benchmarks-verify.md", "`simcluster check --run", "wall"),
    "signals-checkpoint": Figure("benchmarks-verify.md", "signals.checkpoint", "local verify signals"),
    # docker backend (scripts/bench_docker.py)
    "docker-up-2": Figure("benchmarks-docker.md", "2", "up"),
    "docker-up-8": Figure("benchmarks-docker.md", "8", "up"),
    "docker-image-from-nothing": Figure("benchmarks-docker.md", "from nothing, total", "seconds", pick="first"),
    "docker-train-image": Figure("benchmarks-docker.md", "training image (`--train`) build, no cache", "seconds",
                                 pick="first"),
    "docker-image-rebuild": Figure("benchmarks-docker.md", "rebuild, nothing changed", "seconds"),
    "docker-base-offline": Figure("benchmarks-docker.md", "offline base (debootstrap + docker import)", "seconds",
                                  pick="first"),
    # accounting (scripts/bench_accounting.py)
    "up-accounting": Figure("benchmarks-accounting.md", "with `--accounting`", "`up` seconds (min / median / max)"),
    "accounting-extra": Figure("benchmarks-accounting.md", "**Extra `up` time for accounting (median):", "", pick="line"),
    "docker-accounting-extra": Figure("benchmarks-accounting-docker.md", "**Extra `up` time for accounting (median):", "",
                                      pick="line"),
    "up-no-accounting": Figure("benchmarks-accounting.md", "without accounting", "`up` seconds (min / median / max)"),
    # faults (scripts/bench_faults.py)
    "down-detect-default": Figure("benchmarks-faults.md", "`fault kill node2` -> node2 DOWN", "seconds: median (min, max, n)",
                                  pick="first", where=("cluster", "default")),
    "not-responding-default": Figure("benchmarks-faults.md", "`fault kill node2` -> node2 not responding",
                                     "seconds: median (min, max, n)", pick="first", where=("cluster", "default")),
    "not-responding-fast": Figure("benchmarks-faults.md", "`fault kill node2` -> node2 not responding",
                                  "seconds: median (min, max, n)", pick="first", where=("cluster", "--fast-failure")),
    "down-detect-fast": Figure("benchmarks-faults.md", "`fault kill node2` -> node2 DOWN", "seconds: median (min, max, n)",
                               pick="first", where=("cluster", "--fast-failure")),
    # container steps (scripts/bench_containers.py): import, then per node count the first step,
    # a warm step and the same step without a container
    **{f"container-import-{i}": Figure("benchmarks-containers.md", f"dockerd://simcluster/{image}", "`image import` (s)",
                                       pick="first") for i, image in _IMAGES.items()},
    **{f"container-{kind}-{i}-{n}": Figure("benchmarks-containers.md", f"dockerd://simcluster/{image}", column,
                                           pick="first", where=("nodes", str(n)))
       for i, image in _IMAGES.items() for n in (2, 8, 32) for kind, column in (
           ("first", "first container step (s: unpack + mount)"),
           ("warm", "warm container step (s: median (min, max, n))"),
           ("plain", "step without a container (s)"))},
    # pytest plugin (scripts/bench_pytest.py)
    "pytest-first-local": Figure("benchmarks-pytest.md", "slurm_cluster, local, 2 nodes", "time to first test",
                                 pick="first"),
    "pytest-first-docker": Figure("benchmarks-pytest.md", "slurm_cluster, docker, 2 nodes", "time to first test",
                                  pick="first"),
    # Slurm releases' images (docs/benchmarks-versions.md)
    "train-image-24.11": Figure("benchmarks-versions.md", "`--train` image from its base, no cache", "24.11 (trixie)",
                                pick="first"),
    "train-image-26.05": Figure("benchmarks-versions.md", "`--train` image from its base, no cache", "26.05 (sid)",
                                pick="first"),
    # `simcluster scale` (scripts/bench_scale.py)
    **{f"scale-{b}-{n}": Figure("benchmarks-scale.md", f"{b}, 2 running nodes, `scale --add {n}`",
                                "seconds: median (min, max, runs)", pick="first")
       for b in ("local", "docker") for n in (2, 64)},
}


def tables(text: str) -> List[Tuple[List[str], List[List[str]]]]:
    """(header cells, rows of cells) of every markdown table of ``text``."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.match(r"^\|\s*:?-", lines[i + 1]):
            header = _cells(lines[i])
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            found.append((header, rows))
        else:
            i += 1
    return found


def _cells(line: str) -> List[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def value(name: str, figure: Figure, docs: Path = DOCS) -> str:
    """The figure as a page quotes it ("2.73 s"), read from its generated table."""
    text = (docs / figure.page).read_text()
    if figure.pick == "line":
        m = re.search(re.escape(figure.row) + r"\s*(\d+(?:\.\d+)?)", text)
        if m:
            return m.group(1) + figure.unit
        raise LookupError(f"figure {name}: no '{figure.row} N' in docs/{figure.page}")
    for header, rows in tables(text):
        if figure.column not in header:
            continue
        col = header.index(figure.column)
        for row in rows:
            first = row[0].strip()
            matches = first == figure.row if figure.row.isdigit() else first.startswith(figure.row)
            if figure.where[0]:
                wcol = header.index(figure.where[0]) if figure.where[0] in header else -1
                want = figure.where[1]  # a number names the cell exactly ("2" is not "32"), words are in it
                matches = matches and 0 <= wcol < len(row) and (
                    row[wcol] == want if want.isdigit() else want in row[wcol])
            if matches and col < len(row):
                cell = row[col]
                parts = [p.strip() for p in cell.split("/")]
                if figure.pick in _MMM and len(parts) == 3:
                    number = parts[_MMM[figure.pick]]
                else:
                    number = cell.split()[0] if cell.split() else ""
                if not re.fullmatch(r"\d+(\.\d+)?", number):
                    break
                return number + figure.unit
    raise LookupError(f"figure {name}: no row '{figure.row}' with column '{figure.column}' in docs/{figure.page}")


# A quote: a link whose title is "figure: NAME"; its text is the figure.
QUOTE = re.compile(r'\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+) "figure: (?P<name>[\w.-]+)"\)')


def pages() -> List[Path]:
    """The pages that may quote figures: README.md and docs/*.md (a generated page may
    quote another's)."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def stale(text: str, docs: Path = DOCS) -> List[str]:
    """'NAME: says X, the tables say Y' for each quote of ``text`` that differs, or names a
    figure that does not exist."""
    problems = []
    for m in QUOTE.finditer(text):
        name = m.group("name")
        if name not in FIGURES:
            problems.append(f"{name}: no such figure (scripts/figures.py FIGURES)")
            continue
        want = value(name, FIGURES[name], docs)
        if m.group("text") != want:
            problems.append(f"{name}: says {m.group('text')}, the tables say {want}")
        if not m.group("target").split("#")[0].endswith(FIGURES[name].page):
            problems.append(f"{name}: links to {m.group('target')}, not to {FIGURES[name].page}")
    return problems


def fill(text: str, docs: Path = DOCS) -> str:
    """``text`` with every quote's text set from the tables."""
    def one(m: re.Match) -> str:
        name = m.group("name")
        if name not in FIGURES:
            return m.group(0)
        return f'[{value(name, FIGURES[name], docs)}]({m.group("target")} "figure: {name}")'
    return QUOTE.sub(one, text)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite every quote from the tables")
    mode.add_argument("--check", action="store_true", help="list stale quotes; exit 1 if any")
    args = ap.parse_args(argv)
    bad = 0
    for page in pages():
        text = page.read_text()
        if args.write:
            new = fill(text)
            if new != text:
                page.write_text(new)
                print(f"updated {page.relative_to(REPO)}")
        for problem in stale(page.read_text()):
            print(f"{page.relative_to(REPO)}: {problem}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
