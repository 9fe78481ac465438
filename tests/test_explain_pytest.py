"""``pytest --perfsuite-explain``: a failure against a stored baseline explained against the baseline's
stack rebuilt (where its versions differ), else from one instrumented run of this stack, saying what
that cannot tell; nightly, end to end on tiny-bert with a buffer and a scaled loss injected."""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from perfsuite.core.check import Check
from perfsuite.core.explain.records import ExplainRecord, StackRow, StepFacts, StepProfile, TensorEntry
from perfsuite.core.explain.reference import alone_lines, aspects_failed, reference_pins
from perfsuite.core.provenance import run_facts
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import Tolerance
from perfsuite.session import explaining

HERE = Path(__file__).parent
CACHE = TensorEntry("buffer", "injected_cache", "float32", (13_107_200,), 50 * 2**20)
SPEC = CaseSpec(model="tiny-bert", strategy="vanilla", steps=2, warmup_steps=1)
BASELINE = {
    "provenance": {"versions": {"torch": "2.13.0+cpu", "accelerate": "1.10.0", "perfsuite": "0.0.1", "peft": None}},
    "memory": {"breakdown": {"buffers": 8192, "activations": 100}},
    "loss": [2.0, 1.9, 1.8],
    "spec": {"initial_weights": "xxh3_128:aa"},
}
RECORD = CaseRecord.from_json(
    {
        "model": "tiny-bert",
        "strategy": "vanilla",
        "status": "ok",
        "memory_breakdown_bytes": {"buffers": 8192 + 50 * 2**20, "activations": 100},
        "loss": [2.02, 1.92, 1.81],
    },
    "RECORD",
)
CHECKS = [Check("memory: buffers", False, "", "", "", "", "moved"), Check("loss", False, "", "", "", "", "parts")]


def test_a_loss_not_compared_is_explained_beside_what_failed() -> None:
    """Other initial weights leave the loss not gated; a case that failed on memory explains both."""
    uncompared = Check("loss", True, "weights aa", "weights bb", "not compared", "", "not gated", compared=False)
    failure = explaining.Failure(SPEC, BASELINE, RECORD, [CHECKS[0], uncompared], Tolerance())
    assert failure.what == ("memory", "loss")
    gated = Check("loss", True, "", "", "", "", "")
    assert explaining.Failure(SPEC, BASELINE, RECORD, [CHECKS[0], gated], Tolerance()).what == ("memory",)


def test_the_reference_is_the_baseline_s_versions_where_they_differ() -> None:
    now = {"torch": "2.13.0+cpu", "accelerate": "1.15.0", "perfsuite": "0.1.0", "peft": "0.13.2"}
    assert reference_pins(BASELINE["provenance"]["versions"], now) == ["accelerate==1.10.0"]  # type: ignore[index]
    assert reference_pins(now, now) == []
    assert aspects_failed(["step time", "memory: buffers"]) == ("time", "memory")
    assert aspects_failed(["peak memory", "loss"]) == ("memory", "loss")


def _alone_record() -> ExplainRecord:
    profiled = StepProfile(1, ("step", "aten::addmm"), (StackRow((0, 1), 3000.0, 48),))
    return ExplainRecord(
        "xxh3_128:aa", 10, profile=profiled, tensors=(CACHE, TensorEntry("buffer", "ids", "int64", (512,), 4096))
    )


def test_alone_it_names_the_tensor_the_size_of_the_change_and_says_what_it_cannot() -> None:
    lines = alone_lines(
        _alone_record(), ("time", "memory", "loss"), moved={"buffers": 50 * 2**20, "activations": 2**20},
        loss_then=BASELINE["loss"], loss_now=RECORD.loss, weights_then="xxh3_128:aa", loss_tolerance=(1e-3, 1e-4),  # type: ignore[arg-type]
    )  # fmt: skip
    assert lines == [  # the loss and memory first, as every explanation says them
        "loss: parts from the baseline's at step 0, from the same initial weights; "
        "gradients need a reference run to compare with",
        "memory: buffers +50.00 MiB, the size of buffer injected_cache float32 (13107200,) 50.00 MiB",
        "memory: activations +1.00 MiB: not in the inventory (they live within a step)",
        "time: this stack's heaviest ops: aten::addmm 3.00 ms/step (48 calls) (a baseline keeps no profile to diff)",
    ]
    other = alone_lines(_alone_record(), ("memory",), moved={"buffers": 3 * 2**20}, loss_then=[], loss_now=[],
                        weights_then=None, loss_tolerance=(0, 0))  # fmt: skip
    assert other == ["memory: buffers +3.00 MiB; its largest tensors now: buffer injected_cache float32 (13107200,) "
                     "50.00 MiB; buffer ids int64 (512,) 4.0 KiB"]  # fmt: skip


def test_the_same_versions_explain_from_one_run_of_this_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, Any]] = []

    def run_in_worker(spec: CaseSpec, *, timeout_s: float, target: Any) -> dict[str, Any]:
        asked.append(target.keywords["ask"])
        return {"status": "ok", "explain": _alone_record().as_json()}

    # The modules as the code under test imports them (another test's in-process pytest run may have
    # dropped them from sys.modules, and a dotted path would then reach the old ones).
    monkeypatch.setattr(importlib.import_module("perfsuite.worker.process"), "run_in_worker", run_in_worker)
    monkeypatch.setattr(explaining, "library_versions", lambda: BASELINE["provenance"]["versions"])  # type: ignore[index]
    lines = explaining.explain_failure(explaining.Failure(SPEC, BASELINE, RECORD, CHECKS, Tolerance()), timeout_s=60)
    assert asked == [{"profile_steps": 0, "trace": None, "grads_until": -1, "inventory": True}]
    assert lines[0].startswith(
        "explain: the baseline was recorded on this stack's versions, and the code it ran is not known here"
    )
    assert lines[1].startswith("loss: parts from the baseline's at step 0")
    assert "memory: buffers +50.00 MiB, the size of buffer injected_cache" in lines[2]
    assert lines[-1] == (
        "explain: to diff this code against a commit where it passed: perfsuite ab --base-ref REF "
        "--models tiny-bert --strategies vanilla --explain"
    )
    # The commit the baseline was recorded at, and a case's engine and ranks, in the command
    clean = {"commit": "0ca34e1bd6868f2a", "dirty": False}
    recorded = {**BASELINE, "provenance": {**BASELINE["provenance"], **clean}}  # type: ignore[dict-item]
    ranks = CaseSpec(model="tiny-bert", strategy="ddp", world_size=2, steps=2, warmup_steps=1, device="cpu")
    assert explaining._hint(ranks, recorded, None) == (
        "explain: to diff this code against the commit its baseline was recorded at: perfsuite ab --base-ref "
        "0ca34e1bd686 --models tiny-bert --strategies ddp --world-size 2 --device cpu --explain"
    )


def _repository(root: Path) -> tuple[Callable[..., str], Callable[[str], str]]:
    """A new git repository at ``root``: its ``git(*args)`` and ``committed(message)`` (everything, its hash)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def committed(message: str) -> str:
        git("add", "-A")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", message)
        return git("rev-parse", "HEAD")

    git("init", "-q")
    return git, committed


def test_a_baseline_is_diffed_against_the_commit_that_committed_its_file(tmp_path: Path) -> None:
    """Recorded before the code was committed (refresh, then commit), the recorded commit lacks the code
    under test, though git called the tree clean where the code was a new, untracked file: the commit
    that committed the baseline has it. A file changed since is no commit's."""

    git, committed = _repository(tmp_path)
    before = committed("before the model")
    path = tmp_path / "baselines" / "cpu" / "tiny-bert-vanilla.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")

    def recorded(dirty: bool) -> dict[str, Any]:
        return {**BASELINE, "provenance": {**BASELINE["provenance"], "commit": before, "dirty": dirty}}  # type: ignore[dict-item]

    for dirty in (True, False):  # False: the model a new file, untracked when the baseline was recorded
        hint = explaining._hint(SPEC, recorded(dirty), path)
        assert ("--base-ref REF" in hint) == dirty, hint  # not yet committed: no commit has the code
        assert ("--base-ref REF" not in hint) == (before[:12] in hint), hint  # clean: the commit recorded
    with_baseline = committed("the model and its baseline")
    for dirty in (True, False):
        assert f"--base-ref {with_baseline[:12]} --models tiny-bert" in explaining._hint(SPEC, recorded(dirty), path)
    assert explaining._hint(SPEC, recorded(True), path).startswith(
        "explain: to diff this code against the commit that last changed its baseline file, the baseline recorded "
        "on uncommitted changes: perfsuite ab --base-ref "
    )
    path.write_text('{"refreshed": true}')  # recorded again, not committed: the commit has the old one
    assert explaining._hint(SPEC, recorded(True), path).startswith(
        "explain: to diff this code against a commit where it passed (the baseline was recorded on uncommitted "
        "changes, and its file as it is now is not committed): perfsuite ab --base-ref REF "
    )


def test_a_commit_that_was_the_whole_code_is_preferred_to_the_file_s(tmp_path: Path) -> None:
    """Recorded on a clean commit with no untracked file, then more code committed before the baseline:
    the commit recorded is the code that ran; with a new file untracked, the baseline's commit has it."""

    git, committed = _repository(tmp_path)
    (tmp_path / "model.py").write_text("x = 1\n")
    ran = committed("the model")
    path = tmp_path / "baselines" / "cpu" / "tiny-bert-vanilla.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    facts = run_facts(tmp_path, aside=tmp_path / "baselines")
    assert (facts["commit"], facts["dirty"], facts["untracked"]) == (ran, False, False)  # the baselines aside
    assert facts["host"] == platform.node()  # a session's identity, with its date and commit (baselines pool)
    (tmp_path / "model.py").write_text("x = 2\n")
    later = committed("a later change, committed with the baseline")
    provenance = {**BASELINE["provenance"], "commit": ran, "dirty": False}  # type: ignore[dict-item]
    exact = explaining._hint(SPEC, {**BASELINE, "provenance": {**provenance, "untracked": False}}, path)
    assert exact.startswith(f"explain: to diff this code against the commit its baseline was recorded at: "
                            f"perfsuite ab --base-ref {ran[:12]} ")  # fmt: skip
    new_file = explaining._hint(SPEC, {**BASELINE, "provenance": {**provenance, "untracked": True}}, path)
    assert new_file.startswith("explain: to diff this code against the commit that last changed its baseline file, "
                               f"new files not yet tracked: perfsuite ab --base-ref {later[:12]} ")  # fmt: skip
    path.write_text('{"refreshed": true}')  # recorded again, not committed: no commit has the code the new files held
    assert explaining._hint(SPEC, {**BASELINE, "provenance": {**provenance, "untracked": True}}, path).startswith(
        "explain: to diff this code against a commit where it passed (the baseline was recorded on files git did "
        "not track, and its file as it is now is not committed): perfsuite ab --base-ref REF "
    )
    assert run_facts(tmp_path, aside=tmp_path / "baselines")["dirty"] is False  # the baselines' own change aside
    (tmp_path / "notes.txt").write_text("")
    assert run_facts(tmp_path, aside=tmp_path / "baselines")["untracked"] is True


def test_a_virtual_environment_or_results_file_git_does_not_ignore_is_no_code(tmp_path: Path) -> None:
    """``python -m venv .venv`` in a checkout (before Python 3.13 it writes no ``.gitignore`` there), or an
    earlier run's ``--perfsuite-json`` file or ``--report`` directory: neither is a change of the code nor
    copied with the working tree; a new module is both."""
    from perfsuite.ab.own import _copy_working_tree
    from perfsuite.core.provenance import files_differ, untracked
    from perfsuite.reports import write_report
    from perfsuite.reports.ab import marker

    root = tmp_path / "repo"
    root.mkdir()
    git, committed = _repository(root)
    (root / "model.py").write_text("x = 1\n")
    ran = committed("the model")
    site = root / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (site / "torch.py").write_text("")
    assert untracked(root) == []
    assert files_differ(root, ran) == []
    assert run_facts(root)["untracked"] is False
    # An earlier run's results file left in the checkout is no code either; a JSON file of the code's is.
    (root / "results.json").write_text(json.dumps({"schema_version": 2, "env": {}, "cases": []}))
    (root / "config.json").write_text(json.dumps({"hidden_size": 64}))
    assert untracked(root) == ["config.json"]
    (root / "config.json").unlink()
    # Nor is a --report directory's page and summary, written by perfsuite (ab's summary alone too,
    # as ab writes it without the report's extra); a page or summary of the project's own is code.
    write_report(root / "results.json", root / "ab")
    (root / "ab" / "traces").mkdir()
    (root / "ab" / "traces" / "tiny-bert-vanilla-base.pt.trace.json.gz").write_bytes(b"")  # an explanation's
    (root / "alone").mkdir()
    (root / "alone" / "summary.md").write_text(marker("cpu") + "\n## perfsuite ab verdict\n")
    (root / "docs").mkdir()
    (root / "docs" / "report.html").write_text("<!DOCTYPE html><html><head><title>ours</title></head></html>\n")
    (root / "docs" / "summary.md").write_text("# Our summary\n")
    assert untracked(root) == ["docs/report.html", "docs/summary.md"]
    assert files_differ(root, ran) == ["docs/report.html", "docs/summary.md"]
    shutil.rmtree(root / "docs")
    (root / "layers.py").write_text("")
    assert untracked(root) == ["layers.py"]
    assert files_differ(root, ran) == ["layers.py"]
    copied = _copy_working_tree(root, tmp_path / "copy", "test")
    assert sorted(p.relative_to(copied).as_posix() for p in copied.rglob("*") if p.is_file()) == [
        "layers.py",
        "model.py",
    ]  # neither the virtual environment nor the results file


def test_other_versions_rebuild_the_baseline_s_stack_beside_this_one(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    closed: list[str] = []
    preloads: list[dict[str, str]] = []

    class FakeSide:
        def __init__(self, name: str, env: str, server_env: dict[str, str]) -> None:
            self.name, self.env = name, env
            preloads.append(server_env)

        def explain(self, spec: dict[str, Any], ask: dict[str, Any], timeout_s: float) -> dict[str, Any]:
            tensors = (CACHE,) if self.env == "current" else ()
            first = 2.02 if self.env == "current" else 2.0
            steps = (StepFacts(first, "d", (1e-3,), {"w": 1.0}),)
            record = ExplainRecord("xxh3_128:aa", 10, steps=steps, tensors=tensors)
            return {"status": "ok", "explain": record.as_json()}

        def close(self) -> None:
            closed.append(self.env)

    def make_env(text: str, name: str) -> str:
        made.append(text)
        return text

    monkeypatch.setattr(importlib.import_module("perfsuite.ab.envs"), "make_env", make_env)
    monkeypatch.setattr(importlib.import_module("perfsuite.ab.sides"), "Side", FakeSide)
    monkeypatch.setattr(explaining, "library_versions", lambda: {"accelerate": "1.15.0", "torch": "2.13.0+cpu"})
    lines = explaining.explain_failure(explaining.Failure(SPEC, BASELINE, RECORD, CHECKS, Tolerance()), timeout_s=60)
    assert made == ["accelerate==1.10.0", "current"]
    assert closed == ["accelerate==1.10.0", "current"]
    # Each side's forkserver preloads what this case needs, not what the whole session's cases do
    # (a session with an offload case would have a rebuilt stack compile DeepSpeed's CPU Adam).
    from perfsuite.core.preloads import CPU_ADAM_ENV, ENV

    assert [(p[ENV], p[CPU_ADAM_ENV]) for p in preloads] == [("", "0"), ("", "0")]
    assert lines[0] == "explain: against the baseline's stack rebuilt (accelerate==1.10.0), run beside this one:"
    assert any(
        line.startswith("memory: buffers +50.00 MiB = 13.1 M elements × 4 B (float32): new buffer injected_cache")
        for line in lines
    )


@pytest.mark.parametrize("inside", [".", "services/team"])
def test_changed_code_runs_the_commit_that_holds_the_baseline_beside_the_working_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inside: str
) -> None:
    """The same versions, the project's code changed since the commit that committed the baseline: that
    commit's tree is A, a copy of the working tree B, as ``perfsuite ab --base-ref`` runs them (the
    project at the repository's top or in a directory of it); with the code as committed there is
    nothing to run beside this side, and the line says nothing recorded differs. A shallow clone cut
    at that commit does not know when the baseline's file changed: it runs nothing beside it."""
    top = tmp_path / "repo"
    project = top / inside
    path = project / "baselines" / "cpu" / f"{SPEC.id}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    (project / "pyproject.toml").write_text('[project]\nname = "team"\n')
    (project / "model.py").write_text("WIDTH = 4\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "m"]):
        subprocess.run(["git", *args], cwd=top, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=top, capture_output=True, text=True).stdout[:12]
    ran: list[tuple[str, str | None]] = []
    closed: list[str] = []

    class FakeSide:
        def __init__(self, name: str, env: Any, server_env: dict[str, str]) -> None:
            self.name, self.cwd = name, env.cwd
            assert not Path(env.cwd).is_relative_to(top)  # each side in a copy of its own
            ran.append((name, (Path(env.cwd) / "model.py").read_text() if env.cwd else None))

        def explain(self, spec: dict[str, Any], ask: dict[str, Any], timeout_s: float) -> dict[str, Any]:
            steps = (StepFacts(2.0, "d", (1e-3,), {"w": 1.0}),)
            tensors = (CACHE,) if self.name == "this side" else ()
            record = ExplainRecord("xxh3_128:aa", 10, steps=steps, tensors=tensors)
            return {"status": "ok", "explain": record.as_json()}

        def close(self) -> None:
            closed.append(self.name)
            assert Path(self.cwd).is_dir()  # stopped before its tree is removed

    monkeypatch.setattr(importlib.import_module("perfsuite.ab.sides"), "Side", FakeSide)
    monkeypatch.setattr(explaining, "library_versions", lambda: BASELINE["provenance"]["versions"])  # type: ignore[index]
    monkeypatch.setattr(explaining, "_alone", lambda failure, timeout_s: ["(one run alone)"])
    failure = explaining.Failure(SPEC, BASELINE, RECORD, CHECKS, Tolerance(), path, project)
    (project / "model.py").write_text("WIDTH = 8\n")  # the change under test, not committed
    lines = explaining.explain_failure(failure, timeout_s=60)
    base = f"the baseline's code at {head}"
    assert ran == [(base, "WIDTH = 4\n"), ("this side", "WIDTH = 8\n")]
    assert closed == [base, "this side"]
    assert lines[0] == f"explain: against {base} (the commit that last changed its baseline file), run beside this one:"
    assert lines[1] == f"explain: the code differs from it in 1 file(s): {Path(inside, 'model.py').as_posix()}"
    assert any(line.startswith("memory: buffers +50.00 MiB") for line in lines), lines
    (project / "model.py").write_text("WIDTH = 4\n")  # as committed: nothing to run beside it
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"")  # no change of the code
    assert explaining.explain_failure(failure, timeout_s=60) == [
        "explain: nothing the baseline records differs: this stack's versions, and this code (the commit that last "
        f"changed its baseline file, {head}); the change is the machine's, or something a baseline does not record; "
        "one instrumented run of this stack shows:",
        "(one run alone)",
    ]
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{top}", str(shallow)], check=True)
    cut = explaining.Failure(SPEC, BASELINE, RECORD, CHECKS, Tolerance(), shallow / path.relative_to(top))
    lines = explaining.explain_failure(cut, timeout_s=60)
    assert lines[0].startswith("explain: the baseline was recorded on this stack's versions, and the code it ran is")
    assert lines[-1].startswith(
        "explain: to diff this code against a commit where it passed (this clone's history is shallow: fetch it "
        "whole to find it): perfsuite ab --base-ref REF"
    )


@pytest.mark.nightly
def test_a_gate_failure_explained_end_to_end(pytester: pytest.Pytester) -> None:
    """A baseline recorded for tiny-bert vanilla; then a buffer of 50 MiB and a loss ×1.01 injected into
    every run (tests/side_injections): the failure's message names the buffer and where the loss parts."""
    pytester.makepyfile(test_matrix=(HERE / "test_matrix.py").read_text())
    pytester.makepyprojecttoml("[tool.perfsuite]\nbaselines = 'baselines'\n")
    args = ("-m", "cpu and not trainer", "-k", "tiny-bert-vanilla", "-p", "no:cacheprovider")
    pytester.runpytest_subprocess(*args, "--perfsuite-refresh").assert_outcomes(passed=1)
    injections = pytester.path / "side_injections"
    shutil.copytree(HERE / "side_injections", injections)
    pytester._monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(injections), os.environ.get("PYTHONPATH")]))
    )
    pytester._monkeypatch.setenv("PERFSUITE_SIDE_INJECT", "buffer,loss")
    result = pytester.runpytest_subprocess(*args, "--perfsuite-explain")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "explain: the baseline was recorded on this stack's versions" in text
    assert re.search(r"memory: buffers \+50\.\d\d MiB, the size of buffer injected_cache float32 \(13107200,\)", text)
    assert "loss: parts from the baseline's at step 0, from the same initial weights" in text
