"""``perfsuite ab``: what a side is, overlays, and a short A/A run end to end (tests/test_bisect.py:
``perfsuite bisect``). The comparisons' false-alarm rate and sensitivity are measured in docs/ab-sensitivity.md,
not here (benchmarks/ab)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfsuite.ab import envs
from perfsuite.ab.envs import Env, EnvError, parse_env, resolve, split_spec
from perfsuite.cli import main
from perfsuite.core.spec import CaseSpec


def test_a_side_is_an_interpreter_a_venv_current_or_pins(tmp_path: Path) -> None:
    assert parse_env("current", name="base") == Env(label="current", python=sys.executable)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert isinstance(parse_env(str(venv), name="base"), Env)
    pins = parse_env("torch==2.12.0,accelerate==1.10.0", name="candidate")
    assert [str(r) for r in pins] == ["torch==2.12.0", "accelerate==1.10.0"]  # type: ignore[union-attr]
    assert split_spec("transformers>=4.46,<5,peft==0.13.2") == ["transformers>=4.46,<5", "peft==0.13.2"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nothing", "neither an interpreter"),
        ("./no/such/python", "neither an interpreter"),
        ("transformers==", "is not a requirement"),
    ],
)
def test_a_side_that_is_none_of_those_is_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(EnvError, match=message):
        parse_env(text, name="base")


def test_a_directory_without_an_interpreter_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EnvError, match="without bin/python"):
        parse_env(str(tmp_path), name="base")


def test_an_overlay_resolves_the_whole_installed_set() -> None:
    # transformers 4.x needs huggingface_hub < 1.0: resolving the whole set moves it too.
    moved = resolve(parse_env("transformers==4.57.6", name="candidate"))  # type: ignore[arg-type]
    names = {m.split("==")[0] for m in moved}
    assert "transformers==4.57.6" in moved
    assert "huggingface-hub" in names
    assert "torch" not in names


def test_an_old_deepspeed_that_adds_nvml_bindings_keeps_the_cpu_torch() -> None:
    """DeepSpeed up to 0.15 requires nvidia-ml-py (NVML's Python bindings): the overlay adds it and
    moves nothing of torch's, so it is no CUDA torch and the release can be tested."""
    moved = resolve(parse_env("deepspeed==0.14.4", name="good"))  # type: ignore[arg-type]
    assert "deepspeed==0.14.4" in moved
    assert any(m.startswith("nvidia-ml-py==") for m in moved)
    assert not any(m.startswith("torch==") for m in moved)


@pytest.mark.parametrize(
    ("dry_run", "refused"),
    [
        (["deepspeed==0.14.4", "nvidia-ml-py==13.615.71"], None),
        (["torch==2.9.1+cu128", "nvidia-cublas-cu12==12.8.4.1", "triton==3.5.1"], "torch==2.9.1+cu128, nvidia-cublas"),
        (["torch==2.12.0"], "would replace the installed torch (torch==2.12.0, ...); hold it with --with"),
    ],
)
def test_a_cuda_torch_is_told_by_what_torch_would_become(
    monkeypatch: pytest.MonkeyPatch, dry_run: list[str], refused: str | None
) -> None:
    import subprocess

    from perfsuite.ab import envs

    lines = "\n".join(f" + {m}" for m in dry_run)
    done = subprocess.CompletedProcess([], 0, stdout="", stderr=f"Resolved 90 packages\n{lines}\n")
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: done)
    monkeypatch.setattr(envs, "installed", lambda: {"torch": "2.13.0+cpu", "deepspeed": "0.18.8"})
    asked = parse_env("deepspeed==0.14.4", name="good")
    assert isinstance(asked, list)
    if refused is None:
        assert resolve(asked) == sorted(dry_run)
    else:
        with pytest.raises(EnvError, match=re.escape(refused)):
            resolve(asked)


@pytest.mark.parametrize("raised", [subprocess.TimeoutExpired(["uv"], 600), FileNotFoundError("uv")])
def test_uv_that_hangs_or_is_gone_is_a_side_that_cannot_be_set_up(
    monkeypatch: pytest.MonkeyPatch, raised: Exception
) -> None:
    from perfsuite.ab import envs

    def run(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(subprocess, "run", run)
    asked = parse_env("transformers==4.57.6", name="base")
    assert isinstance(asked, list)
    with pytest.raises(EnvError, match=r"^transformers==4\.57\.6: uv could not resolve it: "):
        envs.resolve(asked)


def test_with_holds_packages_on_every_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--with``: each side's pins resolve with the held requirements (the side's own pin of a package
    wins over a held one), and a plain ``current`` side becomes an overlay of them alone."""
    from perfsuite.ab import envs

    asked: list[list[str]] = []

    def overlay(requirements: list[Any], *, label: str) -> Env:
        asked.append([str(r) for r in requirements])
        return Env(label, "")

    monkeypatch.setattr(envs, "overlay", overlay)
    held = envs.parse_held("torch==2.13.0,numpy<2,deepspeed==0.18.8")
    assert envs.make_env("deepspeed==0.14.4", name="good", held=held).label == (
        "deepspeed==0.14.4 with torch==2.13.0, numpy<2, deepspeed==0.18.8"
    )
    assert envs.make_env("current", name="base", held=held[:2]).label == "current with torch==2.13.0, numpy<2"
    assert asked == [["deepspeed==0.14.4", "torch==2.13.0", "numpy<2"], ["torch==2.13.0", "numpy<2"]]
    assert envs.make_env("current", name="base") == Env(label="current", python=sys.executable)
    with pytest.raises(EnvError, match="--with 'current': give requirements"):
        envs.parse_held("current")
    with pytest.raises(EnvError, match="--with 'nothing': neither"):
        envs.parse_held("nothing")


def test_a_spec_that_conflicts_with_the_installed_stack_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # outside the environment's directory, where uv names the environment it uses
    with pytest.raises(EnvError, match="does not resolve with the installed stack") as refused:
        resolve(parse_env("transformers==4.57.6,huggingface-hub==1.0.0", name="candidate"))  # type: ignore[arg-type]
    assert "Using Python" not in str(refused.value)  # uv's line naming this environment's path: not the reason
    assert sys.prefix not in str(refused.value)


def test_uvs_reason_is_one_line_without_the_environment_it_used() -> None:
    from perfsuite.ab.envs import uv_reason

    stderr = (
        "Using Python 3.11.7 environment at: /home/someone/.venv\n"
        "warning: an index URL was ignored\n"
        "  × No solution found when resolving dependencies:\n"
        "  ╰─▶ Because you require a==1 and a==2, we can conclude that your requirements are unsatisfiable.\n"
    )
    assert uv_reason(stderr) == (
        "× No solution found when resolving dependencies: ╰─▶ Because you require a==1 and a==2, "
        "we can conclude that your requirements are unsatisfiable."
    )
    # A build's long log: what failed, then how it ended, each cut between words.
    build = "  × Failed to build `scikit-learn==1.0`\n" + "  │ compiling a module of the package\n" * 40
    build += "  ╰─▶ ModuleNotFoundError: No module named 'distutils.msvccompiler'\n"
    said = uv_reason(build)
    assert said.startswith("× Failed to build `scikit-learn==1.0` … ")
    assert said.endswith("╰─▶ ModuleNotFoundError: No module named 'distutils.msvccompiler'")
    assert len(said) <= 600
    assert said.split(" … ", 1)[1].split(" ", 1)[0] in build.split()  # a whole word, not the end of one


FAKE_UV = """#!/bin/sh
# Installs a made-up package into --target, as uv pip install --target would, and notes the call.
echo install >> "$(dirname "$0")/calls"
while [ "$1" != --target ]; do shift; done
mkdir -p "$2/made_up" && echo "VALUE = 1" > "$2/made_up/__init__.py"
"""


@pytest.fixture
def fake_overlays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Overlays built by a fake uv into a cache of this test's own; returns the fake's call log."""
    uv = tmp_path / "bin" / "uv"
    uv.parent.mkdir()
    uv.write_text(FAKE_UV)
    uv.chmod(0o755)
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(envs, "_uv", lambda: str(uv))
    monkeypatch.setattr(envs, "resolve", lambda requirements: ["made-up==1.0"])
    return tmp_path / "bin" / "calls"


def _built(calls: Path) -> tuple[int, Path]:
    side = envs.overlay(parse_env("made-up==1.0", name="candidate"), label="made-up==1.0")  # type: ignore[arg-type]
    return len(calls.read_text().split()), Path(side.path[0])


def test_an_intact_overlay_is_reused(fake_overlays: Path) -> None:
    builds, target = _built(fake_overlays)
    assert builds == 1
    (target / "made_up" / "__pycache__").mkdir()  # what a side's import writes
    (target / "made_up" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"planted")
    assert _built(fake_overlays) == (1, target)
    assert not (target / "made_up" / "__pycache__").exists()  # bytecode is dropped, never trusted


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda t: (t / "made_up" / "__init__.py").write_text("VALUE = 2"), id="a file changed"),
        pytest.param(lambda t: (t / "sitecustomize.py").write_text("import os"), id="a file added"),
        pytest.param(lambda t: (t / "made_up" / "__init__.py").unlink(), id="a file removed"),
        pytest.param(lambda t: (t / envs.MANIFEST).write_text("{"), id="the record spoiled"),
    ],
)
def test_an_overlay_whose_files_differ_from_its_record_is_built_again(fake_overlays: Path, tamper: Any) -> None:
    _, target = _built(fake_overlays)
    tamper(target)
    assert _built(fake_overlays) == (2, target)
    assert (target / "made_up" / "__init__.py").read_text() == "VALUE = 1\n"
    assert not (target / "sitecustomize.py").exists()


def test_a_marker_alone_makes_no_overlay(fake_overlays: Path) -> None:
    """A directory someone made under the overlay's key, with the marker earlier versions trusted."""
    _, target = _built(fake_overlays)
    for path in sorted(target.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (target / ".ready").write_text("made-up==1.0\n")
    (target / "made_up.py").write_text("VALUE = 'planted'")
    assert _built(fake_overlays) == (2, target)
    assert not (target / "made_up.py").exists()


def test_an_a_a_run_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --no-profile, which crashed ab with a traceback once: a CPU's peak memory comes from
    the profile step alone, so the first pair still runs it and memory is compared."""
    out = tmp_path / "ab.json"
    args = ["ab", "--base", "current", "--candidate", "current", "--models", "tiny-bert", "--strategies", "vanilla"]
    # One pair (each round boots both sides' forkservers anew); --jobs 1: the default, one lane.
    args += ["--pairs", "1", "--max-pairs", "1", "--steps", "4", "--jobs", "1"]
    args += ["--device", "cpu", "--no-profile", "--no-explain"]  # an undecided time would be explained
    code = main([*args, "--json", str(out), "--report", str(tmp_path)])
    assert code == 0
    payload = json.loads(out.read_text())
    assert payload["loss_seeds"] == 0  # two stacks: a curve from other weights would be the upgrade's, regressed
    (case,) = payload["cases"]
    # One pair cannot reach 95%: undecided, never a guess; memory and loss identical on one stack.
    assert case["verdict"] == "undecided"
    assert len(case["ratios"]) == 1
    assert case["memory"]["a"] == case["memory"]["b"] > 0
    assert case["loss"]["max_abs_diff"] == 0
    assert payload["sides"]["base"]["probe"]["libraries"]["torch"]["version"]
    # One process on one thread: a duet (both sides at once, one core each) where there are two cores.
    assert case["mode"] == ("duet" if len(os.sched_getaffinity(0)) >= 2 else "alternate")
    assert [len(steps) for steps in case["step_time_s"]["steps_a"] + case["step_time_s"]["steps_b"]] == [4] * 2
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert 'data-chart="pair-ratios"' in page
    err = capsys.readouterr().err
    assert "no regression" in err
    assert "first pair runs it" in err
    assert "+0.0%" in err  # peak memory A → B, compared
    # The suite's report command rebuilds the same page from the JSON file.
    assert main(["report", str(out), "-o", str(tmp_path / "again")]) == 0
    assert 'data-chart="pair-ratios"' in (tmp_path / "again" / "report.html").read_text()


@pytest.mark.parametrize("twice", [False, pytest.param(True, marks=pytest.mark.nightly)], ids=["ctrl-c", "timeout"])
def test_ctrl_c_writes_what_was_measured_and_exits_130(tmp_path: Path, twice: bool) -> None:
    """Ctrl-C reaches the whole foreground group (the sides' servers too): the pairs so far are
    written, the open case is undecided (interrupted), exit 130 (143 for SIGTERM) and no traceback. coreutils'
    ``timeout`` signals the command and then its group, so the command hears it twice: the second
    must not break the sides' shut-down (it did: a traceback and no JSON in 2 of 5 runs cut short
    by ``timeout`` here; this test failed 2 of 3 times before the fix)."""
    import signal
    import subprocess
    import time

    out = tmp_path / "ab.json"
    args = ["ab", "--base", "current", "--candidate", "current", "--models", "tiny-bert", "--strategies", "vanilla"]
    args += ["--pairs", "60", "--steps", "2", "--json", str(out)]
    with subprocess.Popen(  # its own group, as a terminal's foreground job is
        [sys.executable, "-m", "perfsuite", *args], stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        assert proc.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any("round 2:" in line for line in lines):
            lines.append(proc.stderr.readline())
        if twice:
            os.kill(proc.pid, signal.SIGTERM)
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(60)
        finally:
            if proc.poll() is None:  # never a 60-pair comparison left running
                os.killpg(proc.pid, signal.SIGKILL)
        err = "".join(lines) + proc.stderr.read()
        assert code == (143 if twice else 130), err  # the signal's own code, as every command exits
    assert "Traceback" not in err
    assert "perfsuite ab: interrupted: 1 case(s) ended before their time was decided" in err
    payload = json.loads(out.read_text())
    (case,) = payload["cases"]
    assert payload["interrupted"] == 1
    assert case["interrupted"]
    assert case["verdict"] == "undecided"
    assert len(case["ratios"]) >= 1  # the round before Ctrl-C, at least
    assert case["memory"]["a"] == case["memory"]["b"] > 0


def test_a_cpu_adam_build_per_deepspeed_and_torch_version_and_install() -> None:
    """DeepSpeed builds its CPU Adam against one torch's headers: two environments with the same
    versions at different places get directories of their own, or each would rebuild it over the other."""
    from perfsuite.ab.sides import extensions_dir

    def libraries(venv: str, deepspeed: str = "0.19.8", torch: str = "2.13.0+cpu") -> dict[str, Any]:
        site = f"/{venv}/lib/python3.11/site-packages"
        return {
            "deepspeed": {"version": deepspeed, "file": f"{site}/deepspeed/__init__.py"},
            "torch": {"version": torch, "file": f"{site}/torch/__init__.py"},
        }

    here = extensions_dir(libraries("venv-a"))
    assert extensions_dir(libraries("venv-a")) == here
    assert extensions_dir(libraries("venv-b")) != here
    assert extensions_dir(libraries("venv-a", deepspeed="0.18.0")) != here
    assert "deepspeed0.19.8-torch2.13.0+cpu-" in here


@pytest.mark.parametrize("server", ["current", "older"])
def test_a_sides_server_builds_and_loads_cpu_adam_in_that_sides_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str
) -> None:
    """A side's forkserver loads CPU Adam for its workers, so the side's directory is set in its server
    before anything boots a forkserver there, not only in each worker: built in the caller's
    directory, two sides of different torch installs would rebuild it over each other. A side whose
    perfsuite predates that request (a venv of its own) still runs, its workers told the directory."""
    from perfsuite.ab.envs import Env
    from perfsuite.ab.sides import Side
    from perfsuite.worker import serve

    requests = tmp_path / "requests.jsonl"
    script = tmp_path / "server.py"  # answers what a side's server answers, and keeps what it was asked
    script.write_text(
        "import json, os, sys\n"
        "for line in sys.stdin:\n"
        "    asked = json.loads(line)\n"
        f"    open({str(requests)!r}, 'a').write(json.dumps({{**asked, 'seen': os.environ.get('SEEN')}}) + '\\n')\n"
        "    if asked['op'] == 'exit':\n"
        "        break\n"
        "    probe = {'libraries': {'torch': {'version': '2.13.0', 'file': '/t'}, 'deepspeed': None}}\n"
        "    record = {'model': 'tiny-bert', 'strategy': 'vanilla', 'status': 'ok'}\n"
        "    answer = {'ok': True, 'probe': probe, 'record': record}\n"
        f"    if asked['op'] == 'environ' and {server == 'older'}:\n"
        "        answer = {'ok': False, 'error': 'unknown request ' + repr(asked['op'])}\n"
        "    print(json.dumps(answer), flush=True)\n"
    )
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    python.chmod(0o755)
    env = Env(label="fake", python=str(python), pins=("huggingface_hub==0.36.2",))
    probed = ["k", "huggingface-hub", "K"]  # the other side's pins: each once, however spelled
    side = Side("base", env, server_env={"SEEN": "this side's"}, probed=probed)
    assert side.run({"model": "tiny-bert", "strategy": "vanilla"}, 60.0).ok
    side.close()
    asked = [json.loads(line) for line in requests.read_text().splitlines()]
    assert [a["op"] for a in asked] == ["probe", "environ", "run", "exit"]
    assert asked[0]["seen"] == "this side's"  # the server's environment, from the start
    assert asked[0]["names"] == ["huggingface_hub", "k"]  # its own pins as spelled, then the other side's
    assert asked[1]["env"] == {"TORCH_EXTENSIONS_DIR": side.extensions}
    assert asked[2]["env"] == {"TORCH_EXTENSIONS_DIR": side.extensions}
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "elsewhere")  # restored after
    assert serve._answer({k: v for k, v in asked[1].items() if k != "seen"}) == {"ok": True}
    assert os.environ["TORCH_EXTENSIONS_DIR"] == side.extensions  # what its forkserver then inherits


def test_each_side_reads_the_versions_of_what_either_side_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock that adds a package on the candidate's side: the base reads its version too (this
    environment's), so the headline does not call it a change from None, nor a package no case ran."""
    from perfsuite.ab import comparison
    from perfsuite.ab.envs import Env

    made = {"base": Env("a==1", "python", pins=("a==1",)), "candidate": Env("a==2,k==3", "py", pins=("a==2", "k==3"))}
    probed: list[tuple[str, list[str]]] = []

    def side(name: str, env: Env, **kw: Any) -> None:
        probed.append((name, list(kw["probed"])))
        raise EnvError(f"{name}: stop here")

    monkeypatch.setattr(comparison, "make_env", lambda asked, name, held: made[name])
    monkeypatch.setattr(comparison, "Side", side)
    options = SimpleNamespace(base="", candidate="", held=(), trees=None, device_type="cpu", mode="auto", jobs=1)
    specs = [CaseSpec(model="tiny-bert", strategy="vanilla")]
    with pytest.raises(comparison.Failed, match="base: stop here"):
        comparison.AbRun.start(options, specs, lambda line: None)  # type: ignore[arg-type]
    assert probed == [("base", ["a", "a", "k"])]
