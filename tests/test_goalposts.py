"""The goalposts a change moves (perfsuite/core/goalposts.py): each rewritten baseline and each moved
tolerance, old → new, read from git's objects by the base's own copy of the file, as the GPU
workflow runs it before any of a pull request's code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tools import ROOT, git

from perfsuite.core import goalposts

BASELINE = (ROOT / "baselines" / "cpu" / "tiny-bert-vanilla.json").read_text()
_MEDIAN = json.loads(BASELINE)["time"]["amd-25.1-avx2"]["median"]
SLOWER = (
    f"step time [amd-25.1-avx2] {_MEDIAN:.4g} → {_MEDIAN * 1.25:.4g} calibrated (+25.0%); "
    "also time.amd-25.1-avx2.repeats"  # what the median is the median of, moved with it
)
"""How a 25% slower copy of the committed baseline's step time reads (the figures follow a refresh)."""
PYPROJECT = '[tool.perfsuite]\nbaselines = "baselines"\n[tool.perfsuite.overrides."cpu/*"]\ntime_floor = 0.15\n'


def _moved(change: Any) -> str:
    data = json.loads(BASELINE)
    change(data)
    return json.dumps(data)


def _slower(data: dict[str, Any]) -> None:
    entry = data["time"]["amd-25.1-avx2"]
    entry["median"] *= 1.25
    entry["repeats"] = [r * 1.25 for r in entry.get("repeats") or ()] or entry.get("repeats")


def test_a_rewritten_baseline_says_each_figure_old_to_new() -> None:
    def everything(data: dict[str, Any]) -> None:
        _slower(data)
        data["memory"]["peak_bytes"] = 2 * 2**20 + data["memory"]["peak_bytes"]
        data["loss"][3] += 0.5

    line = goalposts.baseline_moves("baselines/cpu/tiny-bert-vanilla.json", BASELINE, _moved(everything))
    assert line is not None
    assert line.startswith(f"`tiny-bert-vanilla` on cpu: {SLOWER.split(';')[0]}")
    assert "; peak memory 92.96 → 94.96 MiB (+2.2%); loss curve changed" in line


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (
            lambda d: d["time"]["amd-25.1-avx2"].update(steps=[v * 1.4 for v in d["time"]["amd-25.1-avx2"]["steps"]]),
            "time.amd-25.1-avx2.steps",
        ),
        (lambda d: d["time"]["amd-25.1-avx2"].update(spread=0.05), "time.amd-25.1-avx2.spread"),
        (lambda d: d["spec"].update(initial_weights="0" * 32), "spec.initial_weights"),
        (lambda d: d["memory"]["breakdown"].update(activations=1), "memory.breakdown.activations"),
    ],
    ids=["steps", "spread", "initial-weights", "breakdown"],
)
def test_a_figure_the_gate_reads_that_no_line_names_is_still_said(change: Any, key: str) -> None:
    """The stored steps (the gate pairs them), the spread (its tolerance), the initial weights' digest
    (a loss compared or not), a breakdown category: a pull request that moves one alone moves the gate."""
    line = goalposts.baseline_moves("baselines/cpu/tiny-bert-vanilla.json", BASELINE, _moved(change))
    assert line == f"`tiny-bert-vanilla` on cpu: also {key}"
    when = _moved(lambda d: d["provenance"].update(date="2027-01-01", commit="f" * 40))
    assert goalposts.baseline_moves("baselines/cpu/tiny-bert-vanilla.json", BASELINE, when) is None


def test_added_removed_unreadable_and_unmoved_baselines() -> None:
    path = "baselines/cpu/tiny-bert-vanilla.json"
    assert goalposts.baseline_moves(path, None, BASELINE) == f"`tiny-bert-vanilla` on cpu: baseline added (`{path}`)"
    assert goalposts.baseline_moves(path, BASELINE, None) == f"`tiny-bert-vanilla` on cpu: baseline removed (`{path}`)"
    assert "unreadable" in str(goalposts.baseline_moves(path, BASELINE, "{not json"))
    assert "unreadable" in str(goalposts.baseline_moves(path, BASELINE, "[1]"))

    # A pool's withdrawal of a class's time says why.
    def withdrawn(data: dict[str, Any]) -> None:
        del data["time"]["amd-25.1-avx2"]
        data["untimed"] = {"amd-25.1-avx2": {"spread": 0.142, "widest": 0.1, "sessions": 6, "date": None}}

    line = str(goalposts.baseline_moves(path, BASELINE, _moved(withdrawn)))
    withdrawal = f"step time [amd-25.1-avx2] {_MEDIAN:.4g} → — calibrated"
    assert f"{withdrawal} (too noisy to gate: its pooled sessions there spread 14.2%)" in line
    unmarked = _moved(lambda d: d["time"].pop("amd-25.1-avx2"))  # a class with no time marked, then lifted
    marked = goalposts.baseline_moves(path, unmarked, _moved(withdrawn))
    assert marked == (
        "`tiny-bert-vanilla` on cpu: step time [amd-25.1-avx2] now (its pooled sessions there spread 14.2%) "
        "marked too noisy to gate"
    )
    lifted = str(goalposts.baseline_moves(path, _moved(withdrawn), unmarked))
    assert lifted.endswith("step time [amd-25.1-avx2] no longer marked too noisy to gate")
    # Provenance alone (a refresh's date) moves no goalpost.
    assert goalposts.baseline_moves(path, BASELINE, _moved(lambda d: d["provenance"].update(date="x"))) is None


def test_moved_tolerances_are_named_by_their_table() -> None:
    looser = PYPROJECT.replace("0.15", "0.4") + "[tool.perfsuite.tolerance]\nmemory = 0.1\n"
    assert goalposts.tolerance_moves("pyproject.toml", PYPROJECT, looser) == [
        "`pyproject.toml` `[tool.perfsuite] overrides.cpu/*.time_floor`: 0.15 → 0.4",
        "`pyproject.toml` `[tool.perfsuite] tolerance.memory`: — → 0.1",
    ]
    unrelated = PYPROJECT + '[project]\nname = "x"\n'
    assert goalposts.tolerance_moves("pyproject.toml", PYPROJECT, unrelated) == []
    assert "not TOML" in goalposts.tolerance_moves("pyproject.toml", PYPROJECT, "[tool")[0]


def test_only_baselines_and_the_root_pyproject_count_and_nothing_moved_is_no_block() -> None:
    texts: dict[str, tuple[str | None, str | None]] = {
        "baselines/cpu/tiny-bert-vanilla.json": (BASELINE, _moved(_slower)),
        "baselines/cpu/pytest-benchmark.amd-25.1-avx2.json": ("{}", '{"x": 1}'),
        "docs/data.json": ("{}", '{"x": 1}'),
        "sub/pyproject.toml": (PYPROJECT, PYPROJECT.replace("0.15", "0.9")),
    }
    lines = goalposts.moves(texts)
    assert [line.split(":")[0] for line in lines] == [
        "`baselines/cpu/pytest-benchmark.amd-25.1-avx2.json`",
        "`tiny-bert-vanilla` on cpu",
    ]
    block = goalposts.markdown(lines)
    assert block.startswith(f"> {goalposts.HEADLINE}")
    assert block.count("\n> - ") == 2
    assert goalposts.markdown([]) == ""


@pytest.fixture
def branch(tmp_path: Path) -> Path:
    """A repository whose branch ``change`` rewrote a baseline and loosened a tolerance, while its
    base branch ``main`` moved on with a tolerance change of its own (not the branch's)."""
    repo = tmp_path / "repo"
    (repo / "baselines" / "cpu").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "baselines" / "cpu" / "tiny-bert-vanilla.json").write_text(BASELINE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "change")
    (repo / "baselines" / "cpu" / "tiny-bert-vanilla.json").write_text(_moved(_slower))
    (repo / "pyproject.toml").write_text(PYPROJECT.replace("0.15", "0.4"))
    git(repo, "commit", "-q", "-am", "easier")
    git(repo, "checkout", "-q", "main")
    (repo / "pyproject.toml").write_text(PYPROJECT + "[tool.perfsuite.tolerance]\nmemory = 0.02\n")
    git(repo, "commit", "-q", "-am", "main moves on")
    return repo


def test_the_base_copy_run_as_a_file_names_what_the_branch_moved(branch: Path) -> None:
    """As the GPU workflow runs it: the base commit's file, alone, under ``python -I``."""
    script = branch.parent / "goalposts.py"
    script.write_text((ROOT / "perfsuite" / "core" / "goalposts.py").read_text())
    done = subprocess.run(
        [sys.executable, "-I", str(script), "main", "change"], cwd=branch, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"> {goalposts.HEADLINE}: the gate below compares against the new figures. Review these first:",
        f"> - `tiny-bert-vanilla` on cpu: {SLOWER}",
        "> - `pyproject.toml` `[tool.perfsuite] overrides.cpu/*.time_floor`: 0.15 → 0.4",
        "",
    ]


def test_nothing_moved_prints_nothing_and_a_bad_ref_is_one_line(
    branch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert goalposts.main(["--repo", str(branch), "main", "main"]) == 0
    assert capsys.readouterr().out == ""
    assert goalposts.main(["--repo", str(branch), "main", "no-such-branch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("goalposts: error: ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("where", ["./baselines", "baselines/.", "baselines/", "./baselines/cpu/.."])
def test_a_baselines_path_written_otherwise_hides_no_rewrite(branch: Path, where: str) -> None:
    """perfsuite reads ``baselines = "./baselines"`` as the same directory; so does the block, and
    the setting's own move is a goalpost: a pull request cannot hide a rewrite behind its spelling."""
    git(branch, "checkout", "-q", "change")
    pyproject = branch / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('baselines = "baselines"', f'baselines = "{where}"'))
    git(branch, "commit", "-q", "-am", "the same directory, spelt otherwise")
    lines = goalposts.from_git(branch, "main", "change")
    assert f"`tiny-bert-vanilla` on cpu: {SLOWER}" in lines
    assert f"`pyproject.toml` `[tool.perfsuite] baselines`: baselines → {where}" in lines


def test_a_file_that_is_not_text_or_a_settings_table_that_is_not_one_is_named_not_a_traceback(
    branch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(branch, "checkout", "-q", "change")
    (branch / "baselines" / "cpu" / "tiny-bert-fp16.json").write_bytes(b'{"case": "\xff"}')
    (branch / "pyproject.toml").write_text("tool = 1\n")
    git(branch, "add", "-A")
    git(branch, "commit", "-q", "-m", "bytes")
    assert goalposts.main(["--repo", str(branch), "main", "change"]) == 0
    out = capsys.readouterr().out
    assert "`baselines/cpu/tiny-bert-fp16.json`: unreadable (JSONDecodeError), so what it moves cannot be said" in out
    assert "`pyproject.toml` `[tool.perfsuite] overrides.cpu/*.time_floor`: 0.15 → —" in out  # its settings gone


def test_what_else_moves_the_gate_is_said(branch: Path) -> None:
    """pytest's own options (``addopts`` can set ``--perfsuite-time=off``), a pytest.ini that pytest
    reads first, a conftest, the matrix the gate runs, and a baseline renamed away (its case then
    has none): each is a line of the block."""
    git(branch, "checkout", "-q", "change")
    pyproject = branch / "pyproject.toml"
    text = pyproject.read_text() + "[tool.perfsuite.matrix]\nbuiltin = false\n"
    pyproject.write_text(text + '[tool.pytest.ini_options]\naddopts = ["--perfsuite-time=off"]\n')
    (branch / "pytest.ini").write_text("[pytest]\naddopts = --perfsuite-missing=skip\n")
    (branch / "tests").mkdir()
    (branch / "tests" / "conftest.py").write_text("")
    git(branch, "add", "-A")
    git(branch, "mv", "baselines/cpu/tiny-bert-vanilla.json", "baselines/cpu/zz-archived.json")
    git(branch, "commit", "-q", "-m", "quieter")
    lines = goalposts.from_git(branch, "main", "change")
    assert "`pyproject.toml` `[tool.pytest.ini_options] addopts`: — → ['--perfsuite-time=off']" in lines
    assert "`pyproject.toml` `[tool.perfsuite] matrix.builtin`: — → False" in lines
    assert "`pytest.ini` added: pytest's configuration, whose addopts can set any --perfsuite-* option" in lines
    assert "`tests/conftest.py` added: a conftest, whose hooks and fixtures run before the gate" in lines
    assert "`tiny-bert-vanilla` on cpu: baseline removed (`baselines/cpu/tiny-bert-vanilla.json`)" in lines
