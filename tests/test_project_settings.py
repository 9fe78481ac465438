"""``[tool.perfsuite]``'s settings (``baselines``, ``tests``, ``tolerance``, ``overrides``): a mistake is
one line naming the file and the key, from every command that reads them and from pytest (a usage
error), before anything runs or is written."""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.core.declaration import read_pyproject
from perfsuite.core.registry import DeclarationError
from perfsuite.worker import process

GATES = '[tool.perfsuite.overrides."cpu/*"]\ntime_floor = 0.15\ntime_retries = 2\n'

BAD = [
    ("[tool.perfsuite]\ntolerance = 5\n", "tool.perfsuite.tolerance must be a table, not int (5)"),
    ('[tool.perfsuite]\noverrides = "x"\n', "tool.perfsuite.overrides must be a table, not str ('x')"),
    ('[tool.perfsuite.overrides]\n"cpu/x" = 5\n', 'tool.perfsuite.overrides."cpu/x" must be a table, not int (5)'),
    ("[tool.perfsuite]\ntolerance = {loss = 5}\n", "tool.perfsuite.tolerance.loss must be a table, not int (5)"),
    ("[tool.perfsuite.tolerance.loss]\nfp32 = 5\n", "tool.perfsuite.tolerance.loss.fp32 must be a table"),
    ("[tool.perfsuite.tolerance.loss.fp16]\nrtol = 'x'\n", "loss.fp16]: rtol must be a finite number >= 0, not 'x'"),
    ("[tool.perfsuite]\nbaselines = 5\n", "tool.perfsuite.baselines must be a path (a string), not 5"),
    ("[tool.perfsuite]\ntests = 5\n", "tool.perfsuite.tests must be a path (a string), not 5"),
    ('[tool.perfsuite]\nbaselines = "notes.md"\n', "tool.perfsuite.baselines: {project}/notes.md is not a directory"),
    (GATES.replace("0.15", "-0.15"), '"cpu/*"]: time_floor must be a finite number >= 0, not -0.15'),
    (GATES.replace("0.15", "inf"), '"cpu/*"]: time_floor must be a finite number >= 0, not inf'),
    (GATES.replace("0.15", "nan"), '"cpu/*"]: time_floor must be a finite number >= 0, not nan'),
    (GATES.replace("0.15", '"0.15"'), "time_floor must be a finite number >= 0, not '0.15'"),
    (GATES.replace("= 2", "= 2.5"), '"cpu/*"]: time_retries must be a whole number from 0 to 10, not 2.5'),
    (GATES.replace("= 2", "= 1000000000"), "time_retries must be a whole number from 0 to 10, not 1000000000"),
    (GATES.replace("= 2", "= true"), "time_retries must be a whole number from 0 to 10, not True"),
    (GATES + "time_retry_pause_s = 86400\n", "time_retry_pause_s must be a finite number from 0 to 600, not 86400"),
    ("[tool.perfsuite.tolerance]\nrefresh_max_repeats = 0\n", "refresh_max_repeats must be a whole number from 1"),
    ("[tool.perfsuite.tolerance]\nmemory_atol_bytes = 1.5\n", "memory_atol_bytes must be a whole number >= 0"),
    (GATES.replace('"cpu/*"', '"tiny-bert-*"'), '"tiny-bert-*"]: the pattern has no "/"; an override\'s is'),
    (GATES.replace('"cpu/*"', '"cpu/[tiny"'), '"cpu/[tiny"]: the pattern has an unclosed "["'),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m[:60] for _, m in BAD])
def test_a_bad_setting_names_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "notes.md").write_text("a file")
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    with pytest.raises(DeclarationError) as info:
        read_pyproject(path)
    assert str(info.value).startswith(f"{path}: "), info.value
    assert message.format(project=tmp_path) in str(info.value)
    assert "\n" not in str(info.value)


def test_an_override_pattern_is_hardware_and_a_case_glob_that_can_match(tmp_path: Path) -> None:
    """A pattern without its hardware, or with a bracket left open, matched no case and was ignored; one
    that starts with "*" matches across the "/" (fnmatch's "*" does), and stays as it was."""
    path = tmp_path / "pyproject.toml"
    for pattern in ("tiny-bert-*", "cpu/[tiny", "*/tiny-[bg*"):
        path.write_text(GATES.replace("cpu/*", pattern))
        with pytest.raises(DeclarationError, match="the pattern has"):
            read_pyproject(path)
    for pattern in ("*", "*fp16*"):
        path.write_text(GATES.replace("cpu/*", pattern))
        assert pattern in read_pyproject(path)["overrides"]
    path.write_text('[tool.perfsuite]\nbaselines = "not-yet"\n' + GATES.replace("cpu/*", "*/tiny-[bg]*"))
    settings = read_pyproject(path)
    assert settings["baselines"] == "not-yet"  # no directory yet: a refresh makes it
    assert settings["overrides"]["*/tiny-[bg]*"]["time_retries"] == 2


def test_a_pyproject_that_cannot_be_read_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pyproject.toml"
    path.mkdir()
    with pytest.raises(DeclarationError, match=r"pyproject.toml: cannot read it: Is a directory$"):
        read_pyproject(path)
    path.rmdir()
    path.write_bytes(b'[tool.perfsuite]\nbaselines = "caf\xe9"\n')
    with pytest.raises(DeclarationError, match=r"pyproject.toml: not UTF-8 text \(byte 33\), as TOML must be$"):
        read_pyproject(path)

    def refused(self: Path, *args: object, **kwargs: object) -> str:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", refused)  # root reads any file: the refusal, simulated
    with pytest.raises(DeclarationError, match=r"pyproject.toml: cannot read it: Permission denied$"):
        read_pyproject(path)


COMMANDS = [
    ["list"],
    ["run"],
    ["run", "--report", "{tmp}/out"],
    ["report", "{tmp}/results.json", "-o", "{tmp}/out"],
    ["report", "{tmp}/results.json", "-o", "{tmp}/out", "--baselines", "{tmp}/baselines"],
    ["baselines", "refresh", "--device", "cpu"],
    ["ab", "--base", "current", "--candidate", "current"],
]
SETTINGS = [
    (GATES.replace("0.15", "-0.15"), '[tool.perfsuite.overrides."cpu/*"]: time_floor must be a finite number'),
    ("[tool.perfsuite]\ntolerance = 5\n", "tool.perfsuite.tolerance must be a table"),
    ('[tool.perfsuite]\nbaselines = "results.json"\n', "tool.perfsuite.baselines: {tmp}/results.json is not a"),
]


@pytest.mark.parametrize(("text", "message"), SETTINGS, ids=["negative floor", "tolerance 5", "baselines a file"])
@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_command_refuses_bad_settings_before_anything_runs(
    argv: list[str], text: str, message: str, refused: Callable[[list[str], str, str], None]
) -> None:
    refused(argv, text, message)


@pytest.mark.parametrize("argv", [c for c in COMMANDS if c[0] != "report"], ids=" ".join)
def test_every_command_that_reads_the_models_refuses_a_misspelt_key_before_anything_runs(
    argv: list[str], refused: Callable[[list[str], str, str], None]
) -> None:
    text = '[tool.perfsuite.models.team-tf]\nfactory = "teamml.models:build"\nbatch_sise = 2\n'
    refused(argv, text, "tool.perfsuite.models.team-tf: unknown key 'batch_sise'; valid: factory")


@pytest.fixture
def refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[[list[str], str, str], None]:
    """``refused(argv, text, message)``: with ``text`` as pyproject.toml, ``perfsuite argv`` exits 2
    saying ``message`` in one line, and runs and writes nothing."""
    return functools.partial(_refused_before_anything_runs, tmp_path=tmp_path, capsys=capsys, monkeypatch=monkeypatch)


def _refused_before_anything_runs(
    argv: list[str],
    text: str,
    message: str,
    *,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)

    def ran(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"bad settings got as far as running something: {args}")

    monkeypatch.setattr(process, "run_isolated", ran)
    monkeypatch.setattr(subprocess, "run", ran)
    monkeypatch.setattr(subprocess, "Popen", ran)
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "baselines").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_matrix.py").write_text("")  # what a refresh would run
    case = {"model": "tiny-bert", "strategy": "vanilla", "status": "failed", "error": "stopped"}
    (tmp_path / "results.json").write_text(json.dumps({"cases": [case]}))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code: object
    try:
        code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1, err
    assert err.startswith(f"perfsuite: error: {tmp_path / 'pyproject.toml'}: {message.format(tmp=tmp_path)}"), err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


MATRIX_TEST = (Path(__file__).parent / "test_matrix.py").read_text()


@pytest.mark.parametrize(
    ("pyproject", "args", "expected"),
    [
        ("[tool.perfsuite]\ntolerance = 5\n", [], "*pyproject.toml: tool.perfsuite.tolerance must be a table*"),
        (GATES.replace("= 2", "= 2.5"), [], '*"cpu/*"]: time_retries must be a whole number from 0 to 10, not 2.5'),
        ("", ["--perfsuite-baselines", "pyproject.toml"], "*--perfsuite-baselines pyproject.toml: not a directory"),
        ("", ["--perfsuite-refresh", "--perfsuite-baselines=pyproject.toml"], "*pyproject.toml: not a directory"),
    ],
    ids=["tolerance 5", "retries 2.5", "baselines a file", "refresh into a file"],
)
def test_pytest_stops_on_bad_settings_with_a_usage_error(
    pytester: pytest.Pytester, pyproject: str, args: list[str], expected: str
) -> None:
    pytester.makepyprojecttoml(pyproject)
    pytester.makepyfile(test_matrix=MATRIX_TEST)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", *args)
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert "Traceback" not in output
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    result.stderr.fnmatch_lines([f"ERROR: {expected}"])


def test_pytest_compares_with_no_baselines_directory_only_by_refusing(pytester: pytest.Pytester) -> None:
    """A ``--perfsuite-baselines`` that does not exist ran every case to fail each for want of its
    baseline; a refresh makes the directory."""
    pytester.makepyfile(test_matrix=MATRIX_TEST)
    compare = pytester.runpytest_subprocess("--collect-only", "-p", "no:cacheprovider", "--perfsuite-baselines=nowhere")
    assert compare.ret == pytest.ExitCode.USAGE_ERROR
    compare.stderr.fnmatch_lines(["ERROR: --perfsuite-baselines nowhere: no such directory (a refresh makes one)"])
    refresh = pytester.runpytest_subprocess(
        "--collect-only", "-q", "-p", "no:cacheprovider", "--perfsuite-refresh", "--perfsuite-baselines=nowhere"
    )
    assert refresh.ret == pytest.ExitCode.OK, refresh.stdout.str() + refresh.stderr.str()


def test_a_count_written_as_a_whole_float_is_the_integer_it_is() -> None:
    """TOML reads 1e6 as a float: a count of bytes or retries given so is taken, as an integer; 2.5 is not."""
    from perfsuite.core.tolerance import ConfigError, resolve_tolerance

    tolerance = resolve_tolerance(
        {"tolerance": {"memory_atol_bytes": 1e6, "time_retries": 2.0}}, hardware="cpu", case_id="c", precision="fp32"
    )
    assert (tolerance.memory_atol_bytes, tolerance.time_retries) == (1_000_000, 2)
    assert isinstance(tolerance.time_retries, int)
    with pytest.raises(ConfigError, match="time_retries must be a whole number"):
        resolve_tolerance({"tolerance": {"time_retries": 2.5}}, hardware="cpu", case_id="c", precision="fp32")
