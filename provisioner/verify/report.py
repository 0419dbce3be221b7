"""How verify reports: a line per check as it ends, a summary table, JSON and JUnit XML."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Optional, TextIO

from provisioner.verify.check_runner import CheckResult
from provisioner.verify.outcome import FAIL, PASS, SKIP

WIDTH = 24  # check-name column


def live_line(res: CheckResult) -> str:
    """'basic.array              PASS    1.2s  4 tasks, ...' (the message cut to one line)."""
    msg = res.message.splitlines()[0] if res.message else ""
    return f"{res.name:<{WIDTH}} {res.status:<5} {res.seconds:6.1f}s  {msg}"


def failure_block(res: CheckResult) -> str:
    """What a FAIL shows under its line: the job output's tail and where the full log is."""
    parts = []
    if res.hint:
        parts.append(f"    hint: {res.hint}")
    if res.first_error and res.first_error not in res.tail:
        parts.append(f"    first error in the output: {res.first_error}")
    if res.tail:
        parts.append(f"    last lines of {res.output or 'the job output'}:")
        parts.append(textwrap.indent(res.tail.rstrip(), "    | "))
    if res.output:
        parts.append(f"    full output: {res.output}")
    return "\n".join(parts)


def counts(results: List[CheckResult]) -> Dict[str, int]:
    return {s: sum(1 for r in results if r.status == s) for s in (PASS, FAIL, SKIP)}


def summary_table(results: List[CheckResult], total_s: float, suite_seconds: Dict[str, float]) -> str:
    rows = [f"{'CHECK':<{WIDTH}} {'RESULT':<6} {'SECONDS':>8}  WHAT", "-" * 78]
    for r in results:
        rows.append(f"{r.name:<{WIDTH}} {r.status:<6} {r.seconds:8.1f}  {r.description}")
    rows.append("-" * 78)
    c = counts(results)
    per_suite = ", ".join(f"{s} {t:.1f}s" for s, t in suite_seconds.items())
    rows.append(f"{c[PASS]} passed, {c[FAIL]} failed, {c[SKIP]} skipped in {total_s:.1f}s ({per_suite})")
    return "\n".join(rows)


def suite_seconds(results: List[CheckResult]) -> Dict[str, float]:
    """Wall time a suite added: basic checks overlap, so its time is its longest check."""
    out: Dict[str, float] = {}
    for r in results:
        if r.suite == "basic":
            out["basic"] = max(out.get("basic", 0.0), r.seconds)
        else:
            out[r.suite] = out.get(r.suite, 0.0) + r.seconds
    return out


def to_json(cluster: str, results: List[CheckResult], total_s: float, run_dir: Path, suites: List[str]) -> str:
    c = counts(results)
    return json.dumps({
        "cluster": cluster, "suites": suites, "passed": c[FAIL] == 0, "counts": c,
        "seconds": round(total_s, 2), "suite_seconds": {k: round(v, 2) for k, v in suite_seconds(results).items()},
        "run_dir": str(run_dir), "checks": [r.to_dict() for r in results],
    }, indent=2, sort_keys=True)


def write_junit(path: Path, cluster: str, results: List[CheckResult], total_s: float) -> None:
    """JUnit XML: one <testsuite> per verify suite, one <testcase> per check."""
    root = ET.Element("testsuites", name=f"simcluster verify {cluster}", time=f"{total_s:.3f}",
                      tests=str(len(results)), failures=str(counts(results)[FAIL]), skipped=str(counts(results)[SKIP]))
    by_suite: Dict[str, List[CheckResult]] = {}
    for r in results:
        by_suite.setdefault(r.suite, []).append(r)
    for suite, items in by_suite.items():
        c = counts(items)
        ts = ET.SubElement(root, "testsuite", name=f"simcluster.verify.{suite}", tests=str(len(items)),
                           failures=str(c[FAIL]), errors="0", skipped=str(c[SKIP]),
                           time=f"{sum(r.seconds for r in items):.3f}")
        for r in items:
            tc = ET.SubElement(ts, "testcase", classname=f"simcluster.verify.{suite}", name=r.name,
                               time=f"{r.seconds:.3f}")
            if r.status == FAIL:
                el = ET.SubElement(tc, "failure", message=r.message[:500], type="CheckFailed")
                el.text = "\n".join(x for x in (r.message, failure_block(r)) if x)
            elif r.status == SKIP:
                ET.SubElement(tc, "skipped", message=r.message[:500])
            else:
                ET.SubElement(tc, "system-out").text = r.message
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


class LiveReporter:
    """Prints each result as it arrives (failures with their output tail)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def __call__(self, res: CheckResult) -> None:
        print(live_line(res), file=self.stream, flush=True)
        if res.status == FAIL:
            block = failure_block(res)
            if block:
                print(block, file=self.stream, flush=True)

    def header(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def format_notes(results: List[CheckResult]) -> Optional[str]:
    """Short facts worth repeating under the table (CPU shims used, skipped suites' hints)."""
    notes = []
    for r in results:
        shims = r.data.get("cpu_shims") if isinstance(r.data, dict) else None
        if shims:
            notes.append(f"{r.name}: no CUDA on the nodes, ran on CPU with shims: {', '.join(shims)}")
        if r.status == SKIP:
            notes.append(f"{r.name} skipped: {r.message}")
    return "\n".join(notes) if notes else None
