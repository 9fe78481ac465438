"""The perfsuite command: argument errors, listing, and a real run to JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.core.engines import ENGINES
from perfsuite.core.models import MODELS
from perfsuite.core.strategies import STRATEGIES


def _perfsuite(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfsuite", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize(
    ("option", "value", "message", "valid"),
    [
        ("--models", "tiny-bert,bert-huge", "unknown model 'bert-huge'", list(MODELS)),
        ("--strategies", "vanilla,fp8", "unknown strategy 'fp8'", list(STRATEGIES)),
        ("--engine", "loop,keras", "unknown engine 'keras'", list(ENGINES)),
    ],
)
def test_unknown_name_lists_valid_ones(
    capsys: pytest.CaptureFixture[str], option: str, value: str, message: str, valid: list[str]
) -> None:
    assert main(["run", option, value]) == 2
    err = capsys.readouterr().err
    assert message in err
    for name in valid:
        assert name in err


def test_refresh_outside_a_checkout_says_where_to_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["baselines", "refresh", "-k", "tiny-bert"]) == 2
    assert "no matrix test at tests/test_matrix.py; run this from the repository's root" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").write_text('[tool.perfsuite]\ntests = "tests/test_perf.py"\n')
    assert main(["baselines", "refresh", "-k", "tiny-bert"]) == 2
    said = "no matrix test at tests/test_perf.py ([tool.perfsuite] tests in pyproject.toml); run this from"
    assert said in capsys.readouterr().err
    # From a directory inside the project, the project's test, from its root.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_perf.py").write_text("")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    selected: list[list[str]] = []

    def selects_nothing(selection: list[str]) -> bool:
        selected.append(selection)
        return True

    monkeypatch.setattr("perfsuite.cli.baselines._selects_nothing", selects_nothing)
    assert main(["baselines", "refresh", "-k", "nothing"]) == 2
    assert Path(selected[0][0]) == Path("..") / "tests" / "test_perf.py"


def test_list_shows_both_registries(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in MODELS)
    assert all(name in out for name in STRATEGIES)


@pytest.mark.cpu
def test_run_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = _perfsuite(
        "run",
        "--models",
        "tiny-bert",
        "--strategies",
        "vanilla,grad_ckpt",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--json",
        str(out),
        "--report",
        str(tmp_path / "report"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the report beside the table: both cases charted, each compared with its committed baseline
    page = (tmp_path / "report" / "report.html").read_text()
    assert page.count('data-chart="loss"') == 1
    assert "tiny-bert-grad_ckpt" in (tmp_path / "report" / "summary.md").read_text()
    # what the report's headline counts, the terminal says, with what the run's exit code does not count
    compared = "perfsuite run compared 2 of 2 case(s) with their baselines as the gate would: "
    assert compared in proc.stdout
    assert "its exit code does not count them (pytest gates)" in proc.stdout
    assert compared in (tmp_path / "report" / "summary.md").read_text()
    assert compared in page
    assert "tiny-bert" in proc.stdout
    assert "grad_ckpt" in proc.stdout
    assert "memory %" in proc.stdout
    assert "2 cases: 2 ok, 0 skipped, 0 failed" in proc.stdout
    report = json.loads(out.read_text())
    assert report["schema_version"] == 1
    env = report["env"]
    assert env["versions"]["torch"]
    assert env["versions"]["transformers"]
    assert env["device"]["type"] == "cpu"
    assert {"python", "cuda", "driver", "device", "versions"} <= env.keys()
    vanilla, ckpt = report["cases"]
    for case in (vanilla, ckpt):
        for key in (
            "model",
            "strategy",
            "status",
            "error",
            "num_parameters",
            "model_config",
            "batch_size",
            "seq_len",
            "steps",
            "step_time_s",
            "tokens_per_s",
            "padding_fraction",
            "peak_memory_bytes",
            "memory_breakdown_bytes",
            "loss",
        ):
            assert key in case, key
        assert case["status"] == "ok"
        assert case["error"] is None
        assert len(case["step_time_s"]["samples"]) == 2
        assert case["step_time_s"]["median"] > 0
        assert len(case["loss"]) == 3  # one per optimizer step: 1 warm-up + 2 timed
        assert set(case["memory_breakdown_bytes"]) >= {"parameters", "gradients", "optimizer_state", "activations"}
        assert case["num_parameters"] == vanilla["num_parameters"]
    assert ckpt["memory_breakdown_bytes"]["activations"] < vanilla["memory_breakdown_bytes"]["activations"]


def test_a_first_run_is_a_quick_set_and_all_is_the_matrix() -> None:
    from argparse import Namespace

    from perfsuite.cli.selection import matrix_selection
    from perfsuite.core.matrix import nightly_only

    args = Namespace(models=None, strategies=None, engine=None, all=False, every_push=False, world_size=1)
    quick = matrix_selection(args, "cpu")
    whole = matrix_selection(Namespace(**{**vars(args), "all": True}), "cpu")
    push = matrix_selection(Namespace(**{**vars(args), "every_push": True}), "cpu")
    assert len(quick) == 10
    assert {m for m, _, _, _ in quick} == {"tiny-bert"}
    assert {e for _, _, e, _ in quick} == {"loop", "trainer"}
    assert set(quick) < set(push) < set(whole)
    assert len(whole) > 100
    # --every-push: exactly the cases the CPU tier runs on every push, multi-rank ones included
    assert set(push) == {c for c in whole if not nightly_only(*c)}
    assert {m for m, _, _, _ in push} == {"tiny-bert", "tiny-gpt2", "tiny-t5", "tiny-llama"}
    assert any(ws == 2 for _, _, _, ws in push)


def test_models_alone_through_an_engine_that_launches_no_ranks_take_the_strategies_it_can_run() -> None:
    """Every registered strategy through --engine, but a case whose ranks are processes of their own
    runs through the loop engine only: through the Trainer (or a project's engine) those are left
    out, not refused as a whole."""
    from argparse import Namespace

    from perfsuite.cli.selection import matrix_selection
    from perfsuite.core.spec import CaseSpec

    args = Namespace(models=["tiny-bert"], strategies=None, engine=["loop", "trainer"], all=False, every_push=False)
    chosen = matrix_selection(Namespace(**vars(args), world_size=1), "cpu")
    loop = {s for _, s, e, _ in chosen if e == "loop"}
    trainer = {s for _, s, e, _ in chosen if e == "trainer"}
    assert {"ddp", "fsdp2", "zero2", "vanilla", "zero2_offload"} <= loop
    assert loop - trainer == {"ddp", "fsdp2"}  # DeepSpeed at one rank stays in the worker, a world of one
    for model, strategy, engine, ranks in chosen:
        CaseSpec(model=model, strategy=strategy, engine=engine, world_size=ranks)  # each one can be built
    two = matrix_selection(Namespace(**{**vars(args), "engine": ["loop"]}, world_size=2), "cpu")
    assert {s for _, s, _, _ in two} == {"ddp", "fsdp2", "zero2", "zero3", "zero2_offload", "zero3_offload"}
    with pytest.raises(ValueError, match="--engine trainer runs no case of 2 ranks"):  # said, not dropped
        matrix_selection(Namespace(**vars(args), world_size=2), "cpu")
    with pytest.raises(ValueError, match=r"tiny-bert-ddp through trainer: a case whose ranks are processes"):
        CaseSpec(model="tiny-bert", strategy="ddp", engine="trainer")


@pytest.mark.parametrize("flag", ["--all", "--every-push"])
def test_run_all_takes_no_selection(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", flag, "--models", "tiny-bert"]) == 2
    assert f"{flag} runs the matrix's cases; it takes no --models or --strategies" in capsys.readouterr().err
    assert main(["run", "--all", "--every-push"]) == 2
    assert "--all already holds --every-push's cases; give one of them" in capsys.readouterr().err


def test_run_trains_a_multi_rank_case_without_dropout_as_its_baseline_was() -> None:
    """`perfsuite run`'s multi-rank cases are the matrix's: without dropout (one mask per rank
    would make their loss and peak other than the baselines'), single-rank ones with it."""
    from perfsuite.cli import build_parser
    from perfsuite.cli.selection import select
    from perfsuite.core.spec import tier_spec

    def dropout(*argv: str) -> dict[str, bool]:
        specs, *_ = select(build_parser().parse_args(["run", "--device", "cpu", "--models", "tiny-bert", *argv]))
        return {spec.id: spec.dropout for spec in specs}

    assert dropout("--strategies", "ddp", "--world-size", "2") == {"tiny-bert-ddp-ws2": False}
    assert dropout("--strategies", "ddp,vanilla") == {"tiny-bert-ddp": True, "tiny-bert-vanilla": True}
    assert tier_spec("tiny-bert", "ddp", world_size=2).dropout is False


def test_run_times_a_cpu_case_on_the_threads_the_gate_times_it_on() -> None:
    """`perfsuite run`'s table and the CPU tier's gate time a case alike (one thread), unless told otherwise."""
    from perfsuite.cli import build_parser
    from perfsuite.cli.selection import select
    from perfsuite.core.spec import tier_spec

    def threads(*argv: str) -> set[int | None]:
        specs, *_ = select(build_parser().parse_args(["run", "--device", "cpu", "--models", "tiny-bert", *argv]))
        return {spec.threads for spec in specs}

    assert threads("--strategies", "vanilla,fp16") == {tier_spec("tiny-bert", "vanilla").threads} == {1}
    assert threads("--strategies", "vanilla", "--threads", "2") == {2}


def test_the_perfsuite_script_is_not_run_again_in_every_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """multiprocessing re-runs a main script in each process it starts, a package's ``__main__``
    never: the ``perfsuite`` script (a main module whose ``main`` is the command line's) is named
    as ``python -m perfsuite``; any other main is left as it is."""
    import types
    from multiprocessing import spawn

    from perfsuite import cli

    script = types.ModuleType("__main__")
    script.__file__ = "/usr/bin/perfsuite"
    script.main = cli.main  # type: ignore[attr-defined]  # what the generated script imports
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert spawn.get_preparation_data("worker")["init_main_from_path"] == "/usr/bin/perfsuite"
    cli._as_python_m()
    prepared = spawn.get_preparation_data("worker")
    assert prepared["init_main_from_name"] == "perfsuite.__main__"  # which a child skips
    assert "init_main_from_path" not in prepared

    other = types.ModuleType("__main__")
    other.__file__ = "/home/team/train.py"
    monkeypatch.setitem(sys.modules, "__main__", other)
    cli._as_python_m()
    assert spawn.get_preparation_data("worker")["init_main_from_path"] == "/home/team/train.py"


def test_a_reader_that_stops_reading_ends_the_command_quietly() -> None:
    """`perfsuite list | head -1`: the rest of what it prints has no reader; no traceback, exit 0."""
    with subprocess.Popen(
        [sys.executable, "-m", "perfsuite", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()  # before it writes a line
        err = proc.stderr.read()
        assert proc.wait(60) == 0, err
    assert "Traceback" not in err
    assert err == ""
