"""``perfsuite baselines classes``: per hardware directory and time class, how many cases hold a step
time, which are kept untimed, and this machine's class first, before any run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfsuite.cli import main
from perfsuite.core.coverage import coverage

ROOT = Path(__file__).resolve().parent.parent
WHY = {"spread": 0.142, "widest": 0.1, "sessions": 6, "date": None}


def _project(tmp_path: Path) -> Path:
    """Three CPU baselines: vanilla timed on two classes, fp16 on one and untimed on the other, lora on
    none; and one of a GPU."""
    cpu = tmp_path / "baselines" / "cpu"
    cpu.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[tool.perfsuite]\nbaselines = 'baselines'\n")
    entry = {"unit": "calibrated", "median": 10.0, "spread": 0.01, "steps": [], "calibration": "numpy-mix-v2"}

    def write(case: str, time: dict[str, Any], **extra: Any) -> None:
        data = json.loads((ROOT / "baselines" / "cpu" / f"{case}.json").read_text())
        (cpu / f"{case}.json").write_text(json.dumps({**data, "time": time, **extra}))

    write("tiny-bert-vanilla", {"class-a": entry, "class-b": entry})
    write("tiny-bert-fp16", {"class-a": entry}, untimed={"class-b": WHY})
    write("tiny-bert-lora", {})
    (cpu / "pytest-benchmark.class-a.json").write_text("{}")  # not a baseline
    gpu = tmp_path / "baselines" / "nvidia-h100-80gb-hbm3"
    gpu.mkdir()
    (gpu / "bert-base-uncased-vanilla.json").write_text(
        (ROOT / "baselines" / "nvidia-h100-80gb-hbm3" / "bert-base-uncased-vanilla.json").read_text()
    )
    return tmp_path


def test_each_class_counts_its_timed_and_untimed_cases(tmp_path: Path) -> None:
    cpu, gpu = coverage(_project(tmp_path) / "baselines")
    assert (cpu.hardware, len(cpu.cases)) == ("cpu", 3)
    assert cpu.of("class-a").timed == ("tiny-bert-fp16", "tiny-bert-vanilla")
    assert cpu.of("class-b").timed == ("tiny-bert-vanilla",)
    assert cpu.of("class-b").untimed == ("tiny-bert-fp16",)
    assert cpu.of("class-c").timed == ()
    assert [c.time_class for c in gpu.classes] == ["nvidia-h100-80gb-hbm3"]


def test_the_command_puts_this_machines_class_first_and_says_when_it_gates_no_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    monkeypatch.setattr("perfsuite.cli.classes.local_cpu_class", lambda: "class-b")
    assert main(["baselines", "classes"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        "baselines/cpu: 3 baseline(s)",
        "  class-b (this machine)  1 of 3 timed, 1 too noisy to time (untimed): tiny-bert-fp16, 1 with no time",
        "  class-a                 2 of 3 timed, 1 with no time",
    ]
    assert out[3:] == ["baselines/nvidia-h100-80gb-hbm3: 1 baseline(s)", "  nvidia-h100-80gb-hbm3  1 of 1 timed"]

    monkeypatch.setattr("perfsuite.cli.classes.local_cpu_class", lambda: "class-c")
    assert main(["baselines", "classes"]) == 0
    assert (
        "  class-c (this machine)  0 of 3 timed: a gate here compares memory and loss only" in capsys.readouterr().out
    )


def test_an_unreadable_baseline_is_named_and_no_baselines_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path / "p")
    (project / "baselines" / "cpu" / "tiny-bert-bf16.json").write_text("{")
    (project / "baselines" / "nvidia-x").mkdir()  # a directory whose only baseline cannot be read
    (project / "baselines" / "nvidia-x" / "bert-base-uncased-vanilla.json").write_text("{")
    (project / "baselines" / "cpu-again").symlink_to(project / "baselines" / "cpu")  # not counted twice
    (project / "baselines" / "README.md").write_text("not a directory")
    monkeypatch.chdir(project)
    assert main(["baselines", "classes"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "baselines/cpu: 3 baseline(s), 1 unreadable (below)"
    assert out[4].startswith("  unreadable: ")
    assert "tiny-bert-bf16.json: corrupt baseline (not JSON" in out[4]
    assert out[5] == "baselines/nvidia-h100-80gb-hbm3: 1 baseline(s)"
    assert out[7] == "baselines/nvidia-x: 0 baseline(s), 1 unreadable (below)"
    assert out[8].startswith("  unreadable: ")
    assert len(out) == 9
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "pyproject.toml").write_text("[tool.perfsuite]\n")
    monkeypatch.chdir(empty)
    assert main(["baselines", "classes"]) == 2
    assert "no baselines directory at baselines: run this from" in capsys.readouterr().err
    (empty / "baselines" / "cpu").mkdir(parents=True)  # as a new repository's, before its first refresh
    (empty / "baselines" / "cpu" / "pytest-benchmark.class-a.json").write_text("{}")
    assert main(["baselines", "classes"]) == 0
    assert capsys.readouterr().out == (
        "baselines: no baseline yet, so a gate fails each case as missing (skips it under --perfsuite-missing=skip); "
        "`perfsuite baselines refresh` records them\n"
    )
