"""provisioner/cluster/ has no import cycles and never imports up.

cluster/ is the shared model every provider builds on: it may import provisioner.config,
errors, paths and render, never the providers (provisioner/named_clusters.py binds the two),
the CLI, verify, testing, check or deploy. Its modules import each other at the top; a
function-local import is allowed only with a `# lazy: <reason>` comment (start-up speed),
and it still counts as an edge of the graph checked for cycles. Imports under
`if TYPE_CHECKING:` never run and are not edges.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

import provisioner

PACKAGE = Path(provisioner.__file__).parent
CLUSTER = PACKAGE / "cluster"
MODULES = sorted(p.stem for p in CLUSTER.glob("*.py") if p.stem != "__init__")
FORBIDDEN = ("provisioner.providers", "provisioner.named_clusters", "provisioner.cli", "provisioner.verify",
             "provisioner.testing", "provisioner.check", "provisioner.deploy", "provisioner.pytest_plugin")


def _type_checking_lines(tree: ast.AST) -> Set[int]:
    lines: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path) -> List[Tuple[str, int, bool]]:
    """(imported module, line, function-local) for every import that runs."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_lines(tree)
    top = {id(n) for n in tree.body}
    found: List[Tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        if node.lineno in skip if hasattr(node, "lineno") else False:
            continue
        local = id(node) not in top
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, local) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno, local))
            # `from provisioner.cluster import steps` imports the module provisioner.cluster.lifecycle.steps
            found += [(f"{node.module}.{a.name}", node.lineno, local) for a in node.names
                      if (PACKAGE.parent / (node.module.replace(".", "/") + f"/{a.name}.py")).exists()]
    return found


def graph() -> Dict[str, Set[str]]:
    edges: Dict[str, Set[str]] = {}
    for mod in MODULES:
        edges[mod] = {m.rsplit(".", 1)[1] for m, _, _ in imports_of(CLUSTER / f"{mod}.py")
                      if m.startswith("provisioner.cluster.") and m.count(".") == 2} - {mod}
    return edges


def find_cycle(edges: Dict[str, Set[str]]) -> List[str]:
    """One cycle as [a, b, ..., a], or [] when the graph is acyclic."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(n: str) -> List[str]:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return []
    for n in sorted(edges):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return []


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_cluster_modules_import_each_other_without_a_cycle():
    cycle = find_cycle(graph())
    assert not cycle, "import cycle in provisioner/cluster: " + " -> ".join(cycle)


def test_cluster_never_imports_up():
    bad = [f"cluster/{mod}.py:{line} imports {m}" for mod in MODULES
           for m, line, _ in imports_of(CLUSTER / f"{mod}.py") if m.startswith(FORBIDDEN)]
    assert not bad, "\n".join(bad)


def test_function_local_imports_in_cluster_say_why():
    lines = {mod: (CLUSTER / f"{mod}.py").read_text().splitlines() for mod in MODULES}
    bad = [f"cluster/{mod}.py:{line}: {lines[mod][line - 1].strip()}" for mod in MODULES
           for m, line, local in imports_of(CLUSTER / f"{mod}.py")
           if local and "# lazy:" not in lines[mod][line - 1] and "# lazy:" not in lines[mod][line - 2]]
    assert not bad, "function-local imports without a '# lazy: <reason>' comment:\n" + "\n".join(bad)


@pytest.mark.parametrize("mod", MODULES)
def test_each_cluster_module_imports_first_in_a_fresh_interpreter(mod):
    res = subprocess.run([sys.executable, "-c", f"import provisioner.cluster.{mod}"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
