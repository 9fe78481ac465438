"""The architecture, checked: the pure core imports neither torch nor pytest, imports run one way
(top → worker side → pure core), and no module of perfsuite imports another in a circle
(lazy and ``TYPE_CHECKING`` imports included). docs/architecture.md draws the layers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import perfsuite

PACKAGE = Path(perfsuite.__file__).parent
MAX_LINES = 400
DATA_TABLES = {"perfsuite.core.models"}
"""Modules allowed past :data:`MAX_LINES`: the models' published configs, a table."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()
CORE = sorted(m for m in MODULES if m.startswith("perfsuite.core"))


def _layer(module: str) -> int:
    """0: the pure core, 1: the worker side, 2: the top (CLI, plugin, session, reports, history)."""
    if module.startswith("perfsuite.core"):
        return 0
    if module.startswith("perfsuite.worker"):
        return 1
    return 2


def _imports(module: str) -> set[str]:
    """The perfsuite modules ``module`` imports, anywhere in it (a package import counts as its ``__init__``)."""
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, ``level - 1`` packages up
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name.startswith("perfsuite") and name not in (module, "perfsuite"):
                found.add(name)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def test_the_core_imports_neither_torch_nor_pytest() -> None:
    code = (
        "import sys\n"
        "for blocked in ('torch', 'pytest', 'transformers', 'numpy', '_pytest'):\n"
        "    sys.modules[blocked] = None\n"
        f"for name in {CORE!r}:\n"
        "    __import__(name)\n"
        "print(len([m for m in sys.modules if m.startswith('perfsuite.core')]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(CORE)


def test_a_core_that_reached_torch_would_fail_the_check(tmp_path: Path) -> None:
    (tmp_path / "leaky.py").write_text("import torch\n")
    code = "import sys\nsys.modules['torch'] = None\nimport leaky\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode != 0
    assert "ModuleNotFoundError" in done.stderr


def test_imports_run_downward_only() -> None:
    upward = sorted(
        f"{m} -> {t}" for m, targets in GRAPH.items() for t in targets if t != "perfsuite" and _layer(t) > _layer(m)
    )
    assert not upward


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle() -> None:
    assert _cycles(GRAPH) == []


def test_the_circle_check_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(set(MODULES) - DATA_TABLES))
def test_no_module_over_400_lines(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines"


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between perfsuite's top-level packages and modules (``perfsuite.reports``, ``perfsuite.history``)."""
    top: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = ".".join(module.split(".")[:2])
        top.setdefault(source, set()).update(t for t in (".".join(t.split(".")[:2]) for t in targets) if t != source)
    return top


def test_no_package_imports_another_in_a_circle() -> None:
    """Within the top layer too the order is strict: reports read history and results, history reads
    results, nothing reads back (a package-level circle hides behind lazy imports that never meet)."""
    assert _cycles(_packages(GRAPH)) == []
    assert "perfsuite.reports" not in _packages(GRAPH).get("perfsuite.history", set())
