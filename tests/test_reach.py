"""What a comparison's cases ran of the code that differs between its sides (the packages whose
versions differ, the project's own files that differ): the watch in a worker's profile step
(perfsuite.worker.reach), the answer per package or file (perfsuite.core.reach), and where a
comparison says it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfsuite.core.changed_code import python_files
from perfsuite.core.reach import (
    MOST_WATCHED,
    WATCH_ENV,
    Ask,
    Reach,
    described,
    reach,
    to_watch,
    unreached,
    unreached_said,
)
from perfsuite.core.record import PackageRun, StepRan


def _run(name: str, *, calls: int = 0, native: int = 0, version: str | None = "1.0", **more: Any) -> dict[str, Any]:
    fields = {"python_calls": calls, "native_calls": native, "has_code": True, **more}
    return PackageRun.from_json({"name": name, "version": version, **fields}, "test").to_json()


def _step(
    packages: list[Any],
    files: dict[str, int] | None = None,
    *,
    complete: bool = True,
    functions: dict[str, int] | None = None,
) -> dict[str, Any]:
    fields = {"packages": packages, "files": files or {}, "functions": functions or {}, "first_step": True}
    return {"complete": complete, **fields}


def _case(a: Any, b: Any, error: str | None = None) -> dict[str, Any]:
    return {"case": "c", "error": error, "ran": {"a": a, "b": b}}


def test_each_package_is_counted_over_the_cases_and_its_sides() -> None:
    cases = [
        _case(
            _step([_run("transformers", calls=640), _run("bitsandbytes")]),
            _step([_run("transformers", calls=650), _run("bitsandbytes")]),
        ),
        _case(
            _step([_run("transformers", calls=9), _run("bitsandbytes")]),
            _step([_run("transformers", calls=9), _run("bitsandbytes", native=3)]),
        ),
        _case(None, None),  # not watched: a side that could not say
    ]
    found = {r.name: r for r in reach(cases)}
    assert found["transformers"] == Reach("transformers", ("1.0", "1.0"), watched=2, ran=(2, 2), either=2)
    assert found["bitsandbytes"].ran == (0, 1)  # the candidate's step calls it, the base's does not
    assert (
        described(found["bitsandbytes"], 3)
        == "bitsandbytes 1.0 → 1.0: called in the watched steps of 1 of 3 case(s) (base 0, candidate 1)"
    )
    assert unreached(list(found.values())) == []


def test_a_package_no_step_ran_says_the_verdicts_say_nothing_of_it_and_where_it_would_run() -> None:
    cases = [
        _case(_step([_run("bitsandbytes", version="0.49.0")]), _step([_run("bitsandbytes", version="0.50.0")]))
        for _ in range(3)
    ]
    found = reach(cases)
    assert unreached(found) == ["bitsandbytes"]
    said = described(found[0], 3, device_type="cpu")
    assert said.startswith(
        "bitsandbytes 0.49.0 → 0.50.0: seen called in no case's step (of 3 watched); built-in strategies that use it:"
    )
    assert "adamw_8bit" in said
    assert "qlora" not in said  # the strategies that use it here: QLoRA needs a GPU
    assert said.endswith("(with an engine that applies them)")  # a file that does not say its engines
    assert "qlora" in described(found[0], 3, device_type="cuda")
    # Named with the compared engines that apply each: the Trainer maps no 8-bit Lion.
    hint = "; built-in strategies that use it: "
    assert described(found[0], 3, engines=["loop", "trainer"]).endswith(
        f"{hint}adamw_8bit (loop, trainer), lion_8bit (loop)"
    )
    trainer = described(found[0], 3, engines=["trainer"])
    assert trainer.endswith(f"{hint}adamw_8bit (trainer), lion_8bit (loop, not in this comparison)")
    assert described(found[0], 3, engines=["acme_step"]).endswith(  # a team's own engine may refuse them
        f"{hint}adamw_8bit, lion_8bit (if acme_step applies them)"
    )


def test_a_projects_recipes_are_named_apart_and_kept_for_a_report_rendered_without_its_code() -> None:
    """A team's recipe that needs the package is named after perfsuite's, as the project's: live, and
    from the comparison's file (``strategies_using``) where the project is not loaded (a pull request's
    comment); without that key (an older file) only this process's registry is known."""
    from perfsuite.core import registry
    from perfsuite.core.reach import strategies_using
    from perfsuite.core.strategies import STRATEGIES, Strategy, compose

    found = reach([_case(_step([_run("bitsandbytes", version="0.49.0")]), _step([_run("bitsandbytes")]))])
    saved = registry.snapshot()
    try:
        recipe = compose(STRATEGIES["adamw_8bit"], Strategy(name="b", batch_size=8), name="acme-8bit")
        registry.register_strategy(recipe)
        live = described(found[0], 1, engines=["loop"])
        kept = strategies_using("cpu", ["loop"])
    finally:
        registry.restore(saved)
    ours = "; the project's: acme-8bit (loop)"
    assert live.endswith(f"; built-in strategies that use it: adamw_8bit (loop), lion_8bit (loop){ours}"), live
    assert kept["bitsandbytes"]["project"] == {"acme-8bit": ["loop"]}
    assert "acme-8bit" not in kept["bitsandbytes"]["built-in"]
    assert described(found[0], 1, engines=["loop"], using=kept) == live
    assert ours not in described(found[0], 1, engines=["loop"])  # an older file: the registry's alone
    # With a team's engine beside perfsuite's, that it applies them only if it does is said once.
    mixed = strategies_using("cpu", ["loop", "acme_step"])
    mixed["bitsandbytes"]["project"] = {"acme-8bit": ["loop", "acme_step"]}
    assert described(found[0], 1, engines=["loop", "acme_step"], using=mixed).endswith(
        "; the project's: acme-8bit (loop, acme_step) (acme_step: if it applies them)"
    )


@pytest.mark.parametrize(
    ("a", "b", "said"),
    [
        # A wheel of native libraries alone: a step shows no call of it, whatever calls it.
        (
            _step([_run("nvidia-cudnn-cu12", has_code=False)]),
            _step([_run("nvidia-cudnn-cu12", has_code=False)]),
            "ships no code a step",
        ),
        # Neither side lists its installed files (no RECORD): its calls cannot be told.
        (_step([_run("legacy", has_code=None)]), _step([_run("legacy", has_code=None)]), "not seen: no side lists"),
        # A step that raised before its end may not have reached the code.
        (_step([_run("peft")], complete=False), _step([_run("peft")]), "not watched"),
        # Added by the candidate: the base has none, and its step is all the answer needs.
        (
            _step([_run("galore-torch", version=None, has_code=None)]),
            _step([_run("galore-torch")]),
            "seen called in no case",
        ),
    ],
)
def test_what_cannot_be_seen_is_not_called_unused(a: Any, b: Any, said: str) -> None:
    found = reach([_case(a, b)])
    assert said in described(found[0], 1)
    assert unreached(found) == (["galore-torch"] if said == "seen called in no case" else [])


def test_the_projects_changed_files_are_counted_and_named_without_versions() -> None:
    cases = [
        _case(_step([], {"acme/model.py": 12, "acme/prep.py": 0}), _step([], {"acme/model.py": 14, "acme/prep.py": 0}))
        for _ in range(2)
    ]
    found = {r.name: r for r in reach(cases)}
    assert described(found["acme/model.py"], 2) == "acme/model.py: called in the watched steps of 2 of 2 case(s)"
    assert described(found["acme/prep.py"], 2).startswith("acme/prep.py: seen called in no case's step (of 2 watched)")
    assert unreached(list(found.values())) == ["acme/prep.py"]


def test_the_functions_a_change_touches_are_counted_on_each_side_at_their_own_lines() -> None:
    from perfsuite.core.changed_code import MODULE_LEVEL, ChangedCode, ChangedFunction

    changed = ChangedCode(
        ("acme/model.py", "acme/engine.py", "acme/export.py"),
        (
            ChangedFunction("acme/model.py", "Net.forward", (12, 14)),  # moved down two lines
            ChangedFunction("acme/model.py", MODULE_LEVEL, (None, None)),
            ChangedFunction("acme/engine.py", "Engine.__init__", (None, 9)),  # added
            ChangedFunction("acme/export.py", MODULE_LEVEL, (None, None)),  # a new module nothing imports
        ),
        same=("acme/data.py",),  # its docstrings alone changed
    )
    files = {"acme/model.py": 40, "acme/engine.py": 5, "acme/export.py": 0}
    imported = ["acme/model.py", "acme/engine.py"]
    step_a = {**_step([], files, functions={"acme/model.py:12": 2}), "imported": imported}
    step_b = {**_step([], files, functions={"acme/model.py:14": 2, "acme/engine.py:9": 0}), "imported": imported}
    found = reach([_case(step_a, step_b)], changed)
    said = [described(r, 1) for r in found]
    module = "changed outside any function, which runs when the module is imported, not in a step"
    assert said == [
        "acme/model.py:Net.forward: called in the watched steps of 1 of 1 case(s)",
        f"acme/model.py (module level): {module} (imported in 1 of 1 case(s))",
        "acme/engine.py:Engine.__init__: seen called in no case's step (of 1 watched)",
        f"acme/export.py (module level): {module}; no case imported it (of 1 watched)",
        "acme/data.py: only comments, docstrings or layout changed: no code to watch",
    ]  # a file whose functions are named is not said again as a file
    assert unreached(found) == ["acme/engine.py:Engine.__init__"]


def test_what_only_the_build_ran_is_said_so_and_is_no_code_the_cases_missed() -> None:
    """An engine's ``__init__`` runs when the case is built: what it builds (a buffer kept) is in the
    figures, so it is not named among the code no case ran. Each side's build is read at that side's
    own line of the function."""
    from perfsuite.core.changed_code import ChangedCode, ChangedFunction

    changed = ChangedCode(
        ("acme/engine.py",),
        (
            ChangedFunction("acme/engine.py", "Engine.__init__", (8, 9)),
            ChangedFunction("acme/engine.py", "Engine.export", (20, 21)),
        ),
    )
    functions = {
        "a": {"acme/engine.py:8": 0, "acme/engine.py:20": 0},
        "b": {"acme/engine.py:9": 0, "acme/engine.py:21": 0},
    }
    built = {"a": {"acme/engine.py:8": 1, "acme/engine.py:20": 0}, "b": {"acme/engine.py:9": 1, "acme/engine.py:20": 4}}
    sides = [
        {
            **_step([_run("tokenizers")], {"acme/engine.py": 3}, functions=functions[side]),
            "built": {"functions": built[side]},
        }
        for side in "ab"
    ]
    found = reach([_case(sides[0], sides[1])], changed)
    assert [described(r, 1) for r in found] == [
        "tokenizers 1.0 → 1.0: seen called in no case's build or step (of 1 watched)",
        "acme/engine.py:Engine.__init__: called while the case was built (1 of 1 case(s)), seen in no watched step "
        "(of 1): what it left for the steps is in the memory and loss checks",
        # the candidate's build called what starts at the base's line of export: not export there
        "acme/engine.py:Engine.export: seen called in no case's build or step (of 1 watched)",
    ]
    assert unreached(found) == ["tokenizers", "acme/engine.py:Engine.export"]
    assert unreached_said(found) == "not seen in any case's build or step: tokenizers, acme/engine.py:Engine.export"
    # A side whose perfsuite watched the step alone: what is said is of the step alone.
    older = reach(
        [_case(sides[0], _step([_run("tokenizers")], {"acme/engine.py": 3}, functions=functions["b"]))], changed
    )
    assert described(older[0], 1) == "tokenizers 1.0 → 1.0: seen called in no case's step (of 1 watched)"
    assert older[1].built == 1


def test_what_the_build_ran_keeps_the_steps_blind_spots_and_an_incomplete_side_does_not_unwatch_builds() -> None:
    built = {"built": {"files": {"acme/engine.py": 2}}}
    compiled = {**_step([], {"acme/engine.py": 0}), **built, "blind": ["compiled"]}
    (found,) = reach([_case(compiled, compiled)])
    assert described(found, 1) == (
        "acme/engine.py: called while the case was built (1 of 1 case(s)), seen in no watched step (of 1); "
        "the watch was partly blind (compiled in 1): what it left for the steps is in the memory and loss checks"
    )
    raised = {**_step([], {"acme/engine.py": 0}, complete=False), **built}
    (found,) = reach([_case(raised, raised)])
    assert described(found, 1).endswith(
        "(1 of 1 case(s)), no step was watched to its end: what it left for the steps is in the memory and loss checks"
    )
    # A side whose matching failed has no build counts: the cases watched to their end still speak.
    plain = {**_step([], {"acme/other.py": 0}), "built": {"files": {"acme/other.py": 0}}}
    failed = {"complete": False, "error": "OSError: RECORD"}
    (other,) = reach([_case(plain, plain), _case(failed, plain)])
    assert described(other, 2) == "acme/other.py: seen called in no case's build or step (of 1 watched)"


def test_a_long_list_is_cut_in_the_summary_saying_where_the_rest_is() -> None:
    from perfsuite.reports.ab import reach_lines

    files = {f"acme/f{i}.py": 0 for i in range(40)}
    payload = {"cases": [{**_case(_step([], files), _step([], files)), "error": None}], "device_type": "cpu"}
    assert len(reach_lines(payload)) == 40
    shown = reach_lines(payload, 30)
    assert len(shown) == 31
    assert shown[-1] == "… and 10 more (the comparison's --json holds each case's)"


def test_what_the_watch_could_not_see_is_said_with_what_it_did_not_find() -> None:
    compiled = _step([_run("peft")])
    compiled["blind"] = ["compiled"]
    found = reach([_case(compiled, compiled), _case(_step([_run("peft")]), _step([_run("peft", calls=3)]))])
    assert (
        described(found[0], 2) == "peft 1.0 → 1.0: called in the watched steps of 1 of 2 case(s) (base 0, candidate 1)"
    )
    found = reach([_case(compiled, compiled)])
    assert described(found[0], 1).startswith(
        "peft 1.0 → 1.0: seen called in no case's step (of 1 watched); the watch was partly blind (compiled in 1)"
    )


def test_a_request_past_its_bound_leaves_the_rest_unwatched_not_uncalled() -> None:
    from perfsuite.core.changed_code import ChangedCode, ChangedFunction

    touched = tuple(ChangedFunction("acme/big.py", f"f{i}", (i + 1, i + 1)) for i in range(MOST_WATCHED + 1))
    ask = Ask.read(Ask((), "/p", ("acme/big.py",), ChangedCode((), touched).watched(0)).request())
    assert len(ask.functions) == MOST_WATCHED
    step = _step([], {"acme/big.py": 0}, functions=dict.fromkeys(ask.functions, 0))
    found = reach([_case(step, step)], ChangedCode(("acme/big.py",), touched))
    assert described(found[-1], 1).endswith("not watched (no case's profile step ran to its end on both sides)")
    assert len(unreached(found)) == MOST_WATCHED


def test_the_headline_names_three_and_counts_the_rest() -> None:
    files = {f"acme/f{i}.py": 0 for i in range(5)}
    found = reach([_case(_step([], files), _step([], files))])
    assert unreached_said(found) == "not seen in any case's step: acme/f0.py, acme/f1.py, acme/f2.py and 2 more"


def test_the_files_watched_are_the_projects_python_files_from_its_directory() -> None:
    changed = ["README.md", "team/acme/model.py", "team/pyproject.toml", "tools/bump.py", "team/tests/test_x.py"]
    assert python_files(changed, "team") == ("acme/model.py",)  # its tests are no code a case runs
    assert python_files(["acme/model.py", "x.txt"], ".") == ("acme/model.py",)


def test_a_file_whose_records_are_not_watched_steps_is_read_as_unwatched() -> None:
    """ab.json is data: a hand-made or older file's entries that are not what a worker writes are left out."""
    cases = [
        _case({"complete": True, "packages": [{"name": "x", "python_calls": "many"}]}, _step([_run("x")])),
        _case([_run("x")], _step([_run("x")])),  # the shape before a step's watch had a record of its own
        {"case": "old", "error": None},
    ]
    assert [(r.name, r.ran, r.watched) for r in reach(cases)] == [("x", (0, 0), 0)]


def test_the_watched_packages_are_those_whose_versions_differ_but_perfsuite() -> None:
    a = {"torch": "2.13.0", "transformers": "5.25.0", "perfsuite": "0.1.0", "peft": None}
    b = {"torch": "2.13.0", "transformers": "5.24.0", "perfsuite": "0.2.0", "peft": "0.21.2"}
    assert to_watch(a, b) == ("peft", "transformers")


@pytest.mark.parametrize("text", ["", "transformers,peft", "[]", '{"packages": [1], "root": null, "files": []}'])
def test_a_request_a_worker_cannot_read_is_nothing_to_watch(text: str) -> None:
    assert not Ask.read(text)
    ask = Ask(("peft",), "/project", ("acme/model.py",))
    assert Ask.read(ask.request()) == ask


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two made-up distributions on the path: one with a module, one of native libraries alone."""
    site = tmp_path / "site"
    for dist, files in {
        "madeup_tool": {
            "madeup_tool/__init__.py": "",
            "madeup_tool/work.py": "def go():\n    return 1\n",
            "madeup_tool/eager.py": "from madeup_tool.work import go\n\nVALUE = go()\n",
        },
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
    # An editable install: RECORD lists a .pth file; the code runs from its source directory.
    source = tmp_path / "checkout"
    (source / "madeup_editable").mkdir(parents=True)
    (source / "madeup_editable" / "__init__.py").write_text("def run():\n    return 4\n")
    info = site / "madeup_editable-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: madeup_editable\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"madeup_editable.pth,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    (info / "direct_url.json").write_text(json.dumps({"url": source.as_uri(), "dir_info": {"editable": True}}))
    monkeypatch.syspath_prepend(str(source))
    monkeypatch.syspath_prepend(str(site))
    yield site
    for module in [m for m in sys.modules if m.startswith("madeup_")]:
        del sys.modules[module]


def test_a_watch_counts_python_and_compiled_calls_by_the_distribution_that_installed_them(installed: Path) -> None:
    import madeup_editable
    import madeup_tool.work
    import numpy

    from perfsuite.worker.reach import Watch

    names = ("madeup_tool", "madeup_native", "madeup_editable", "numpy", "not-installed-here")
    watch = Watch(Ask(names, str(installed), ("madeup_tool/work.py", "x.py")))
    with watch.watching():
        madeup_editable.run()
        madeup_tool.work.go()
        madeup_tool.work.go()
        numpy.zeros(3)  # a built-in numpy defines: a compiled call
    ran = StepRan.from_json(watch.ran(), "test")
    assert ran.complete
    assert ran.files == {"madeup_tool/work.py": 2, "x.py": 0}
    assert ran.imported == ("madeup_tool/work.py",)  # a module was imported from it; none from x.py
    found = {r.name: r for r in ran.packages}
    assert (found["madeup_tool"].python_calls, found["madeup_tool"].has_code) == (2, True)
    assert (found["madeup_native"].python_calls, found["madeup_native"].has_code) == (0, False)
    assert (found["madeup_editable"].python_calls, found["madeup_editable"].has_code) == (1, True)
    assert found["numpy"].native_calls >= 1
    assert found["not-installed-here"].version is None
    assert sys.getprofile() is None  # left as it was


def test_a_watched_build_is_counted_apart_from_the_step_and_an_import_is_no_call(installed: Path) -> None:
    """What a module runs as it is imported (here a call of ``go``) is an import, not a use: a build
    that imports a package to ask what it is has not used it."""
    import madeup_tool.work

    from perfsuite.worker.reach import Watch

    watch = Watch(Ask(("madeup_tool",), str(installed), ("madeup_tool/work.py",), ("madeup_tool/work.py:1",)))
    with watch.building():
        import madeup_tool.eager  # noqa: F401 - imported for what its import runs
    assert watch.ran()["built"] == {
        "packages": {"madeup_tool": 0},
        "files": {"madeup_tool/work.py": 0},
        "functions": {"madeup_tool/work.py:1": 0},
    }
    with watch.building():
        madeup_tool.work.go()
    with watch.watching():
        pass
    ran = StepRan.from_json(watch.ran(), "test")
    assert ran.built is not None
    assert (ran.built.packages, ran.built.files, ran.built.functions) == (
        {"madeup_tool": 1},
        {"madeup_tool/work.py": 1},
        {"madeup_tool/work.py:1": 1},
    )
    assert (ran.packages[0].python_calls, ran.files, ran.functions) == (
        0,
        {"madeup_tool/work.py": 0},
        {"madeup_tool/work.py:1": 0},
    )
    assert sys.getprofile() is None


def test_code_exec_runs_is_counted_and_an_import_that_failed_leaves_no_blind_spot(installed: Path) -> None:
    import madeup_tool.work

    from perfsuite.worker.reach import Watch

    (installed / "madeup_tool" / "broken.py").write_text("from madeup_tool.work import go\n\ngo()\nraise ImportError\n")
    watch = Watch(Ask(("madeup_tool",), str(installed), ("madeup_tool/work.py",)))
    with watch.watching():
        with pytest.raises(ImportError):
            import madeup_tool.broken  # noqa: F401 - its body's call of go() is the import's
        eval("madeup_tool.work.go()")  # noqa: S307 - what a config-driven factory does
        exec("madeup_tool.work.go()")  # noqa: S102
        madeup_tool.work.go()
    assert watch.ran()["files"] == {"madeup_tool/work.py": 3}


def test_a_process_forked_while_a_watch_counts_does_not_count(tmp_path: Path) -> None:
    """A DataLoader's workers, forked as the loop engine is built: they keep the forking thread's profile
    function unless it is taken off, and would pay for it on every call through the timed steps."""
    import os

    from perfsuite.worker.reach import Watch

    read, write = os.pipe()
    with Watch(Ask(("numpy",))).building():
        pid = os.fork()
        if pid == 0:  # the child: says whether a profile function is set, and leaves at once
            os.write(write, b"1" if sys.getprofile() is not None else b"0")
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"0"
    os.close(read)
    os.close(write)


def test_a_watch_counts_the_calls_of_the_projects_own_files_under_its_root(tmp_path: Path) -> None:
    """A side's copy of the project: what its step ran of the files that differ, by their path in the project."""
    from perfsuite.worker.reach import Watch

    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "model.py").write_text("def forward():\n    return helper()\n\ndef helper():\n    return 2\n")
    (tmp_path / "acme" / "prep.py").write_text("def prepare():\n    return 3\n")
    namespace: dict[str, Any] = {}
    code = compile((tmp_path / "acme" / "model.py").read_text(), str(tmp_path / "acme" / "model.py"), "exec")
    exec(code, namespace)  # noqa: S102 - the test's own file, as an import would run it
    watch = Watch(Ask((), str(tmp_path), ("acme/model.py", "acme/prep.py", "acme/gone.py")))
    with watch.watching():
        namespace["forward"]()
    assert watch.ran()["files"] == {"acme/model.py": 2, "acme/prep.py": 0, "acme/gone.py": 0}


def test_what_cannot_be_matched_leaves_an_incomplete_watch_not_a_failed_case(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    from perfsuite.worker.reach import Watch

    def unreadable(name: str) -> metadata.Distribution:
        raise OSError("RECORD: permission denied")

    monkeypatch.setattr(metadata, "distribution", unreadable)
    watch = Watch(Ask(("numpy",)), blind=("compiled",))
    with watch.watching():
        sum([1, 2])
    ran = StepRan.from_json(watch.ran(), "test")
    assert (ran.complete, ran.error, ran.blind) == (False, "OSError: RECORD: permission denied", ("compiled",))


def test_a_step_that_raised_is_no_complete_watch() -> None:
    from perfsuite.worker.reach import Watch

    watch = Watch(Ask(("numpy",)))
    with pytest.raises(RuntimeError), watch.watching():
        raise RuntimeError("the step failed")
    assert not watch.complete
    assert watch.ran()["complete"] is False


def test_a_first_step_no_other_warm_up_step_follows_is_not_watched_and_reads_as_a_blind_spot() -> None:
    """The first step is watched only where an unwatched warm-up step follows it before the timed ones."""
    from perfsuite.core.spec import CaseSpec
    from perfsuite.worker.run import _blind_spots, _first_step_watched

    def spots(warmup: int) -> tuple[str, ...]:
        spec = CaseSpec(model="tiny-bert", strategy="vanilla", warmup_steps=warmup, device="cpu")
        return _blind_spots(spec, "cpu", first_watched=_first_step_watched(spec))

    assert (spots(0), spots(1), spots(2)) == (("first step",), ("first step",), ())
    compiled = CaseSpec(model="tiny-bert", strategy="compile", warmup_steps=2, device="cpu")
    assert not _first_step_watched(compiled)  # compiling under the watch would stretch it
    assert _blind_spots(compiled, "cpu", first_watched=False) == ("compiled", "first step")
    # An engine of the project's that ignores the context its step is given: its first step was not watched.
    plain = CaseSpec(model="tiny-bert", strategy="vanilla", warmup_steps=2, device="cpu")
    assert _blind_spots(plain, "cuda", first_watched=False) == ("first step", "backward on the GPU")
    step = {**_step([_run("peft")]), "blind": ["first step"], "first_step": False}
    assert "the watch was partly blind (first step in 1)" in described(reach([_case(step, step)])[0], 1)
    older = {k: v for k, v in _step([_run("peft")]).items() if k != "first_step"}  # its perfsuite watched none
    assert "the watch was partly blind (first step in 1)" in described(
        reach([_case(older, _step([_run("peft")]))])[0], 1
    )


@pytest.mark.cpu
@pytest.mark.parametrize(
    ("strategy", "engine"),
    [  # the Trainer's thread on every push; a package's own optimizer and forked DataLoader workers nightly
        pytest.param("adamw_8bit", "loop", marks=pytest.mark.nightly),
        ("vanilla", "trainer"),
        pytest.param("dataloader", "loop", marks=pytest.mark.nightly),
    ],
)
def test_a_case_run_with_the_watch_asked_records_what_its_profile_step_ran(strategy: str, engine: str) -> None:
    """Through the worker as a side's server runs it: the environment asks, the record answers; the
    Trainer's steps run in a thread of its own, where the watch is set, and it makes its optimizer in
    its first step, which is watched; the DataLoader's workers are forked during the build. The same
    case run unwatched has the same losses, peak and breakdown to the byte; with DataLoader workers a
    prefetched batch (32 KiB) may land in another category of the watched step's breakdown (1 run in
    10), under the memory gate's absolute tolerance."""
    import transformers

    from perfsuite.core.spec import CaseSpec
    from perfsuite.core.tolerance import Tolerance
    from perfsuite.worker.process import run_isolated

    spec = CaseSpec(
        model="tiny-bert", strategy=strategy, engine=engine, steps=2, warmup_steps=2, threads=1, device="cpu"
    )
    # The Trainer's create_optimizer, asked for as a function of a project whose root is site-packages.
    root = Path(transformers.__file__).parent.parent
    make = f"transformers/trainer.py:{transformers.Trainer.create_optimizer.__code__.co_firstlineno}"
    ask = Ask(("transformers", "bitsandbytes", "peft", "not-installed-here"), str(root), ("x.py",), (make,))
    record = run_isolated(spec, timeout_s=300, env={WATCH_ENV: ask.request()})
    assert record.ok, record.error
    assert record.step_ran is not None
    assert record.step_ran.complete
    assert record.step_ran.blind == ()  # two warm-up steps: the first is watched
    assert record.step_ran.first_step is True
    built = record.step_ran.built
    assert built is not None
    assert built.packages["transformers"] > 0  # the model's classes
    assert built.packages["peft"] == 0  # imported (by the build or before it) to ask what the model is: no use
    assert built.functions[make] == 0
    assert (record.step_ran.functions[make] > 0) == (engine == "trainer")  # in the first step, in its thread
    found = {r.name: r for r in record.step_ran.packages}
    assert found["transformers"].python_calls > 0
    assert (found["bitsandbytes"].python_calls > 0) == (strategy == "adamw_8bit")  # its 8-bit AdamW's step
    assert found["peft"].python_calls == found["peft"].native_calls == 0
    assert found["peft"].has_code
    assert found["not-installed-here"].version is None
    assert json.loads(json.dumps(record.to_json()))["step_ran"]["packages"][0]["name"] == "transformers"
    plain = run_isolated(spec, timeout_s=300)
    assert plain.step_ran is None
    assert (record.loss, record.peak_memory_bytes) == (plain.loss, plain.peak_memory_bytes)
    watched, unwatched = record.memory_breakdown_bytes or {}, plain.memory_breakdown_bytes or {}
    if strategy != "dataloader":
        assert watched == unwatched
    else:  # a batch a worker prefetched during the slower, watched step may be counted under another category
        moved = {k: watched[k] - unwatched[k] for k in unwatched if watched[k] != unwatched[k]}
        assert sum(moved.values()) == 0
        assert all(abs(n) < Tolerance().memory_atol_bytes for n in moved.values()), moved


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
        side: _step([_run("transformers", calls=640, version=t), _run("bitsandbytes", version=b)])
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
    assert "0.49.0 → 0.50.0; not seen in any case's step: `bitsandbytes`)**" in text.splitlines()[2]
    assert "- `transformers` 5.24.0 → 5.25.0: called in the watched steps of 1 of 1 case(s)\n" in text
    assert "- `bitsandbytes` 0.49.0 → 0.50.0: seen called in no case's step (of 1 watched)" in text
    (tmp_path / "summary.md").write_text(text)
    nested = {
        **payload,
        "changed_code": {
            "files": ["acme/m.py"],
            "functions": [{"file": "acme/m.py", "name": "Net.__init__.inner", "lines": [3, 3]}],
        },
    }
    (tmp_path / "nested.md").write_text(markdown(nested))
    assert "`acme/m.py:Net.__init__.inner`" in "\n".join(read_summary(tmp_path / "nested.md").lines)
    posted = read_summary(tmp_path / "summary.md")
    assert posted.marker == "<!-- perfsuite-ab cpu -->"
    assert "- `bitsandbytes` 0.49.0 → 0.50.0: seen called in no case's step (of 1 watched)" in "\n".join(posted.lines)


def test_a_side_asks_its_worker_to_watch_only_a_run_with_a_profile_step() -> None:
    from perfsuite.ab.envs import Env
    from perfsuite.ab.sides import Side

    side = Side.__new__(Side)  # its server is not needed: what it is asked is
    side.name, side.extensions, side.watch = "base", "ext", Ask(("transformers", "bitsandbytes"))
    side.env = Env(label="current", python=sys.executable)
    asked: list[dict[str, Any]] = []

    def answer(request: dict[str, Any], **_: Any) -> dict[str, Any]:
        asked.append(request)
        return {"ok": True, "record": {"model": "tiny-bert", "strategy": "vanilla", "status": "ok"}}

    side._ask = answer  # type: ignore[method-assign]
    side.run({"model": "tiny-bert", "profile": True}, 60.0)
    side.run({"model": "tiny-bert", "profile": False}, 60.0)
    assert Ask.read(asked[0]["env"][WATCH_ENV]) == side.watch
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
