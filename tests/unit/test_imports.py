"""provisioner/ is a house of floors: every import goes down (or stays on its floor), and
no module imports itself back through others.

LAYERS lists the floors from the bottom up. A module may import its own floor and those
below it, never one above; every import counts: those at the top of a module, those inside
a function (which must say why: a `# lazy: <reason>` comment, in cluster/) and those under
`if TYPE_CHECKING:` (a type hint that names a module above is still a dependency on it).
The same imports, module by module, must have no cycle.

Read from the source with ast (nothing is imported), so a new module is checked as soon as
it exists; a new package or top-level module must be given a floor here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

import provisioner

PACKAGE = Path(provisioner.__file__).parent
ROOT = PACKAGE.parent

# Bottom first. The floors of cluster/ are its rooms (each __init__ says what it holds).
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    ("ground: errors, paths, progress lines, sudo",
     ("provisioner", "provisioner.errors", "provisioner.paths", "provisioner.progress", "provisioner.sudo")),
    ("the spec and its backend names", ("provisioner.config",)),
    ("a spec from a production slurm.conf", ("provisioner.like",)),
    ("the config renderer and the daemons' paths", ("provisioner.nodepaths", "provisioner.render")),
    ("the cluster model and the provider contract", ("provisioner.cluster", "provisioner.cluster.model")),
    ("what a cluster runs", ("provisioner.cluster.services",)),
    ("a cluster's lifecycle", ("provisioner.cluster.lifecycle",)),
    ("faults", ("provisioner.cluster.faults",)),
    ("status and export-logs", ("provisioner.cluster.inspect",)),
    ("the providers", ("provisioner.providers",)),
    ("clusters by name", ("provisioner.named_clusters",)),
    ("what runs on clusters", ("provisioner.verify", "provisioner.check", "provisioner.deploy",
                               "provisioner.testing", "provisioner.pytest_plugin")),
    ("the commands", ("provisioner.cli", "provisioner.__main__")),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: Dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
                            if "workloads" not in p.relative_to(PACKAGE).parts}


def floor(module: str) -> int:
    """The floor of ``module``: the one whose longest name prefix matches it."""
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    return rank


def _resolve(name: str) -> str:
    """The module of the package that ``name`` (a module, or a name inside one) is."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str, path: Optional[Path] = None) -> List[Tuple[str, int, bool]]:
    """(imported module of the package, line, function-local) for every import in ``module``
    (read from ``path``, by default its file), those under `if TYPE_CHECKING:` included."""
    path = path or MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    for node in tree.body:  # `if TYPE_CHECKING:` at the top: still the module's own imports
        if isinstance(node, ast.If):
            top.update(id(n) for n in node.body)
    found: List[Tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        local = id(node) not in top
        if isinstance(node, ast.Import):
            found += [(_resolve(a.name), node.lineno, local) for a in node.names if a.name.startswith("provisioner")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            if not base.startswith("provisioner"):
                continue
            for alias in node.names:
                # `from provisioner.cluster.model import handle` imports the module ...model.handle
                full = f"{base}.{alias.name}"
                found.append((full if full in MODULES else _resolve(base), node.lineno, local))
    return [(m, line, local) for m, line, local in found if m and m != module]


def graph() -> Dict[str, Set[str]]:
    return {m: {imported for imported, _, _ in imports_of(m)} for m in MODULES}


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


def test_floor_takes_the_longest_prefix():
    assert LAYERS[floor("provisioner.cluster.model.handle")][1] == ("provisioner.cluster", "provisioner.cluster.model")
    assert LAYERS[floor("provisioner.cluster.lifecycle.steps")][1] == ("provisioner.cluster.lifecycle",)
    assert floor("provisioner.named_clusters") > floor("provisioner.providers.local.provider")
    assert floor("provisioner.errors") == 0


def test_type_hint_and_function_local_imports_are_edges(tmp_path):
    source = tmp_path / "example.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "from provisioner.cluster.model import handle\n"
                      "if TYPE_CHECKING:\n"
                      "    from provisioner.named_clusters import load\n"
                      "def f():\n"
                      "    import provisioner.providers.local.provider\n"
                      "    from . import state\n")
    got = imports_of("provisioner.cluster.model.example", source)
    assert got == [("provisioner.cluster.model.handle", 2, False), ("provisioner.named_clusters", 4, False),
                   ("provisioner.providers.local.provider", 6, True), ("provisioner.cluster.model.state", 7, True)]


def test_every_module_has_a_floor():
    lost = [m for m in MODULES if floor(m) < 0]
    assert not lost, f"give these a floor in LAYERS ({__file__}): {lost}"


def test_no_import_runs_up_a_floor():
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {imported} "
           f"({LAYERS[floor(m)][0]} -> {LAYERS[floor(imported)][0]})"
           for m in MODULES for imported, line, _ in imports_of(m) if floor(imported) > floor(m)]
    assert not bad, "imports that run up:\n" + "\n".join(bad)


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


CLUSTER_MODULES = sorted(m for m in MODULES if m.startswith("provisioner.cluster."))


def test_function_local_imports_in_cluster_say_why():
    bad = []
    for m in CLUSTER_MODULES:
        lines = MODULES[m].read_text().splitlines()
        bad += [f"{MODULES[m].relative_to(ROOT)}:{line}: {lines[line - 1].strip()}"
                for _, line, local in imports_of(m)
                if local and "# lazy:" not in lines[line - 1] and "# lazy:" not in lines[line - 2]]
    assert not bad, "function-local imports without a '# lazy: <reason>' comment:\n" + "\n".join(bad)


@pytest.mark.parametrize("mod", CLUSTER_MODULES + ["provisioner.providers", "provisioner.config.validate"])
def test_each_module_imports_first_in_a_fresh_interpreter(mod):
    res = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
