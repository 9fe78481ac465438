"""Scopes: each picks exactly the cases it says, in pytest, ``perfsuite run`` and ``perfsuite baselines refresh``.

The GPU scopes are checked by collection (``--collect-only``, no GPU needed): a scope that
selected the wrong cases would cost a GPU runner hours, or leave a strategy unguarded.
"""

from __future__ import annotations

import subprocess
import sys
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfsuite.cli import main
from perfsuite.cli.selection import matrix_selection
from perfsuite.core import registry
from perfsuite.core.declaration import load
from perfsuite.core.matrix import nightly_only
from perfsuite.core.models import FULL_SIZE
from perfsuite.core.registry import DeclarationError
from perfsuite.core.scopes import SEED_STRATEGIES, in_scope

ROOT = Path(__file__).resolve().parent.parent
PUSH_GPU = {f"bert-base-uncased-{s}" for s in SEED_STRATEGIES} | {"bert-base-uncased-vanilla-trainer"}


@pytest.fixture(autouse=True)
def _registry() -> Iterator[None]:
    saved = registry.snapshot()
    yield
    registry.restore(saved)


def _ids(scope: str | None, device: str) -> set[str]:
    args = Namespace(models=None, strategies=None, engine=None, all=scope is None, every_push=False, scope=scope)
    ids = set()
    for model, strategy, engine, size in matrix_selection(args, device):
        ranks = "" if size == 1 else f"-ws{size}"
        ids.add(f"{model}-{strategy}{ranks}" + ("" if engine == "loop" else f"-{engine}"))
    return ids


def test_the_gpu_push_scope_is_bert_base_seed_table_and_its_trainer_vanilla() -> None:
    assert _ids("push", "cuda") == PUSH_GPU
    assert len(PUSH_GPU) == 14


def test_the_gpu_nightly_scope_is_every_full_size_models_seed_table() -> None:
    nightly = _ids("nightly", "cuda")
    expected = {f"{model}-{strategy}" for model in FULL_SIZE for strategy in (*SEED_STRATEGIES, "vanilla-trainer")}
    assert nightly == expected
    assert len(nightly) == 14 * len(FULL_SIZE)


def test_the_weekly_scope_is_the_whole_matrix_on_both_devices() -> None:
    for device in ("cpu", "cuda"):
        assert _ids("weekly", device) == _ids(None, device)
    assert _ids("nightly", "cuda") < _ids("weekly", "cuda")


def test_the_cpu_push_scope_is_what_pytest_runs_on_every_push() -> None:
    every_push = {c for c in registry.matrix_cases() if c.model.startswith("tiny-")}
    push = {c for c in every_push if in_scope(c.scope, "push")}
    assert push == {c for c in every_push if not nightly_only(c.model, c.strategy, c.engine, c.world_size)}
    assert len(push) == 35
    assert _ids("push", "cpu") == _ids("nightly", "cpu") - {
        f"{c.model}-{c.strategy}"
        + ("" if c.world_size == 1 else f"-ws{c.world_size}")
        + ("" if c.engine == "loop" else f"-{c.engine}")
        for c in every_push - push
    }


def test_a_declared_entry_says_its_scope_and_defaults_from_its_nightly_marker(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(
        "[tool.perfsuite.matrix]\nbuiltin = false\n"
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['vanilla']\n"
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['tiny-bert']\nstrategies = ['fp16']\nmarkers = ['nightly']\n"
        "[[tool.perfsuite.matrix.cases]]\nmodels = ['bert-base-uncased']\nstrategies = ['lora']\nscope = 'weekly'\n"
    )
    load(path)
    scopes = {(c.model, c.strategy): c.scope for c in registry.matrix_cases()}
    assert scopes == {
        ("tiny-bert", "vanilla"): "push",
        ("tiny-bert", "fp16"): "nightly",
        ("bert-base-uncased", "lora"): "weekly",
    }
    assert _ids("push", "cuda") == set()
    assert _ids("weekly", "cuda") == {"bert-base-uncased-lora"}


def test_the_registration_api_refuses_an_unknown_scope() -> None:
    with pytest.raises(DeclarationError, match="unknown scope 'monthly'; valid: push, nightly, weekly"):
        registry.register_cases(["tiny-bert"], ["vanilla"], scope="monthly", source="conftest.py")


def _pytest(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _collect(*args: str) -> list[str]:
    proc = _pytest("--collect-only", "-q", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_pytest_perfsuite_scope_selects_the_gpu_tier_by_scope() -> None:
    gpu = ("-m", "gpu", "--perfsuite-no-gpu=skip")
    push = _collect(*gpu, "--perfsuite-scope=push", "tests/test_matrix.py", "tests/test_strategy_claims.py")
    assert {line.split("[", 1)[1].rstrip("]") for line in push} == PUSH_GPU  # the GPU claims are nightly's
    nightly = _collect(*gpu, "--perfsuite-scope=nightly", "tests/test_strategy_claims.py")
    assert len(nightly) == 8  # every GPU claim


def test_run_and_refresh_take_the_scope(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--scope", "push", "--models", "tiny-bert"]) == 2
    assert "--scope runs the matrix's cases; it takes no --models or --strategies" in capsys.readouterr().err
    assert main(["run", "--scope", "push", "--all"]) == 2
    assert "--scope push chooses the cases; give no --all or --every-push with it" in capsys.readouterr().err
    seen: list[list[str]] = []

    class Started:  # the refresh's pytest session, not started: only its arguments are checked
        def __init__(self, argv: list[str], **kw: Any) -> None:
            seen.append(argv)

        def wait(self, timeout: float | None = None) -> int:
            return 0

    def refused(*args: Any, **kw: Any) -> Any:
        raise AssertionError(f"the refresh started a real session: {args}")

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(subprocess, "Popen", Started)
    monkeypatch.setattr(subprocess, "run", refused)
    assert main(["baselines", "refresh", "--device", "cpu", "--scope", "nightly"]) == 0
    assert "--perfsuite-scope=nightly" in seen[0]


def test_a_misspelt_scope_marker_stops_collection_naming_the_test(tmp_path: Path) -> None:
    (tmp_path / "test_marked.py").write_text("import pytest\n\n@pytest.mark.scope('nighty')\ndef test_x():\n    pass\n")
    proc = _pytest("-q", "--perfsuite-scope=push", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # a usage error
    assert "test_marked.py::test_x: unknown scope 'nighty'; valid: push, nightly, weekly" in proc.stderr


def test_a_gate_fails_only_when_none_of_its_cases_was_gated() -> None:
    from perfsuite.core.gates import Outcome
    from perfsuite.session.scope import nothing_gated

    collected: dict[str, str | None] = {"a": "no baseline for a on nvidia-h100\nrecord one", "b": None}
    skipped = [Outcome("b", "skipped", message="b: skipped: needs deepspeed")]
    assert nothing_gated(collected, skipped) == (
        "perfsuite: nothing was gated: all 2 case(s) were skipped (a: no baseline for a on nvidia-h100)"
    )
    assert nothing_gated({"b": None}, skipped) == (
        "perfsuite: nothing was gated: all 1 case(s) were skipped (b: b: skipped: needs deepspeed)"
    )
    assert nothing_gated(collected, [Outcome("b", "passed")]) is None
    assert nothing_gated(collected, [Outcome("b", "failed")]) is None  # the gate fails on its own
    assert nothing_gated({}, []) is None  # no matrix case reached
