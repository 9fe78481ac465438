"""The nightly history end to end: records written from gated results (the committed CPU
baselines replayed, tests/replay.py), read back into series, judged, turned into tracking
issues, and the ``perfsuite history`` commands the nightly workflow runs."""

from __future__ import annotations

import json
import random
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from replay import replay, slower

from perfsuite.cli import main
from perfsuite.core.results import parse_results
from perfsuite.history.records import (
    HistoryError,
    commits_by_night,
    judge_all,
    load_records,
    night_record,
    series,
    write_record,
)
from perfsuite.history.tracking import LABEL, Action, apply, plan

CASE = "tiny-bert-grad_ckpt"


def _night(
    directory: Path,
    day: int,
    factors: dict[str, float] | None = None,
    *,
    torch: str | None = None,
    change: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    changes: dict[str, Any] = {case: slower(f) for case, f in (factors or {}).items()}
    if change is not None:
        changes[CASE] = change
    results = replay(changes, date=f"2026-10-{day:02d}T02:00:00+00:00", commit=f"{day:07d}" + "a" * 33)
    if torch:
        results["env"]["versions"] = dict(results["env"]["versions"], torch=torch)
    record = night_record(parse_results(results, f"night {day}"))
    write_record(record, directory)
    return results


def _noise(rng: random.Random, cases: list[str], sd: float = 0.04) -> dict[str, float]:
    return {case: 1 + rng.gauss(0, sd) for case in cases}


CASES = [c["case"] for c in replay()["cases"]]


def _verdict(directory: Path, metric: str = "step time") -> str:
    verdicts = judge_all(load_records(directory))
    return next(j.verdict for (_, case, m), j in verdicts.items() if case == CASE and m == metric)


def test_a_record_is_small_and_holds_each_gate_as_a_ratio(tmp_path: Path) -> None:
    results = _night(tmp_path, 1, {CASE: 1.10})
    (path,) = tmp_path.glob("*/*.json")
    assert path.parent.name == "cpu-amd-25.1-avx2"  # the first case's hardware and time class
    record = json.loads(path.read_text())
    assert path.stat().st_size < 400 * len(record["cases"])  # 38 KB for the 111 tiny cases
    entry = record["cases"][CASE]
    assert entry["metrics"]["step time"]["value"] == pytest.approx(1.10)
    assert entry["metrics"]["step time"]["tolerance"] == pytest.approx(0.15)
    assert entry["metrics"]["peak memory"]["value"] == 1.0
    assert entry["metrics"]["loss"]["value"] == 1.0
    assert record["fingerprint"]["versions"]["torch"] == results["env"]["versions"]["torch"]
    assert stat.S_IMODE(path.stat().st_mode) & 0o044  # readable by the branch's other users


def test_history_is_append_only(tmp_path: Path) -> None:
    _night(tmp_path, 1)
    _night(tmp_path, 1)  # the same record again: accepted, nothing changes
    with pytest.raises(HistoryError, match=r"append-only: .* only under another night \(`--night YYYY-MM-DD`\)"):
        _night(tmp_path, 1, {CASE: 1.2})
    assert len(list(tmp_path.glob("*/*.json"))) == 1


@pytest.mark.parametrize(
    ("field", "forged", "refusal"),
    [
        ("machine", "../../outside", "not a directory name"),
        ("machine", "..", "not a directory name"),
        ("machine", "cpu/../../outside", "not a directory name"),
        ("night", "../2026-10-01", "not a date"),
        ("night", "2026-13-01", "not a date"),
        ("night", "2026-10-1", "not a date"),
        ("commit", "../../x", "not a git commit"),
        ("commit", "ABCDEF0", "not a git commit"),
    ],
)
def test_a_forged_record_cannot_name_a_path_outside_the_history(
    tmp_path: Path, field: str, forged: str, refusal: str
) -> None:
    history = tmp_path / "history"
    results = replay({}, date="2026-10-01T02:00:00+00:00", commit="1" * 40)
    record = night_record(parse_results(results, "forged"))
    if field == "machine":
        record["fingerprint"]["machine"] = forged
    else:
        record[field] = forged
    with pytest.raises(HistoryError, match=refusal):
        write_record(record, history)
    assert list(tmp_path.rglob("*.json")) == []


def test_a_hardware_name_becomes_a_plain_directory_name(tmp_path: Path) -> None:
    def forge(record: dict[str, Any]) -> None:
        record["hardware"] = "../../Etc/.. GPU\\x"
        record["time_class"] = ""

    results = replay({CASE: forge}, date="2026-10-01T02:00:00+00:00", only={CASE})
    path, written = write_record(night_record(parse_results(results, "forged")), tmp_path)
    assert written
    assert path.parent.name == "etc-gpu-x"
    assert path.parent.parent == tmp_path


def test_a_machine_directory_linked_elsewhere_is_refused(tmp_path: Path) -> None:
    history, elsewhere = tmp_path / "history", tmp_path / "elsewhere"
    history.mkdir()
    elsewhere.mkdir()
    (history / "cpu-amd-25.1-avx2").symlink_to(elsewhere)
    record = night_record(parse_results(replay({}, date="2026-10-01T02:00:00+00:00"), "night"))
    with pytest.raises(HistoryError, match="resolves outside"):
        write_record(record, history)
    assert list(elsewhere.iterdir()) == []


def test_thirty_clean_nights_raise_no_alarm(tmp_path: Path) -> None:
    rng = random.Random(1)
    for day in range(1, 31):
        _night(tmp_path, day, _noise(rng, CASES))
    verdicts = judge_all(load_records(tmp_path))
    assert len(verdicts) == 3 * len(CASES)
    assert [k for k, j in verdicts.items() if j.verdict == "regression"] == []


def test_a_step_just_out_of_tolerance_is_caught_on_its_second_night(tmp_path: Path) -> None:
    rng = random.Random(2)
    for day in range(1, 11):
        _night(tmp_path, day, _noise(rng, [CASE], sd=0.02))
    assert _verdict(tmp_path) == "ok"
    _night(tmp_path, 11, {CASE: 1.17})  # tolerance 15%
    assert _verdict(tmp_path) == "ok"  # one night alone may be a neighbour's burst
    _night(tmp_path, 12, {CASE: 1.17})
    assert _verdict(tmp_path) == "regression"


def test_an_upgrade_starts_a_new_segment_instead_of_an_alarm(tmp_path: Path) -> None:
    for day in range(1, 8):
        _night(tmp_path, day)
    for day in range(8, 10):  # torch upgraded: 20% slower, and that is the new normal
        _night(tmp_path, day, {CASE: 1.2}, torch="2.14.0")
    (nights, _) = next(v for (_, c, m), v in series(load_records(tmp_path)).items() if c == CASE and m == "step time")
    assert {n.fingerprint for n in nights[:7]} != {n.fingerprint for n in nights[7:]}
    assert _verdict(tmp_path) == "insufficient_data"  # the committed baseline still gates each night


def test_a_memory_change_is_caught_on_its_first_night(tmp_path: Path) -> None:
    for day in range(1, 5):
        _night(tmp_path, day)

    def hold_more(record: dict[str, Any]) -> None:
        record["peak_memory_bytes"] = int(record["peak_memory_bytes"] * 1.05)

    _night(tmp_path, 5, change=hold_more)
    assert _verdict(tmp_path, "peak memory") == "regression"
    assert _verdict(tmp_path) == "ok"


def _plan(directory: Path, open_issues: list[dict[str, Any]]) -> list[Action]:
    records = load_records(directory)
    return plan(judge_all(records), open_issues, commits_by_night(records))


def test_tracking_opens_updates_and_closes_one_issue_per_series(tmp_path: Path) -> None:
    for day in range(1, 6):
        _night(tmp_path, day)
    _night(tmp_path, 6, {CASE: 1.3})
    _night(tmp_path, 7, {CASE: 1.3})
    (create,) = _plan(tmp_path, [])
    assert (create.kind, create.key[1:]) == ("create", (CASE, "step time"))
    assert "+30" not in create.title
    assert CASE in create.title
    assert "| 2026-10-07 | 0000007 | 1.300 | yes |" in create.body
    open_issues = [{"number": 17, "title": "renamed by a person", "body": create.body}]
    _night(tmp_path, 8, {CASE: 1.3})
    (update,) = _plan(tmp_path, open_issues)
    assert (update.kind, update.number, update.title) == ("update", 17, "renamed by a person")
    _night(tmp_path, 9)
    (close,) = _plan(tmp_path, open_issues)
    assert (close.kind, close.number) == ("close", 17)
    assert "Back in tolerance on 2026-10-09" in close.body


def test_apply_drives_gh(tmp_path: Path) -> None:
    log = tmp_path / "gh.log"
    gh = tmp_path / "gh"
    gh.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n')
    gh.chmod(0o755)
    actions = [
        Action("create", ("m", "c", "step time"), "t", "body"),
        Action("close", ("m", "d", "loss"), "u", "back", 5),
    ]
    apply(actions, "o/r", gh=str(gh))
    calls = log.read_text().splitlines()
    assert calls[0].startswith(f"label create {LABEL} --repo o/r --force")
    assert calls[1] == f"issue create --repo o/r --label {LABEL} --title t --body body"
    assert calls[2] == "issue close 5 --repo o/r --comment back"


def test_the_commands_the_nightly_workflow_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = tmp_path / "history"
    for day in range(1, 4):
        _night(history, day)
    tonight = replay({CASE: slower(1.3)}, date="2026-10-04T02:00:00+00:00", commit="b" * 40)
    crashed = dict(tonight["cases"][0], status="failed", checks=[], message="worker killed by signal SIGKILL")
    tonight["cases"][0] = crashed
    results = tmp_path / "perfsuite.json"
    results.write_text(json.dumps(tonight))
    assert main(["history", "record", str(results), "--dir", str(history)]) == 0
    assert len(list(history.glob("*/*.json"))) == 4
    (path,) = history.glob("*/2026-10-04_*.json")
    assert capsys.readouterr().out == f"wrote {path}\n"
    assert main(["history", "record", str(results), "--dir", str(history)]) == 0  # a rerun of the same job
    assert capsys.readouterr().out == f"{path}: this night's record is there already, unchanged\n"
    # Three quiet nights and tonight's crash: nothing for the tracker, and said so.
    assert main(["history", "track", "--dir", str(history), "--repo", "o/r", "--dry-run"]) == 0
    said = "nothing to open, comment on or close: 4 record(s) in "
    assert capsys.readouterr().out.startswith(said)
    # one night out: not yet a regression, but the crashed case fails tonight
    assert main(["history", "judge", "--dir", str(history)]) == 0
    assert main(["history", "judge", "--dir", str(history), "--results", str(results)]) == 1
    assert f"failed tonight: {crashed['case']}: worker killed" in capsys.readouterr().err
    tonight["cases"][0] = replay()["cases"][0]
    tonight["env"]["commit"] = "c" * 40
    tonight["env"]["date"] = "2026-10-05T02:00:00+00:00"
    results.write_text(json.dumps(tonight))
    assert main(["history", "record", str(results), "--dir", str(history)]) == 0
    markdown = tmp_path / "verdicts.md"
    assert main(["history", "judge", "--dir", str(history), "--markdown", str(markdown)]) == 1
    assert f"regression: {CASE} step time on cpu-" in capsys.readouterr().err
    assert markdown.read_text().splitlines()[2].startswith("| cpu-")
    assert main(["history", "track", "--dir", str(history), "--repo", "o/r", "--dry-run"]) == 0
    assert f"create: perf regression: {CASE} step time on cpu-" in capsys.readouterr().out


def test_a_corrupt_record_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cpu-x" / "2026-10-01_abc.json"
    bad.parent.mkdir()
    bad.write_text("{")
    assert main(["history", "judge", "--dir", str(tmp_path)]) == 2
    assert str(bad) in capsys.readouterr().err
    assert bad.exists()


def _metrics(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """A corruption of :data:`CASE`'s metrics in a record."""
    return lambda record: change(record["cases"][CASE]["metrics"])


CORRUPTIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "no night": (lambda r: r.pop("night"), "no 'night': a date (YYYY-MM-DD) is needed"),
    "a night that is a number": (lambda r: r.update(night=5), "night is 5, not a date"),
    "no fingerprint": (lambda r: r.pop("fingerprint"), "no 'fingerprint': an object naming its machine"),
    "cases as a list": (lambda r: r.update(cases=[1]), "cases is [1], not an object of each case's figures"),
    "metrics as a list": (
        lambda r: r["cases"][CASE].update(metrics=[1]),
        f"cases.{CASE}.metrics is [1], not an object",
    ),
    "a value that is a string": (
        _metrics(lambda m: m["loss"].update(value="x")),
        f"cases.{CASE}.metrics.loss is {{'value': 'x'",
    ),
    "a NaN value": (_metrics(lambda m: m["loss"].update(value=float("nan"))), "'value': nan"),
    "an integer past a float's range": (_metrics(lambda m: m["loss"].update(value=10**400)), "'value': 1000"),
    "a negative tolerance": (
        _metrics(lambda m: m["loss"].update(tolerance=-0.01)),
        "not a finite value with a tolerance of 0 or more",
    ),
    "a metric no gate has": (_metrics(lambda m: m.update(speed=m["loss"])), "metrics has 'speed', not one of"),
}


@pytest.mark.parametrize("corruption", [*CORRUPTIONS, "binary", "a directory", "unreadable"])
def test_every_command_that_reads_the_history_names_a_corrupt_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, corruption: str
) -> None:
    """judge, track and report --history: one line naming the file and what is wrong, exit 2, never a traceback."""
    history = tmp_path / "history"
    _night(history, 1)
    tonight = tmp_path / "tonight.json"
    tonight.write_text(json.dumps(_night(history, 2)))
    bad = sorted(history.glob("*/*.json"))[-1]
    if corruption in CORRUPTIONS:
        record = json.loads(bad.read_text())
        change, problem = CORRUPTIONS[corruption]
        change(record)
        bad.write_text(json.dumps(record))
    elif corruption == "binary":
        bad.write_bytes(b"\xff\xfe\x00")
        problem = "cannot be read ('utf-8' codec can't decode"
    elif corruption == "a directory":
        bad.unlink()
        bad.mkdir()
        problem = "a directory where a night's record belongs"
    else:  # as a runner's other user would find it (the tests may run as root, whom no mode stops)
        read = Path.read_text

        def refused(path: Path, *args: Any, **kwargs: Any) -> str:
            if path == bad:
                raise PermissionError(13, "Permission denied", str(path))
            return read(path, *args, **kwargs)

        monkeypatch.setattr(Path, "read_text", refused)
        problem = "cannot be read ([Errno 13] Permission denied"
    for argv in (
        ["history", "judge", "--dir", str(history)],
        ["history", "track", "--dir", str(history), "--repo", "o/r", "--dry-run"],
        ["report", str(tonight), "-o", str(tmp_path / "report"), "--history", str(history)],
    ):
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert (out, err.count("\n")) == ("", 1), err
        assert err.startswith(f"perfsuite: error: {bad}: "), err
        assert problem in err, err
    assert not (tmp_path / "report").exists()


def test_judge_reads_every_input_before_it_prints_or_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad --results is found before the verdicts are printed and --markdown is written, not after."""
    history, markdown, results = tmp_path / "history", tmp_path / "verdicts.md", tmp_path / "tonight.json"
    _night(history, 1)
    markdown.write_text("yesterday's verdicts\n")
    tonight = replay(date="2026-10-02T02:00:00+00:00")
    results.write_text(json.dumps(tonight | {"cases": [tonight["cases"][0] | {"case": 123}]}))
    assert (
        main(["history", "judge", "--dir", str(history), "--markdown", str(markdown), "--results", str(results)]) == 2
    )
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"perfsuite: error: {results}: cases[0]: case is 123 (int), not a string\n"
    assert markdown.read_text() == "yesterday's verdicts\n"


def test_tracking_says_in_one_line_that_it_needs_gh_or_that_gh_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    history, tools = tmp_path / "history", tmp_path / "bin"
    _night(history, 1)
    tools.mkdir()
    monkeypatch.setenv("PATH", str(tools))
    assert main(["history", "track", "--dir", str(history), "--repo", "o/r"]) == 2
    needs = "perfsuite: error: `perfsuite history track` needs the GitHub CLI (gh) on PATH: https://cli.github.com\n"
    assert capsys.readouterr() == ("", needs)
    gh = tools / "gh"
    gh.write_text("#!/bin/sh\necho 'HTTP 401: Bad credentials (https://api.github.com/graphql)' >&2\nexit 1\n")
    gh.chmod(0o755)
    assert main(["history", "track", "--dir", str(history), "--repo", "o/r"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err == "perfsuite: error: `gh issue list` failed: HTTP 401: Bad credentials (https://api.github.com/graphql)\n"
    )


def test_a_tiny_tolerance_is_kept_above_zero_and_read_back(tmp_path: Path) -> None:
    """A gate's limit far below 1e-6 (a memory tolerance of a few bytes against a peak of 141 GB) is
    written to six significant digits, not six decimals, so the night the writer keeps is one the
    reader takes."""
    from perfsuite.core.results import parse_results
    from perfsuite.history.records import night_record, read_record, write_record

    results = replay(only={"tiny-bert-vanilla"})
    for check in results["cases"][0]["checks"]:
        if check["metric"] == "peak memory":
            check["limit"] = 2.5e-8
    record = night_record(parse_results(results, "night"))
    assert record["cases"]["tiny-bert-vanilla"]["metrics"]["peak memory"]["tolerance"] == 2.5e-8
    assert read_record(write_record(record, tmp_path)[0])["cases"] == record["cases"]
