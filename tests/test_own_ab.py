"""A team's own code compared with itself at another commit, side by side on this machine
(``perfsuite ab --base-ref`` / ``--own``), and the commit that changed a case found
(``perfsuite bisect --own``), in a repository of the team's own (tests/own_history.py).

Each side's server runs in its own copy of the project and imports the team's modules from it: the
probe's file paths show which. Memory changes are decided at the first pair, so the per-push tests
compare one pair; nightly, a slower step is called *slower* and an unchanged commit no regression."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from own_history import CASE, KEPT, MODEL, PYPROJECT, SLOWER, commit, git, repository

from perfsuite.cli import main as cli
from perfsuite.core import registry

pytestmark = [pytest.mark.cpu, pytest.mark.slow]


def main(argv: list[str]) -> int:
    """``perfsuite`` as a command, the declarations it reads forgotten after it, as a process of its own would."""
    saved = registry.snapshot()
    try:
        return cli(argv)
    finally:
        registry.restore(saved)


ONE_CASE = ["--models", "convnet", "--strategies", "vanilla", "--engine", "conv_step", "--device", "cpu"]


def _ab(tmp_path: Path, *args: str, pairs: int = 1) -> tuple[int, dict[str, Any]]:
    out = tmp_path / f"ab-{len(list(tmp_path.glob('ab-*.json')))}.json"
    fast = ["--pairs", str(pairs), "--max-pairs", str(pairs), "--steps", "4"] if pairs == 1 else []
    code = main(["ab", *args, *ONE_CASE, *fast, "--stop-on-regression", "--json", str(out)])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_each_side_runs_its_own_commit_of_the_teams_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A commit that keeps a 4 MiB buffer in the step: against the commit before it the case regresses on
    memory, each side having imported the team's modules from its own tree; the working tree against the
    commit it is at regresses on nothing."""
    root = repository(tmp_path / "repo")
    first = commit(root, "Document the step", readme="The step is cross-entropy, clipped.")
    kept = commit(root, "Keep a buffer for the probe (#7)", change=KEPT)
    monkeypatch.chdir(root)
    # The project installed too (an older copy on the path, as `pip install .` leaves one): each side's
    # own tree comes first.
    shutil.copytree(root / "convnet", tmp_path / "installed" / "convnet")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "installed"), os.environ.get("PYTHONPATH")]))
    )

    code, payload = _ab(tmp_path, "--own", f"{first}..{kept}")
    assert code == 1, capsys.readouterr().err
    (case,) = payload["cases"]
    assert case["case"] == CASE
    assert case["verdict"] == "regressed"
    assert case["memory"]["b"] - case["memory"]["a"] == pytest.approx(4 * 2**20, rel=0.01)
    assert case["loss"]["max_abs_diff"] == 0  # the same model, batches and step: only the buffer
    assert payload["loss_seeds"] == 5  # the team's own code: other weights would be judged by convergence
    # Explained: the tensor the team's engine keeps, named, with its size.
    (moved,) = case["explanation"]["memory"]["categories"]
    (change,) = moved["changes"]
    assert (change["name"], change["b"]["nbytes"]) == ("engine.kept", 4 * 2**20)
    files = {name: side["probe"]["project"]["code"] for name, side in payload["sides"].items()}
    assert files["base"]["convnet.train"].endswith(f"{first}/convnet/train.py")
    assert files["candidate"]["convnet.train"].endswith(f"{kept}/convnet/train.py")
    # Each commit given by its sha: named by its short sha and subject.
    assert payload["sides"]["candidate"]["code"].startswith(f"{git(root, 'rev-parse', '--short', kept)} Keep")
    err = capsys.readouterr().err
    assert f"the project's code: {git(root, 'rev-parse', '--short', first)} Document the step → " in err
    assert "Keep a buffer for the probe (#7)" in err
    assert "perfsuite ab: the sides' code differs in 1 file(s): convnet/train.py" in err  # what is compared
    # The changed file's code ran in the case's step on both sides; the function the change touched is
    # the engine's __init__, which the build runs (watched too): no step calls it, the memory it keeps
    # is compared, so it is not among the code no case ran.
    assert [case["ran"][side]["files"]["convnet/train.py"] > 0 for side in "ab"] == [True, True]
    assert "  convnet/train.py:ConvEngine.__init__: called while the case was built (1 of 1 case(s))" in err
    assert "not seen in any case's" not in err

    # The working tree at that commit, against it: nothing moved (its time, after one pair, undecided;
    # explaining that is the first comparison's part).
    code, payload = _ab(tmp_path, "--base-ref", "HEAD", "--no-explain")
    assert code == 0, capsys.readouterr().err
    (case,) = payload["cases"]
    assert case["memory"]["a"] == case["memory"]["b"]
    # The working tree is copied beside the commit's tree, to a path of the same length.
    candidate = payload["sides"]["candidate"]["probe"]["project"]["code"]["convnet.train"]
    base = payload["sides"]["base"]["probe"]["project"]["code"]["convnet.train"]
    assert "/working-tree-" in candidate
    assert candidate.endswith("/convnet/train.py")
    assert len(candidate) == len(base)
    assert payload["sides"]["candidate"]["code"].startswith("the working tree (")
    assert "perfsuite ab: no file differs between the sides' code (an A/A)" in capsys.readouterr().err


def test_show_sides_names_the_code_each_side_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both sides run this environment, so what tells them apart is the project's code: each commit."""
    root = repository(tmp_path / "repo")
    commit(root, "Document the step", readme="The step is cross-entropy, clipped.")
    monkeypatch.chdir(root)
    assert main(["ab", "--base-ref", "HEAD^1", "--show-sides", *ONE_CASE]) == 0
    parent, head = (git(root, "log", "-1", "--format=%h %s", ref) for ref in ("HEAD^1", "HEAD"))
    assert capsys.readouterr().out.splitlines() == [
        f"base: current, the project's code: HEAD^1 ({parent})",
        f"candidate: current, the project's code: the working tree ({head})",
    ]
    assert main(["ab", "--own", "HEAD^1...HEAD", "--show-sides", *ONE_CASE]) == 0
    assert capsys.readouterr().out.splitlines() == [  # the merge base: by its short sha and subject alone
        f"base: current, the project's code: {parent}",
        f"candidate: current, the project's code: HEAD ({head})",
    ]
    # A working tree mid-edit has no say in a comparison of two commits, even on the path (an editable
    # install): where it is the candidate, it does.
    (root / "pyproject.toml").write_text(PYPROJECT.replace("convnet.model:build", "convnet.model:buildx"))
    (root / "convnet" / "model.py").write_text("raise ImportError('mid-edit')\n")
    monkeypatch.syspath_prepend(str(root))
    path = list(sys.path)
    assert main(["ab", "--own", "HEAD^1..HEAD", "--show-sides", *ONE_CASE]) == 0
    assert sys.path == path
    capsys.readouterr()
    assert main(["ab", "--base-ref", "HEAD^1", "--show-sides", *ONE_CASE]) == 2
    assert "tool.perfsuite.models.convnet.factory: convnet.model" in capsys.readouterr().err
    # A commit that declares a module it does not hold (only the working tree does, on the path) is
    # refused, named by the commit, not by its removed copy.
    (root / "extra_convnet.py").write_text(MODEL)
    (root / "pyproject.toml").write_text(PYPROJECT.replace("convnet.model:build", "extra_convnet:build"))
    git(root, "add", "pyproject.toml")
    git(root, "commit", "-q", "-m", "Build from extra")
    assert main(["ab", "--own", "HEAD^1..HEAD", "--show-sides", *ONE_CASE]) == 2
    said = capsys.readouterr().err
    short = git(root, "rev-parse", "--short", "HEAD")
    assert f"HEAD ({short} Build from extra): pyproject.toml: tool.perfsuite.models.convnet.factory: " in said
    assert sys.path == path


def test_the_pull_request_adopting_perfsuite_compares_with_a_base_that_has_no_pyproject(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repository that had no pyproject.toml before the pull request declaring its models: the base
    declares nothing (its copy gets an empty one), so the case is new there, not a side that cannot be tested."""
    monkeypatch.chdir(repository(tmp_path / "repo", before=True))
    assert main(["ab", "--base-ref", "HEAD^1", "--show-sides", *ONE_CASE]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.splitlines()[0].startswith("base: current, the project's code: HEAD^1 (")


@pytest.mark.nightly
def test_the_adopting_pull_requests_cases_are_new_and_its_report_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the pull-request workflow runs, on the pull request adopting perfsuite: exit 0, every case new."""
    monkeypatch.chdir(repository(tmp_path / "repo", before=True))
    out = tmp_path / "ab.json"
    one_pair = ["--pairs", "1", "--max-pairs", "1", "--steps", "4", "--no-explain", "--json", str(out)]
    code = main(["ab", "--base-ref", "HEAD^1", *ONE_CASE, *one_pair, "--report", str(tmp_path / "report")])
    assert code == 0, capsys.readouterr().err
    (case,) = json.loads(out.read_text())["cases"]
    assert case["verdict"] == "new"
    assert "nothing compared: 1 new" in (tmp_path / "report" / "summary.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--base-ref", "no-such-branch"], "--base-ref: 'no-such-branch' is not a commit of this repository"),
        (["--own=--output=x..HEAD"], "is not a git revision"),
        (["--base-ref", "HEAD", "--own", "HEAD..HEAD"], "give one of --pins, --base-ref and --own"),
        (["--base-ref", "HEAD", "--pins", "HEAD^1..HEAD"], "give one of --pins, --base-ref and --own"),
    ],
)
def test_a_revision_git_cannot_read_is_one_line_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    root = repository(tmp_path / "repo")
    monkeypatch.chdir(root)
    assert main(["ab", *args, *ONE_CASE]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert "setting up" not in err


@pytest.mark.parametrize("end", ["--good", "--bad"])
def test_bisect_own_names_the_end_that_is_no_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], end: str
) -> None:
    monkeypatch.chdir(repository(tmp_path / "repo"))
    ends = {"--good": "HEAD", "--bad": "HEAD", end: "no-such-branch"}
    args = ["bisect", "--own", *(x for pair in ends.items() for x in pair), "--case", "convnet-vanilla-conv_step"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"--own {end}: 'no-such-branch' is not a commit of this repository" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "explained",  # every push explains the same buffer in `ab --own` (above)
    [pytest.param(False, id="answer"), pytest.param(True, id="explained", marks=pytest.mark.nightly)],
)
def test_bisect_own_names_the_commit_that_changed_the_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], explained: bool
) -> None:
    """Three commits after the good one: documentation, the buffer (#7), more documentation; the
    answer, and explained, why."""
    root = repository(tmp_path / "repo")
    good = git(root, "rev-parse", "HEAD")
    commit(root, "Document the step", readme="The step is cross-entropy, clipped.")
    kept = commit(root, "Keep a buffer for the probe (#7)", change=KEPT)
    commit(root, "Document the buffer", readme="It keeps a buffer.")
    # The working tree mid-edit, its declaration and code broken: no commit bisected holds either.
    (root / "pyproject.toml").write_text(PYPROJECT.replace("convnet.model:build", "convnet.model:buildx"))
    (root / "convnet" / "model.py").write_text("raise ImportError('mid-edit')\n")
    monkeypatch.chdir(root)
    out = tmp_path / "bisect.json"
    code = main(
        ["bisect", "--own", "--good", good, "--bad", "HEAD", "--case", CASE, "--metric", "memory"]
        + ["--steps", "4", "--json", str(out)]
        + ([] if explained else ["--no-explain"])
    )
    err = capsys.readouterr().err
    assert code == 0, err
    short = git(root, "rev-parse", "--short", kept)
    assert f"perfsuite: the first bad commit is {short} Keep a buffer for the probe (#7)" in err
    found = json.loads(out.read_text())
    assert found["first_bad"] == short
    assert found["first_bad_described"] == f"{short} Keep a buffer for the probe (#7)"
    assert {step["judgement"] for step in found["steps"]} <= {"good", "bad"}
    if not explained:
        assert "perfsuite: why: " not in err
        return
    # and why, against the commit before it: the tensor its step keeps, by where it is held
    why = err[err.index("perfsuite: why: ") :]
    assert "new other engine.kept (float32 (1024, 1024), 4.00 MiB)" in why, why
    assert found["explanation"]["memory"]["categories"][0]["category"] == "other"


@pytest.mark.nightly
def test_bisect_own_names_the_commit_whose_run_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bad end's step raises where the good end's runs: the commit that made it raise is found,
    one pair a point, and the answer names its error (the time, memory and loss searches called such
    an end *cannot test*, exit 3)."""
    root = repository(tmp_path / "repo")
    good = git(root, "rev-parse", "HEAD")
    commit(root, "Document the step", readme="The step is cross-entropy, clipped.")
    raising = commit(root, "Check clipping", change=("        # STEP\n", "        raise RuntimeError('not clipped')\n"))
    commit(root, "Document the check", readme="It checks clipping.")
    monkeypatch.chdir(root)
    out = tmp_path / "bisect.json"
    code = main(
        ["bisect", "--own", "--good", good, "--bad", "HEAD", "--case", CASE, "--steps", "4", "--json", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    short = git(root, "rev-parse", "--short", raising)
    assert f"perfsuite: the first bad commit is {short} Check clipping" in err, err
    assert f"its run fails ({short}: RuntimeError: not clipped" in err
    found = json.loads(out.read_text())
    assert (found["metric"], found["first_bad"]) == ("failure", short)


@pytest.mark.nightly
@pytest.mark.alone  # its verdicts are on time
def test_a_slower_step_is_called_slower_and_an_unchanged_commit_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pull request's verdict: three matmuls a step for a diagnostic make both cases slower (their
    loss as before, their memory at most the diagnostic's tensors more); a commit that changes only
    documentation is no regression, each case same or, where its pairs are too noisy, undecided."""
    root = repository(tmp_path / "repo")
    docs = commit(root, "Document the step", readme="The step is cross-entropy, clipped.")
    slower = commit(root, "Log a probe each step", change=SLOWER)
    monkeypatch.chdir(root)
    both = ["--models", "convnet", "--strategies", "vanilla,grad_accum", "--engine", "conv_step", "--device", "cpu"]
    out = tmp_path / "slower.json"
    code = main(["ab", "--own", f"{docs}..{slower}", *both, "--json", str(out)])
    assert code == 1, capsys.readouterr().err
    cases = json.loads(out.read_text())["cases"]
    assert {c["case"]: c["time"]["verdict"] for c in cases} == {
        CASE: "slower",
        "convnet-grad_accum-conv_step": "slower",
    }
    assert all(c["loss"]["max_abs_diff"] == 0 for c in cases)
    # The diagnostic's probe and a product (576 KiB each) are live at the step's peak where the peak
    # falls inside the step (grad_accum's does: +384 KiB there); no more than those two, and vanilla's
    # peak, elsewhere, does not move.
    moved = {c["case"]: c["memory"]["b"] - c["memory"]["a"] for c in cases}
    assert moved[CASE] == 0
    assert 0 <= moved["convnet-grad_accum-conv_step"] <= 2 * 384 * 384 * 4
    out = tmp_path / "same.json"
    assert main(["ab", "--own", f"{docs}~1..{docs}", *both, "--json", str(out)]) == 0
    # Never slower or faster. Same where its pairs hold still: convnet-vanilla's did not on a 2-core
    # AVX2 host (its step 5.5-10 ms from one forkserver to the next, the pairs' log ratio sd 0.23, where
    # grad_accum's was 0.013), and 60 pairs left it undecided, B/A 0.977 [0.889, 1.040]: what it is.
    verdicts = {c["case"]: c["time"]["verdict"] for c in json.loads(out.read_text())["cases"]}
    assert verdicts["convnet-grad_accum-conv_step"] == "same"
    assert verdicts[CASE] in ("same", "undecided")


@pytest.mark.nightly
def test_a_pull_request_that_adds_a_model_gets_its_figures_and_fails_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The working tree declares a second model the commit does not: its case is *new*, never asked of the
    base, run once on the candidate for its figures; the case both declare is compared as before, and
    the comparison exits 0 (nothing regressed), where it was *cannot test*."""
    root = repository(tmp_path / "repo")
    wide = '[tool.perfsuite.models.convnet_wide]\nfactory = "convnet.model:build"\nbatch = "convnet.model:make_batch"\n'
    wide += "batch_size = 16\ntiny = true\nfactory_args = {channels = 32}\n\n[tool.perfsuite.engines.conv_step]"
    (root / "pyproject.toml").write_text(PYPROJECT.replace("[tool.perfsuite.engines.conv_step]", wide))
    monkeypatch.chdir(root)
    out = tmp_path / "new.json"
    both = ["--models", "convnet,convnet_wide", "--strategies", "vanilla", "--engine", "conv_step", "--device", "cpu"]
    one_pair = ["--pairs", "1", "--max-pairs", "1", "--steps", "4", "--no-explain", "--json", str(out)]
    assert main(["ab", "--base-ref", "HEAD", *both, *one_pair]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    cases = {c["case"]: c for c in json.loads(out.read_text())["cases"]}
    added = cases["convnet_wide-vanilla-conv_step"]
    assert (added["verdict"], added["new"], added["error"]) == ("new", "model 'convnet_wide'", None)
    assert added["memory"]["a"] is None
    assert added["memory"]["b"] > cases[CASE]["memory"]["b"]
    assert len(added["loss"]["b"]) == len(cases[CASE]["loss"]["b"])
    assert not added["loss"]["a"]
    assert not added["ratios"]
    assert cases[CASE]["verdict"] != "cannot test"
    assert cases[CASE]["ratios"]
    assert "convnet_wide-vanilla-conv_step is new: the base's code does not declare model 'convnet_wide'" in err
    assert (
        "convnet_wide-vanilla-conv_step: new: the base's code does not declare model 'convnet_wide'; the candidate"
        in err
    )


@pytest.mark.nightly
def test_a_gate_failure_under_pytest_is_explained_against_the_commit_of_its_baseline(tmp_path: Path) -> None:
    """Baselines recorded and committed with the code; then the step keeps a buffer, not committed:
    ``pytest --perfsuite-explain`` runs the case at that commit beside the working tree and names it."""
    import subprocess
    import sys

    from perfsuite.cli.scaffold import template

    root = repository(tmp_path / "repo")
    (root / "tests").mkdir()
    (root / "tests" / "test_perfsuite.py").write_text(template("test_perfsuite.py"))
    # Memory and loss are what this test is about; a tiny step's time on a busy machine is not.
    with (root / "pyproject.toml").open("a") as pyproject:
        pyproject.write('\n[tool.perfsuite.overrides."cpu/*"]\ntime_floor = 1.0\nmax_refresh_spread = 10.0\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)

    refresh = run(
        "-m", "perfsuite", "baselines", "refresh", "-k", CASE, "--repeats", "1", "--tests", "tests/test_perfsuite.py"
    )
    assert refresh.returncode == 0, refresh.stdout + refresh.stderr
    recorded = commit(root, "Baselines")
    (root / "convnet" / "train.py").write_text((root / "convnet" / "train.py").read_text().replace(*KEPT))
    gated = run("-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "--perfsuite-explain", "-k", CASE)
    out = gated.stdout + gated.stderr
    assert gated.returncode == 1, out
    # Recorded on uncommitted changes (the overrides) and an untracked file (the test), committed with the
    # baselines: that commit, not the one recorded, holds the code the baselines ran.
    assert (
        f"explain: against the baseline's code at {recorded[:12]} (the commit that last changed its baseline file, "
        "the baseline recorded on uncommitted changes, new files not yet tracked), run beside this one:"
    ) in out, out
    assert "explain: the code differs from it in 1 file(s): convnet/train.py" in out, out
    assert "new other engine.kept (float32 (1024, 1024), 4.00 MiB)" in out, out


def test_own_says_uncommitted_changes_are_in_neither_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--own compares two commits; a working tree with changes not committed is in neither, and
    --base-ref is what compares it: said in the line that says what differs."""
    from perfsuite.ab.own import differing_code

    root = repository(tmp_path / "repo")
    commit(root, "Document the step", readme="The step is cross-entropy, clipped.")
    monkeypatch.chdir(root)
    head = git(root, "rev-parse", "HEAD")
    assert differing_code(["HEAD^1", head])[0] == "perfsuite ab: the sides' code differs in 1 file(s): README.md"
    (root / "README.md").write_text("Not committed yet.\n")
    said = "; the working tree's uncommitted changes are in neither (--base-ref compares them)"
    assert differing_code(["HEAD^1", head])[0].endswith(f"README.md{said}")
    compared = differing_code(["HEAD", None])[0]  # --base-ref: the working tree is the candidate
    assert compared.startswith("perfsuite ab: the sides' code differs")
    assert said not in compared
