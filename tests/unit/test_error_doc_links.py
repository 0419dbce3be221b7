"""Errors that point to docs/troubleshooting.md: the one line carries the section, and
every section named anywhere in provisioner/ exists."""

from __future__ import annotations

import re
from pathlib import Path

from provisioner.errors import PrerequisiteError, StartupError, UsageError

REPO = Path(__file__).resolve().parents[2]
DOC_REF = re.compile(r"docs/([a-z0-9_-]+\.md)#([a-z0-9_-]+)")


def heading_slugs(text: str) -> set:
    """GitHub's anchors for the page's headings (outside fenced code)."""
    slugs, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


def test_every_section_an_error_names_exists():
    refs = {(page, anchor) for path in (REPO / "provisioner").rglob("*.py")
            for page, anchor in DOC_REF.findall(path.read_text())}
    assert ("troubleshooting.md", "gpu-not-found") in refs
    missing = [f"docs/{page}#{anchor}" for page, anchor in sorted(refs)
               if anchor not in heading_slugs((REPO / "docs" / page).read_text())]
    assert not missing, missing


def test_the_one_line_ends_with_the_section():
    err = UsageError("GPU 6 not found", "add --fake-gpus", doc="docs/troubleshooting.md#gpu-not-found")
    assert err.one_line() == "GPU 6 not found (add --fake-gpus; see docs/troubleshooting.md#gpu-not-found)"
    assert UsageError("bad", "fix it").one_line() == "bad (fix it)"
    assert StartupError("slurmctld exited during startup").one_line() == \
        "slurmctld exited during startup (see docs/troubleshooting.md#a-cluster-does-not-come-up)"
    assert PrerequisiteError("x", "y").one_line() == "x (y; see docs/troubleshooting.md)"


def test_accounting_errors_name_the_accounting_section():
    """`up --accounting` failures point at the accounting section, not at the generic
    'a cluster does not come up' one: every StartupError raised in cluster/services/accounting.py
    carries it, and one raised for real says it in its one line."""
    import ast
    from types import SimpleNamespace

    import pytest

    from provisioner.cluster.services import accounting

    assert accounting.ACCOUNTING_DOC == "docs/troubleshooting.md#accounting-does-not-start"
    tree = ast.parse((REPO / "provisioner" / "cluster" / "services" / "accounting.py").read_text())
    raised = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
              and getattr(node.func, "id", None) == "StartupError"]
    assert raised and all(any(k.arg == "doc" for k in call.keywords) for call in raised), \
        "a StartupError in cluster/services/accounting.py without doc=ACCOUNTING_DOC"

    no_sql = SimpleNamespace(read_text=lambda path: None, where="this host")
    cluster = SimpleNamespace(runner=lambda *a: no_sql)
    with pytest.raises(StartupError) as err:
        accounting.init_sql(cluster, "pw")
    assert err.value.one_line().endswith("install mariadb-server-core; see "
                                         "docs/troubleshooting.md#accounting-does-not-start)")
