"""The functions a change to the project's own code touches, on each side (perfsuite.core.changed_code),
from a diff's hunks and each side's text; read from a repository's commits and working tree
(perfsuite.ab.own.changes)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from perfsuite.core.changed_code import MODULE_LEVEL, ChangedCode, ChangedFunction, changed_code, changed_lines, parse

BASE = '''"""A model."""

import torch

SCALE = 2


def build(seed):
    return seed


class Net:
    width = 4

    @staticmethod
    def forward(x):
        def inner(y):
            return y * SCALE

        return inner(x)
'''


def test_a_diffs_hunks_are_the_lines_it_removed_and_added() -> None:
    diff = "@@ -3 +3,2 @@ x\n-a\n+b\n+c\n@@ -10,2 +12,0 @@\n-d\n-e\n@@ -20,0 +21 @@\n+f\n"
    assert changed_lines(diff) == ({3, 10, 11}, {3, 4, 21})  # a pure insertion removes nothing, a deletion adds nothing


def test_each_line_is_filed_under_the_innermost_function_that_holds_it() -> None:
    parsed = parse(BASE)
    assert parsed is not None
    assert {name: span[:2] for name, span in parsed.functions.items()} == {
        "build": (8, 9),
        "Net.forward": (15, 20),  # from its decorator: the line its code starts at
        "Net.forward.inner": (17, 18),
    }
    # The import, SCALE, the class's header and its attribute: no docstring or blank line.
    assert parsed.module == {3, 5, 12, 13}


def test_a_name_defined_again_is_numbered_and_a_deep_file_is_no_functions() -> None:
    source = (
        "class C:\n    @property\n    def x(self):\n        return 1\n\n"
        "    @x.setter\n    def x(self, v):\n        pass\n"
    )
    parsed = parse(source)
    assert parsed is not None
    assert {name: span[:2] for name, span in parsed.functions.items()} == {"C.x": (2, 4), "C.x (2)": (6, 8)}
    deep = "x = 1\n" + "if x:\n    pass\nel" * 3000 + "se:\n    pass\n"
    assert parse(deep) is None  # nests past what a walk can follow: the file is watched as a file


def test_a_change_to_comments_or_layout_alone_names_no_function() -> None:
    head = BASE.replace("def build(seed):", 'def build(seed):  # the seed sets the weights\n    """Seeded."""').replace(
        "    return seed\n", "    return (seed)\n"
    )
    changed = changed_code({"acme/model.py": (BASE, head, "@@ -8,2 +8,3 @@\n")})
    assert changed.functions == ()
    assert changed.files == ()  # nothing to watch: no code changed
    assert changed.same == ("acme/model.py",)  # said as such


def test_a_change_names_its_functions_on_each_side_where_they_are_there() -> None:
    head = BASE.replace("    return seed\n", "    torch.manual_seed(seed)\n    return seed\n").replace(
        "SCALE = 2", "SCALE = 3"
    )
    head += "\n\ndef export(path):\n    return path\n"
    diff = "@@ -5 +5 @@\n-SCALE = 2\n+SCALE = 3\n@@ -8,0 +9 @@\n+    torch.manual_seed(seed)\n@@ -20,0 +22,4 @@\n"
    changed = changed_code({"acme/model.py": (BASE, head, diff), "acme/new.py": (None, "def go():\n    pass\n", "")})
    assert changed.files == ("acme/model.py", "acme/new.py")
    assert changed.functions == (
        ChangedFunction("acme/model.py", MODULE_LEVEL, (None, None)),
        ChangedFunction("acme/model.py", "build", (8, 8)),
        ChangedFunction("acme/model.py", "export", (None, 24)),  # added: on the candidate alone
        ChangedFunction("acme/new.py", "go", (None, 1)),  # a new file: every line of it changed
    )
    assert changed.watched(0) == ("acme/model.py:8",)
    assert changed.watched(1) == ("acme/model.py:8", "acme/model.py:24", "acme/new.py:1")
    assert ChangedCode.from_json(changed.as_json()) == changed


def test_a_file_that_does_not_parse_is_watched_as_a_file_alone() -> None:
    changed = changed_code({"acme/broken.py": ("def f(:\n", "def f():\n    pass\n", "@@ -1 +1,2 @@\n")})
    assert (changed.files, changed.functions) == (("acme/broken.py",), ())


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"files": [], "functions": [{"file": "a.py", "name": "f", "lines": [True, 1]}]},
        {"files": [], "functions": [{"file": "a.py", "name": "f", "lines": [1]}]},
        {"files": [], "functions": [{"file": "a.py", "lines": [1, 2]}]},
        {"files": ["a.py", 3], "functions": []},
        {"files": [], "functions": [], "same": "a.py"},
        {"functions": []},
    ],
)
def test_what_is_not_a_change_record_is_none(data: Any) -> None:
    assert ChangedCode.from_json(data) is None


def test_a_change_record_without_same_files_reads() -> None:
    read = ChangedCode.from_json({"files": ["a.py"], "functions": [{"file": "a.py", "name": "f", "lines": [None, 2]}]})
    assert read == ChangedCode(("a.py",), (ChangedFunction("a.py", "f", (None, 2)),))


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def test_the_changes_are_read_from_the_commits_and_the_working_tree(tmp_path: Path) -> None:
    from perfsuite.ab.own import changes

    root = tmp_path / "repo"
    (root / "team" / "acme").mkdir(parents=True)
    _git(root, "init", "-q")
    (root / "team" / "acme" / "model.py").write_text(BASE)
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    (root / "team" / "acme" / "model.py").write_text(BASE.replace("return seed", "return seed + 1"))
    (root / "team" / "acme" / "extra.py").write_text("def more():\n    return 1\n")  # untracked
    names = ["team/acme/extra.py", "team/acme/model.py"]
    changed = changes(root, ["HEAD", None], names, "team", "--base-ref")
    assert [(f.label, f.lines) for f in changed.functions] == [
        ("acme/extra.py:more", (None, 1)),
        ("acme/model.py:build", (8, 8)),
    ]


def test_a_renamed_file_is_its_old_name_on_the_base_and_its_new_name_on_the_candidate(tmp_path: Path) -> None:
    from perfsuite.ab.own import changes
    from perfsuite.core.provenance import files_differ

    root = tmp_path / "repo"
    (root / "acme").mkdir(parents=True)
    _git(root, "init", "-q")
    (root / "acme" / "model.py").write_text(BASE)
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    _git(root, "mv", "acme/model.py", "acme/net.py")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "rename")
    names = files_differ(root, "HEAD~1", "HEAD")
    assert names == ["acme/model.py", "acme/net.py"]
    changed = changes(root, ["HEAD~1", "HEAD"], names, ".", "--own")
    lines = {f.label: f.lines for f in changed.functions}
    assert lines["acme/model.py:build"] == (8, None)
    assert lines["acme/net.py:build"] == (None, 8)
