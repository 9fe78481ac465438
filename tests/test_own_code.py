"""A team's own model class and training step under perfsuite's gates, end to end (nightly).

A project outside perfsuite starts from ``perfsuite init --example`` (a model and an engine of
its own, which must run as written) and adds its own code (tests/team_repo.py): a plain torch
module that is no transformers model (a trainable head on a frozen projection of every
position's features), its batch maker, and a hand-written engine (its own loop, its loss from
its dependency ``acmeops``, AdamW) that applies gradient accumulation and refuses fp16.
Baselines are refreshed and the gate passes; then three changes of the team's code each fail
exactly the cases they touch, on exactly their gate: a second forward in the step (time), an
activation the model keeps (memory), the accumulated loss no longer divided by its
micro-batches (loss, the accumulating case only). The example's cases, untouched, pass every
time. Also a factory that returns the wrong thing stops the session before any case runs, and
``perfsuite ab`` compares the team's case between two versions of ``acmeops``.

Every push runs the team's code through tests/test_own_project.py (its loss change among
others); these further runs, of a team's time gate with its retries among them, are nightly.
Real training runs of small models (3-8 ms a step), so all of this is part of the CPU tier.
"""

from __future__ import annotations

import json
import sys

import pytest
from team_repo import (
    ACME,
    EXAMPLE_CASES,
    OWN_CODE,
    REFUSAL,
    REFUSED,
    UNDIVIDED,
    assert_fail_on,
    gate,
    perfsuite_cli,
    time_class,
    with_cpu_gates,
    write_own_code,
    write_pyproject,
)

pytestmark = [pytest.mark.cpu, pytest.mark.slow, pytest.mark.nightly, pytest.mark.alone]  # time verdicts

# The CPU tier's way of gating time (calibrated steps, a case whose only failure is its time
# runs again and the majority decides), at a floor these cases' steps of 3-8 ms clear: a
# second forward makes acme's step 1.3-1.8 times as long. Any refresh is recorded, so that
# a noisy one cannot refuse to record.
TIME_GATE = """
[tool.perfsuite.overrides."cpu/*"]
time_floor = 0.25
time_k = 0.0
time_retries = 2
time_retry_pause_s = 0.5
max_refresh_spread = 1.0
"""
# (what the team changed, file, old, new, failing case → the gate it fails)
MUTATIONS = [
    (
        "a second forward in the step",
        "acme/train.py",
        "            logits = self.model(",
        "            self.model(batch['features'])  # computed again for a log, its output unused\n"
        "            logits = self.model(",
        {ACME["vanilla"]: "step time", ACME["grad_accum"]: "step time"},
    ),
    (
        "an activation the model keeps",
        "acme/models.py",
        "hidden = self.backbone(features)",
        "hidden = self.kept = self.backbone(features)",
        {ACME["vanilla"]: "memory", ACME["grad_accum"]: "memory"},
    ),
    (
        "the accumulated loss no longer divided by its micro-batches",
        "acme/train.py",
        *UNDIVIDED,
        {ACME["grad_accum"]: "loss"},
    ),
]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    write_own_code(pytester.path, pytester._monkeypatch)
    write_pyproject(pytester.path)
    return pytester


def test_a_team_guards_its_own_model_and_step(project: pytest.Pytester) -> None:
    """Refresh, pass, then each of the team's changes fails exactly its cases on exactly its gate."""
    init = perfsuite_cli(project, "init", "--example")
    assert init.ret == 0, init.stderr.str()
    init.stdout.fnmatch_lines(
        ["wrote     perfsuite_example/engine.py", "appended  pyproject.toml ([[]tool.perfsuite.models.example-mlp[]]*"]
    )
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(with_cpu_gates(pyproject.read_text() + OWN_CODE, TIME_GATE))

    refresh = perfsuite_cli(project, "baselines", "refresh", "--repeats", "1", "--device", "cpu")
    assert refresh.ret == 0, refresh.stdout.str()
    written = sorted(p.stem for p in (project.path / "baselines" / "cpu").glob("*.json"))
    assert written == sorted([*EXAMPLE_CASES, *ACME.values(), f"pytest-benchmark.{time_class()}"])
    recorded = json.loads((project.path / "baselines" / "cpu" / f"{ACME['grad_accum']}.json").read_text())
    assert recorded["spec"]["micro_batch_size"] == 4
    assert recorded["memory"]["breakdown"]["parameters"] > 0  # the factory's module, counted by MemTracker

    passed = gate(project)
    passed.assert_outcomes(passed=4, skipped=1)
    passed.stdout.fnmatch_lines([f"*{REFUSED}*{REFUSAL}*"])

    for what, file, old, new, expected in MUTATIONS:
        source = project.path / file
        original = source.read_text()
        assert old in original, what
        source.write_text(original.replace(old, new))
        result = gate(project)
        source.write_text(original)
        result.assert_outcomes(passed=4 - len(expected), failed=len(expected), skipped=1)
        assert_fail_on(result, expected)


def test_a_factory_that_returns_something_else_stops_the_session_before_any_case_runs(
    project: pytest.Pytester,
) -> None:
    perfsuite_cli(project, "init")
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(with_cpu_gates(pyproject.read_text() + OWN_CODE, TIME_GATE))
    models = project.path / "acme" / "models.py"
    models.write_text(models.read_text().replace("return ProjectedHead(width)", "return {'width': width}"))
    broken = gate(project)
    assert broken.ret == pytest.ExitCode.USAGE_ERROR
    broken.stderr.fnmatch_lines(
        ["ERROR: *pyproject.toml: tool.perfsuite.models.acme-head.factory: acme.models:build(seed=0) returned dict;*"]
    )
    assert "Traceback" not in broken.stderr.str() + broken.stdout.str()
    assert not (project.path / "baselines" / "cpu").exists()  # nothing ran, nothing was written


def test_ab_compares_the_teams_case_between_two_versions_of_its_dependency(project: pytest.Pytester) -> None:
    """This environment has acmeops 1.0; the candidate, an interpreter whose path puts 2.0 first (as a
    virtual environment with the upgrade would). Its loss differs from the first pair on; memory does not."""
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(
        with_cpu_gates(pyproject.read_text() + "\n[tool.perfsuite.matrix]\nbuiltin = false\n" + OWN_CODE, TIME_GATE)
    )
    upgraded = project.path / "python-acmeops-2"
    v2 = project.path / "deps" / "v2"
    upgraded.write_text(f'#!/bin/sh\nPYTHONPATH="{v2}:$PYTHONPATH" exec "{sys.executable}" "$@"\n')
    upgraded.chmod(0o755)
    out = project.path / "ab.json"
    args = ["ab", "--base", "current", "--candidate", str(upgraded), "--models", "acme-head"]
    args += ["--strategies", "vanilla", "--engine", "acme_step", "--pairs", "1", "--max-pairs", "1"]
    result = perfsuite_cli(project, *args, "--steps", "2", "--json", str(out))
    assert result.ret == 1, result.stderr.str()  # a case regressed
    (case,) = json.loads(out.read_text())["cases"]
    assert case["case"] == ACME["vanilla"]
    assert case["verdict"] == "regressed"
    assert case["loss"]["max_abs_diff"] > 1.0  # 16 samples summed, not averaged
    assert case["memory"]["a"] == case["memory"]["b"] > 0
    result.stderr.fnmatch_lines([f"*{ACME['vanilla']}: regressed: loss*"])
