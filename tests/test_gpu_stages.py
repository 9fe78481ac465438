"""benchmarks/gpu/run.sh, the GPU tier's jobs in stages: every stage, run here with the commands it
would start replaced by stand-ins that write down their arguments, starts only commands that parse.

A GPU job is rare and short, so a stage that breaks on its own arguments (an option renamed in the
CLI, a usage check that refuses what a job passes) wastes it; these tests find that on a CPU."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
RUN_SH = ROOT / "benchmarks" / "gpu" / "run.sh"

RECORD = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["STAGE_CALLS"], "a") as calls:
    calls.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""
TIMEOUT = """#!/usr/bin/env bash
# timeout [-s SIGNAL] DURATION COMMAND...: runs COMMAND, as if it ended in time
while [ "${1#-}" != "$1" ]; do case $1 in -s | -k) shift 2 ;; *) shift ;; esac; done
shift
exec "$@"
"""

# Each stage with the arguments a job passes it (docs/gpu.md), and the scope in $SCOPE where it takes one.
STAGES = [
    ("smoke", [], None),
    ("claims", [], None),
    ("refresh", ["bert-base-uncased-grad_ckpt", "3"], None),
    ("refresh", ["uncased-grad_ckpt or uncased-all", "3"], "push"),
    ("missing", ["220", "not uncased-zero3_offload and not uncased-all"], "push"),
    ("missing", ["300"], None),
    ("compare", [], "push"),
    ("compare", ["uncased-zero2_offload or uncased-zero3_offload"], None),
    ("push", ["300", "180", "missing"], None),
    ("layout", ["4", "2"], None),
    ("noise", [], None),
    ("ab", ["10", "30"], None),
    ("inject", ["8", "30"], None),
    ("jobs", ["2"], None),
    ("nvml-preload", ["240"], None),
    ("cuda-imports", [], None),
    ("xlmr", ["512"], None),
]


def _stage(
    tmp_path: Path, stage: str, args: list[str], scope: str | None, **variables: str
) -> tuple[int, list[list[str]]]:
    shims = tmp_path / "shims"
    shims.mkdir(exist_ok=True)
    for name, text in (("perfsuite", RECORD), ("python3", RECORD), ("timeout", TIMEOUT)):
        (shims / name).write_text(text)
        (shims / name).chmod((shims / name).stat().st_mode | stat.S_IEXEC)
    out, calls = tmp_path / "out", tmp_path / "calls.jsonl"
    out.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "OUT": str(out), "STAGE_CALLS": str(calls)}
    for name in ("SCOPE", "AB_STRATEGIES", "AB_LIMIT_S", "COMPARE_LIMIT_S", "REFRESH_LIMIT_S"):
        env.pop(name, None)
    env.update(variables)
    if scope:
        env["SCOPE"] = scope
    done = subprocess.run(["bash", str(RUN_SH), stage, *args], env=env, capture_output=True, text=True, timeout=120)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return done.returncode, [json.loads(line) for line in lines]


def _pytest_args(call: list[str]) -> list[str] | None:
    """The arguments of a ``python3 -m pytest`` call, else None."""
    return call[3:] if call[:3] == ["python3", "-m", "pytest"] else None


@pytest.mark.parametrize(("stage", "args", "scope"), STAGES, ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(STAGES)])
def test_every_stage_starts_commands_that_parse(tmp_path: Path, stage: str, args: list[str], scope: str | None) -> None:
    status, calls = _stage(tmp_path, stage, args, scope)
    assert status == 0, calls
    assert calls, f"{stage} started nothing"
    for call in calls:
        if call[0] == "perfsuite":
            build_parser().parse_args(call[1:])  # SystemExit (a usage error) fails the test
        elif (pytest_args := _pytest_args(call)) is not None:
            assert pytest_args[:2] == ["-m", "gpu"], call
        elif call[1] != "-c":
            assert (ROOT / call[1]).is_file(), f"{stage} runs a script that is not there: {call}"


def test_the_scope_reaches_the_refresh_and_the_compare(tmp_path: Path) -> None:
    _, refresh = _stage(tmp_path, "missing", ["200", "uncased"], "push")
    assert refresh[0][:3] == ["perfsuite", "baselines", "refresh"]
    assert "--scope=push" in refresh[0]
    (tmp_path / "calls.jsonl").unlink()
    _, compare = _stage(tmp_path, "compare", [], "nightly")
    assert "--perfsuite-scope=nightly" in compare[0]
    assert compare[0][compare[0].index("-k") + 1] == ""
    (tmp_path / "calls.jsonl").unlink()
    _, unscoped = _stage(tmp_path, "missing", ["200"], None)
    assert not any(arg.startswith("--scope") for arg in unscoped[0])
    (tmp_path / "calls.jsonl").unlink()
    _, rerecord = _stage(tmp_path, "refresh", ["uncased-all", "3"], "push", REFRESH_LIMIT_S="150")
    assert "--scope=push" in rerecord[0]
    assert rerecord[0][rerecord[0].index("--time-limit") + 1] == "150"


@pytest.mark.parametrize("stage", ["ab", "inject"])
def test_the_ab_stages_take_their_cases_from_ab_strategies(tmp_path: Path, stage: str) -> None:
    _, calls = _stage(tmp_path, stage, ["6", "8"], None, AB_STRATEGIES="vanilla,grad_ckpt")
    assert calls[0][calls[0].index("--strategies") + 1] == "vanilla,grad_ckpt"
    assert calls[0][calls[0].index("--pairs") + 1] == "6"


@pytest.mark.nightly  # two collections of the matrix, about 8 s
def test_the_compares_pytest_options_exist(tmp_path: Path) -> None:
    """pytest refuses an option it does not know: collect with each compare's own arguments (no GPU
    here, so without ``-m gpu``)."""
    _, calls = _stage(tmp_path, "compare", ["uncased"], "push")
    (tmp_path / "calls.jsonl").unlink()
    _, push = _stage(tmp_path, "push", ["300", "180"], None)
    for call in (calls[0], next(c for c in push if _pytest_args(c))):
        args = _pytest_args(call)
        assert args is not None
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *args[2:], "--collect-only", "-q", "-n", "0"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.parametrize("args", [["no-such-stage"], ["jobs", "2", "both"]])
def test_a_stage_it_does_not_know_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    status, calls = _stage(tmp_path, args[0], args[1:], None)
    assert status == 2
    assert not calls


def test_the_documented_inject_job_runs_to_its_first_alarm_look() -> None:
    """docs/gpu.md sizes the two-case jobs: *slower* can first be called at pair 8 (two cases, one look
    each at 97.5%), so the injected slowdown runs 8 pairs; an A/A may end at 6 with *same*."""
    from perfsuite.ab.comparison import schedule_for

    injected = schedule_for(2, floor=0.03, alpha=0.05, first=8, cap=8)
    assert (injected.first, injected.alarms) == (8, (8,))
    aa = schedule_for(2, floor=0.03, alpha=0.05, first=6, cap=8)
    assert (aa.first, aa.alarms) == (6, (8,))
    text = (ROOT / "docs" / "gpu.md").read_text()
    assert "run.sh inject 8 8" in text
