"""perfsuite in someone else's repository, end to end, as its README walkthrough tells a team to use it.

A project outside perfsuite, with its own model config directory, its own data file and
tokenizer, its own recipe, and code of its own (a model class, its batch maker and an engine,
tests/team_repo.py): ``perfsuite init --example`` there, its declarations in
``[tool.perfsuite]``, ``perfsuite baselines refresh``; then two changes in one ``pytest`` run
each fail exactly the case they touch on exactly its gates, the recipe's batch size (its
memory and loss curve) and the team's engine no longer dividing the accumulated loss (its
loss curve), while every other case passes. Nightly, every case passes right after the
refresh and a changed model config fails that model's case on its peak memory. Real
training runs of tiny models, so this is part of the CPU tier. tests/test_own_code.py
changes the team's code further (nightly)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# `perfsuite init` and `perfsuite list` below run in this process, where they import torch and
# transformers. Imported here first, they outlive the test: pytester forgets the modules a test
# imported, and a second import of torch's C extensions crashes the next test.
import torch  # noqa: F401
import transformers  # noqa: F401
from team_repo import (
    ACME,
    CONFIG,
    DECLARED,
    DECLARED_CASES,
    EXAMPLE_CASES,
    OWN_CODE,
    RECIPE,
    REFUSAL,
    REFUSED,
    UNDIVIDED,
    assert_fail_on,
    gate,
    perfsuite_cli,
    time_class,
    with_cpu_gates,
    write_declared_models,
    write_own_code,
    write_pyproject,
)

from perfsuite.cli import build_parser, main
from perfsuite.cli.selection import select
from perfsuite.core import registry

pytestmark = [pytest.mark.cpu, pytest.mark.slow]

# This test is about the declarations and the memory and loss gates; a tiny model's step time
# on a busy test machine is not (the CPU tier's own cases gate time; tests/test_own_code.py a
# team's, nightly).
NO_TIME_GATE = """
[tool.perfsuite.overrides."cpu/*"]
time_floor = 1.0
max_refresh_spread = 10.0
"""
CASES = (*DECLARED_CASES, *EXAMPLE_CASES, *ACME.values())


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A repository of a team's own: a model config directory, a tokenizer, a data file, its code."""
    write_declared_models(pytester.path)
    write_own_code(pytester.path, pytester._monkeypatch)
    write_pyproject(pytester.path)
    return pytester


def _refreshed(project: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> Path:
    """``perfsuite init --example``, the team's declarations, ``perfsuite baselines refresh``; the
    project's pyproject.toml."""
    assert main(["init", "--example"]) == 0
    out = capsys.readouterr().out
    assert "appended  pyproject.toml ([tool.perfsuite]" in out
    assert "wrote     tests/test_perfsuite.py" in out
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(with_cpu_gates(pyproject.read_text() + DECLARED + OWN_CODE, NO_TIME_GATE))

    refresh = perfsuite_cli(project, "baselines", "refresh", "--repeats", "1", "--device", "cpu")
    assert refresh.ret == 0, refresh.stdout.str()
    written = sorted(p.stem for p in (project.path / "baselines" / "cpu").glob("*.json"))
    assert written == sorted([*CASES, f"pytest-benchmark.{time_class()}"])
    recorded = json.loads((project.path / "baselines" / "cpu" / f"{ACME['grad_accum']}.json").read_text())
    assert recorded["spec"]["micro_batch_size"] == 4
    assert recorded["memory"]["breakdown"]["parameters"] > 0  # the factory's module, counted by MemTracker
    return pyproject


def test_a_team_guards_its_own_models_recipe_and_code(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pyproject = _refreshed(project, capsys)

    # Two changes in one run, each failing exactly the case it touches on exactly its gates:
    # the recipe's batch halves (widget's recipe case: its peak memory and loss curve), and the
    # team's step sums its micro-batches' losses (the accumulating case alone: its loss curve).
    # The other cases pass against the baselines just recorded: the declared model with its
    # tokenizer and data file, widget's vanilla case, the team's and the example's.
    train = project.path / "acme" / "train.py"
    originals = pyproject.read_text(), train.read_text()
    pyproject.write_text(originals[0].replace(RECIPE + "16", RECIPE + "8"))
    assert UNDIVIDED[0] in originals[1]
    train.write_text(originals[1].replace(*UNDIVIDED))
    changed = gate(project)
    expected: dict[str, str | tuple[str, ...]] = {"widget-acme-recipe": ("memory", "loss"), ACME["grad_accum"]: "loss"}
    changed.assert_outcomes(passed=len(CASES) - len(expected), failed=len(expected), skipped=1)
    assert_fail_on(changed, expected)
    changed.stdout.fnmatch_lines(["widget-acme-recipe: loss diverges from the baseline at step 0 (of 0-13):*"])
    changed.stdout.fnmatch_lines([f"*{REFUSED}*{REFUSAL}*"])
    for path, text in zip((pyproject, train), originals, strict=True):
        path.write_text(text)

    # perfsuite list and perfsuite run: only the project's matrix (what run would run, selected
    # here; its runs of these cases are the refresh's and the gate's above).
    project._monkeypatch.syspath_prepend(project.path / "deps" / "v1")  # the engine is imported to check it
    saved = registry.snapshot()
    try:
        assert main(["list"]) == 0
        registry.restore(saved)
        specs, *_ = select(build_parser().parse_args(["run", "--device", "cpu"]))
    finally:
        registry.restore(saved)
    assert "matrix: 9 cases (4 declared entries)" in capsys.readouterr().out
    assert sorted(spec.id for spec in specs) == sorted([*CASES, REFUSED])


@pytest.mark.nightly
def test_a_refreshed_project_passes_and_a_changed_model_config_fails_that_models_case(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every case passes against the baselines just recorded; then acme's config.json grows, and its
    case alone fails, on its peak memory (its initial weights differ, so its loss is not compared)."""
    _refreshed(project, capsys)
    gate(project).assert_outcomes(passed=len(CASES), skipped=1)
    config = project.path / "models" / "acme" / "config.json"
    config.write_text(json.dumps({**CONFIG, "hidden_size": 48}))
    changed = gate(project)
    changed.assert_outcomes(passed=len(CASES) - 1, failed=1, skipped=1)
    assert_fail_on(changed, {"acme-tiny-vanilla": "memory"})
