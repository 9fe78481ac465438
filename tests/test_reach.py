"""What a comparison's cases ran of the packages that differ between its sides: the watch in a
worker's profile step (perfsuite.worker.reach), the answer per package (perfsuite.core.reach), and
where a comparison says it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfsuite.core.reach import WATCH_ENV, Reach, described, reach, to_watch, unreached
from perfsuite.core.record import PackageRun


def _run(name: str, *, calls: int = 0, native: int = 0, version: str | None = "1.0", **more: Any) -> dict[str, Any]:
    fields = {"complete": True, "python_calls": calls, "native_calls": native, "has_code": True, **more}
    return PackageRun.from_json({"name": name, "version": version, **fields}, "test").to_json()


def _case(a: list[Any], b: list[Any], error: str | None = None) -> dict[str, Any]:
    return {"case": "c", "error": error, "ran": {"a": a, "b": b}}


def test_each_package_is_counted_over_the_cases_and_its_sides() -> None:
    cases = [
        _case(
            [_run("transformers", calls=640), _run("bitsandbytes")],
            [_run("transformers", calls=650), _run("bitsandbytes")],
        ),
        _case(
            [_run("transformers", calls=9), _run("bitsandbytes")],
            [_run("transformers", calls=9), _run("bitsandbytes", native=3)],
        ),
        _case([], []),  # not watched: a side that could not say
    ]
    found = {r.name: r for r in reach(cases)}
    assert found["transformers"] == Reach(
        "transformers", ("1.0", "1.0"), watched=2, ran=(2, 2), either=2, has_code=True
    )
    assert found["bitsandbytes"].ran == (0, 1)  # the candidate's step calls it, the base's does not
    assert (
        described(found["bitsandbytes"], 3)
        == "bitsandbytes 1.0 → 1.0: run in the step of 1 of 3 case(s) (base 0, candidate 1)"
    )
    assert unreached(list(found.values())) == []


def test_a_package_no_step_ran_says_the_verdicts_say_nothing_of_it_and_where_it_would_run() -> None:
    cases = [
        _case([_run("bitsandbytes", version="0.49.0")], [_run("bitsandbytes", version="0.50.0")]) for _ in range(3)
    ]
    found = reach(cases)
    assert unreached(found) == ["bitsandbytes"]
    said = described(found[0], 3, device_type="cpu")
    assert said.startswith(
        "bitsandbytes 0.49.0 → 0.50.0: run in no case's step (of 3 watched): the verdicts say nothing of it"
    )
    assert "adamw_8bit" in said
    assert "qlora" not in said
    assert "qlora" in described(found[0], 3, device_type="cuda")


@pytest.mark.parametrize(
    ("a", "b", "said"),
    [
        # A wheel of native libraries alone: a step shows no call of it, whatever calls it.
        (
            [_run("nvidia-cudnn-cu12", has_code=False)],
            [_run("nvidia-cudnn-cu12", has_code=False)],
            "ships no code a step",
        ),
        # A step that raised before its end may not have reached the code.
        ([_run("peft", complete=False)], [_run("peft")], "not watched"),
        # Added by the candidate: the base has none, and its step is all the answer needs.
        ([_run("galore-torch", version=None, complete=True, has_code=None)], [_run("galore-torch")], "run in no case"),
    ],
)
def test_what_cannot_be_seen_is_not_called_unused(a: list[Any], b: list[Any], said: str) -> None:
    found = reach([_case(a, b)])
    assert said in described(found[0], 1)
    assert unreached(found) == (found[0].name.split() if said == "run in no case" else [])


def test_a_file_whose_records_are_not_package_runs_is_read_as_unwatched() -> None:
    """ab.json is data: a hand-made or older file's entries that are not what a worker writes are left out."""
    cases = [_case([{"name": "x", "python_calls": "many"}, 3], [_run("x")]), {"case": "old", "error": None}]
    assert [(r.name, r.ran) for r in reach(cases)] == [("x", (0, 0))]


def test_the_watched_packages_are_those_whose_versions_differ_but_perfsuite() -> None:
    a = {"torch": "2.13.0", "transformers": "5.25.0", "perfsuite": "0.1.0", "peft": None}
    b = {"torch": "2.13.0", "transformers": "5.24.0", "perfsuite": "0.2.0", "peft": "0.21.2"}
    assert to_watch(a, b) == ("peft", "transformers")


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two made-up distributions on the path: one with a module, one of native libraries alone."""
    site = tmp_path / "site"
    for dist, files in {
        "madeup_tool": {"madeup_tool/__init__.py": "", "madeup_tool/work.py": "def go():\n    return 1\n"},
        "madeup_native": {"madeup_native/__init__.py": "", "madeup_native/lib/libthing.so.12": ""},
    }.items():
        for name, text in files.items():
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).write_text(text)
        info = site / f"{dist}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        record = [f"{name},,{len(text)}" for name, text in files.items()] + [
            f"{info.name}/METADATA,,",
            f"{info.name}/RECORD,,",
        ]
        (info / "RECORD").write_text("\n".join(record) + "\n")
    monkeypatch.syspath_prepend(str(site))
    yield site
    for module in [m for m in sys.modules if m.startswith("madeup_")]:
        del sys.modules[module]


def test_a_watch_counts_python_and_compiled_calls_by_the_distribution_that_installed_them(installed: Path) -> None:
    import madeup_tool.work
    import numpy

    from perfsuite.worker.reach import Watch

    watch = Watch(["madeup_tool", "madeup_native", "numpy", "not-installed-here"])
    with watch.watching():
        madeup_tool.work.go()
        madeup_tool.work.go()
        numpy.zeros(3)  # a built-in numpy defines: a compiled call
    found = {r["name"]: PackageRun.from_json(r, "test") for r in watch.ran()}
    assert (found["madeup_tool"].python_calls, found["madeup_tool"].has_code) == (2, True)
    assert (found["madeup_native"].python_calls, found["madeup_native"].has_code) == (0, False)
    assert found["numpy"].native_calls >= 1
    assert found["not-installed-here"].version is None
    assert all(r.complete for r in found.values())
    assert sys.getprofile() is None  # left as it was


def test_a_step_that_raised_is_no_complete_watch() -> None:
    from perfsuite.worker.reach import Watch

    watch = Watch(["numpy"])
    with pytest.raises(RuntimeError), watch.watching():
        raise RuntimeError("the step failed")
    assert not watch.complete
    assert watch.ran()[0]["complete"] is False


@pytest.mark.cpu
def test_a_case_run_with_the_watch_asked_records_what_its_profile_step_ran() -> None:
    """Through the worker as a side's server runs it: the environment asks, the record answers."""
    from perfsuite.core.spec import CaseSpec
    from perfsuite.worker.process import run_isolated

    spec = CaseSpec(model="tiny-bert", strategy="adamw_8bit", steps=2, warmup_steps=1, threads=1, device="cpu")
    record = run_isolated(spec, timeout_s=300, env={WATCH_ENV: "transformers,bitsandbytes,peft,not-installed-here"})
    assert record.ok, record.error
    found = {r.name: r for r in record.step_ran}
    assert found["transformers"].python_calls > 0
    assert found["transformers"].complete
    assert found["bitsandbytes"].python_calls > 0  # its 8-bit AdamW's step
    assert found["peft"].python_calls == found["peft"].native_calls == 0
    assert found["peft"].has_code
    assert found["not-installed-here"].version is None
    assert json.loads(json.dumps(record.to_json()))["step_ran"][0]["name"] == "transformers"


def test_the_upgrade_verdict_says_what_no_case_ran_in_its_headline_and_each_package_below(tmp_path: Path) -> None:
    """What a pull request's comment shows: the headline names the bumped package no case's step ran,
    the lines under the sides say where each one ran; the summary is one ``perfsuite comment`` posts."""
    from perfsuite.reports.ab import markdown
    from perfsuite.reports.verdict import read_summary

    versions = {"base": ("5.24.0", "0.49.0"), "candidate": ("5.25.0", "0.50.0")}
    libraries = {
        side: {"transformers": {"version": t}, "bitsandbytes": {"version": b}} for side, (t, b) in versions.items()
    }
    ran = {
        side: [_run("transformers", calls=640, version=t), _run("bitsandbytes", version=b)]
        for side, (t, b) in zip("ab", versions.values(), strict=True)
    }
    case = {
        "case": "tiny-bert-vanilla",
        "verdict": "same",
        "error": None,
        "time": {"ratio": 1.0, "low": 0.99, "high": 1.01, "verdict": "same", "pairs": 11},
        "mode": "duet",
        "memory": {"a": 2**20, "b": 2**20, "breakdown_a": {}, "breakdown_b": {}},
        "loss": {"max_abs_diff": 0.0},
        "ran": ran,
    }
    payload = {
        "device_type": "cpu",
        "sides": {name: {"env": name, "probe": {"libraries": libraries[name]}} for name in libraries},
        "cases": [case],
        "verdicts": {"regressed": 0, "improved": 0, "same": 1, "undecided": 0, "cannot test": 0},
    }
    text = markdown(payload)
    assert "0.49.0 → 0.50.0; no case's step ran bitsandbytes)**" in text.splitlines()[2]
    assert "- transformers 5.24.0 → 5.25.0: run in the step of 1 of 1 case(s)\n" in text
    assert "- bitsandbytes 0.49.0 → 0.50.0: run in no case's step (of 1 watched)" in text
    (tmp_path / "summary.md").write_text(text)
    posted = read_summary(tmp_path / "summary.md")
    assert posted.marker == "<!-- perfsuite-ab cpu -->"
    assert "- bitsandbytes 0.49.0 → 0.50.0: run in no case's step (of 1 watched)" in "\n".join(posted.lines)


def test_a_side_asks_its_worker_to_watch_only_a_run_with_a_profile_step() -> None:
    from perfsuite.ab.envs import Env
    from perfsuite.ab.sides import Side

    side = Side.__new__(Side)  # its server is not needed: what it is asked is
    side.name, side.extensions, side.watch = "base", "ext", ("transformers", "bitsandbytes")
    side.env = Env(label="current", python=sys.executable)
    asked: list[dict[str, Any]] = []

    def answer(request: dict[str, Any], **_: Any) -> dict[str, Any]:
        asked.append(request)
        return {"ok": True, "record": {"model": "tiny-bert", "strategy": "vanilla", "status": "ok"}}

    side._ask = answer  # type: ignore[method-assign]
    side.run({"model": "tiny-bert", "profile": True}, 60.0)
    side.run({"model": "tiny-bert", "profile": False}, 60.0)
    assert asked[0]["env"][WATCH_ENV] == "transformers,bitsandbytes"
    assert WATCH_ENV not in asked[1]["env"]


def test_a_watch_is_entered_around_the_next_step_alone_inside_the_instruments() -> None:
    import contextlib

    import torch

    from perfsuite.worker.engines.driven import Driven

    entered: list[str] = []

    @contextlib.contextmanager
    def named(name: str) -> Iterator[None]:
        entered.append(f"{name} in")
        yield
        entered.append(f"{name} out")

    class Engine:
        model = optimizer = None

        def step(self) -> torch.Tensor:
            entered.append("step")
            return torch.tensor(1.0)

    engine = Driven(Engine(), device_type="cpu")  # type: ignore[arg-type]
    engine.watch_next_step(named("watch"))
    engine.step(within=named("instrument"))
    engine.step()
    assert entered == ["instrument in", "watch in", "step", "watch out", "instrument out", "step"]
