"""The architecture, checked: every module of perfsuite belongs to one of the parts that
docs/architecture.md draws, and imports only the parts its row there names (read from that page's
tables, so that the picture and the rule cannot drift apart); the pure core imports neither torch
nor pytest; no module imports another in a circle (lazy and ``TYPE_CHECKING`` imports included)."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import perfsuite

PACKAGE = Path(perfsuite.__file__).parent
ARCHITECTURE = Path(__file__).parents[1] / "docs" / "architecture.md"
TEMPLATES = "perfsuite.templates."
"""Files ``perfsuite init`` writes into a team's repository: no part of the package."""
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
PACKAGE_MODULES = sorted(m for m in MODULES if not m.startswith(TEMPLATES))


@dataclass(frozen=True)
class Row:
    """One row of an architecture table: a part, the globs of its modules, the parts it may import."""

    part: str
    globs: tuple[str, ...]
    may_import: frozenset[str]


def _expand(glob: str) -> list[str]:
    """``worker/{a,b}.py`` → ``worker/a.py``, ``worker/b.py``."""
    found = re.search(r"\{([^}]*)\}", glob)
    if found is None:
        return [glob]
    head, tail = glob[: found.start()], glob[found.end() :]
    return [g for alt in found[1].split(",") for g in _expand(head + alt.strip() + tail)]


def read_table(text: str, first_column: str) -> list[Row]:
    """The rows of the markdown table whose header is ``| <first_column> | modules | may import |``."""
    lines = text.splitlines()
    header = f"| {first_column} | modules | may import |"
    start = lines.index(header) + 2  # past the header and its |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        part, modules, may = (cell.strip() for cell in line.strip("|").split("|"))
        globs = tuple(g for cell in re.findall(r"`([^`]+)`", modules) for g in _expand(cell))
        allowed = frozenset(n.strip() for n in may.split(",") if n.strip() not in ("", "—"))
        rows.append(Row(part, globs, allowed))
    assert rows, f"no rows under {header}"
    return rows


def part_of(path: str, rows: list[Row]) -> str | None:
    """The part of the module at ``path`` (under ``perfsuite/``): the first row with a matching glob."""
    return next((row.part for row in rows if any(fnmatch.fnmatchcase(path, g) for g in row.globs)), None)


def undrawn(graph: Mapping[str, set[str]], parts: Mapping[str, str | None], rows: list[Row]) -> list[str]:
    """Each module no row claims, and each import between two parts that the table does not draw."""
    allowed = {row.part: row.may_import for row in rows}
    found = [f"{m}: in no part" for m in sorted(graph) if m in parts and parts[m] is None]
    for module, targets in sorted(graph.items()):
        source = parts.get(module)
        for target in sorted(targets):
            to = parts.get(target)
            if source is not None and to is not None and to != source and to not in allowed[source]:
                found.append(f"{module} ({source}) -> {target} ({to})")
    return found


def _path(module: str) -> str:
    return MODULES[module].relative_to(PACKAGE).as_posix()


PARTS_TEXT = ARCHITECTURE.read_text()
TOP_ROWS = read_table(PARTS_TEXT, "part")
WORKER_ROWS = read_table(PARTS_TEXT, "worker")
PARTS = {m: part_of(_path(m), TOP_ROWS) for m in PACKAGE_MODULES}
WORKER_PARTS = {m: part_of(_path(m), WORKER_ROWS) for m in PACKAGE_MODULES if m.startswith("perfsuite.worker")}


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


def test_every_module_is_in_one_part_and_imports_only_what_its_row_draws() -> None:
    graph = {m: t for m, t in GRAPH.items() if not m.startswith(TEMPLATES)}
    assert undrawn(graph, PARTS, TOP_ROWS) == []
    assert [row.part for row in TOP_ROWS] == ["top", "ab", "shows", "worker", "core"]


def test_inside_the_worker_the_run_drives_the_engines_and_the_engines_never_read_an_instrument() -> None:
    assert undrawn(GRAPH, WORKER_PARTS, WORKER_ROWS) == []
    assert WORKER_PARTS["perfsuite.worker.measure"] == "run"
    assert WORKER_PARTS["perfsuite.worker.engines.loop"] == "engines"


def test_ab_never_sees_the_command_line() -> None:
    """``perfsuite ab`` and ``bisect`` get frozen option objects (``perfsuite.ab.options``) that the CLI
    builds from its arguments: no module of ``ab/`` imports argparse or reads a ``Namespace``."""
    readers = []
    for module in (m for m in PACKAGE_MODULES if m.startswith("perfsuite.ab.") or m == "perfsuite.ab"):
        tree = ast.parse(MODULES[module].read_text())
        for node in ast.walk(tree):
            imported = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                imported = [node.module or ""]
            named = isinstance(node, (ast.Name, ast.Attribute)) and "Namespace" in ast.unparse(node)
            if any(name.split(".")[0] == "argparse" for name in imported) or named:
                readers.append(f"{module}:{getattr(node, 'lineno', 0)}")
    assert readers == []


def test_nothing_floats_at_the_package_root_but_the_entry_points() -> None:
    root = sorted(m for m in PACKAGE_MODULES if m.count(".") == 1 and MODULES[m].name != "__init__.py")
    assert root == ["perfsuite.__main__", "perfsuite.hookspec", "perfsuite.plugin"]


def test_no_two_parts_claim_a_module() -> None:
    """The five parts' globs do not overlap: a module's part never depends on the rows' order."""
    for module in PACKAGE_MODULES:
        claims = [row.part for row in TOP_ROWS if any(fnmatch.fnmatchcase(_path(module), g) for g in row.globs)]
        assert len(claims) == 1, f"{module}: {claims}"


def test_the_part_check_fails_on_an_arrow_the_table_does_not_draw() -> None:
    """Mutations of the real graph: an undrawn arrow, a module in no part, an instrument read by an engine."""
    upward = {**GRAPH, "perfsuite.core.spec": {*GRAPH["perfsuite.core.spec"], "perfsuite.worker.device"}}
    assert undrawn(upward, PARTS, TOP_ROWS) == ["perfsuite.core.spec (core) -> perfsuite.worker.device (worker)"]
    sideways = {**GRAPH, "perfsuite.reports.tables": {"perfsuite.worker.pool"}}
    assert undrawn(sideways, PARTS, TOP_ROWS) == ["perfsuite.reports.tables (shows) -> perfsuite.worker.pool (worker)"]
    floating = {**GRAPH, "perfsuite.floating": set()}
    assert undrawn(floating, {**PARTS, "perfsuite.floating": part_of("floating.py", TOP_ROWS)}, TOP_ROWS) == [
        "perfsuite.floating: in no part"
    ]
    reads_back = {**GRAPH, "perfsuite.worker.engines.loop": {"perfsuite.worker.measure"}}
    assert undrawn(reads_back, WORKER_PARTS, WORKER_ROWS) == [
        "perfsuite.worker.engines.loop (engines) -> perfsuite.worker.measure (run)"
    ]


def test_the_table_reader_reads_what_the_page_shows() -> None:
    table = "| part | modules | may import |\n|---|---|---|\n| a | `x/*`, `y/{p,q}.py` | b |\n| b | `z.py` | — |\n"
    assert read_table(table, "part") == [
        Row("a", ("x/*", "y/p.py", "y/q.py"), frozenset({"b"})),
        Row("b", ("z.py",), frozenset()),
    ]
    assert part_of("y/q.py", read_table(table, "part")) == "a"
    assert part_of("y/r.py", read_table(table, "part")) is None


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


def test_the_templates_import_only_the_public_surface() -> None:
    """What ``perfsuite init`` writes into a team's repository imports what a team imports: ``perfsuite``."""
    found = {t for m, targets in GRAPH.items() if m.startswith(TEMPLATES) for t in targets}
    raw = {
        node.module
        for m in MODULES
        if m.startswith(TEMPLATES)
        for node in ast.walk(ast.parse(MODULES[m].read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("perfsuite")
    }
    assert found == set()
    assert raw == {"perfsuite"}


def test_the_public_surface_needs_no_torch_until_the_engine_interface_is_asked_for() -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "import perfsuite\n"
        "from perfsuite import STRATEGIES, ModelSpec, Strategy, register_model\n"
        "try:\n"
        "    perfsuite.BaseEngine\n"
        "except ImportError:\n"
        "    print('interface needs torch')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "interface needs torch\n"


def test_the_engine_interface_is_public_and_its_old_path_still_works() -> None:
    from perfsuite.worker.engines import interface

    for name in ("ENGINE_API_VERSION", "BaseEngine", "Engine", "EngineCase", "StepOutput", "Unsupported"):
        assert getattr(perfsuite, name) is getattr(interface, name)
        assert name in perfsuite.__all__
    assert perfsuite.refuse_unless is interface.refuse_unless
    with pytest.raises(AttributeError, match="no attribute 'Engines'"):
        perfsuite.Engines  # noqa: B018
