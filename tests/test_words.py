"""perfsuite speaks of its users' things: GPU machines, runners, images, a CI job's time limit.

Not of where it was built: no borrowed machine or minutes, no issue numbers or titles in code,
help, tests, docs or workflows (a commit says why a change was made), no feature "being built"
that is there. Every tracked text file is read.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = re.compile(
    r"\blent\b|\bborrowed\b|\bdevice (time|call)s?\b|\bworkplace\b|\bissue #?\d+\b|\(issue:|being built",
    re.IGNORECASE,
)
"""What the project does not say of itself."""
ITSELF = {"tests/test_words.py"}


def _tracked_text() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    paths = []
    for name in names.splitlines():
        path = ROOT / name
        if name in ITSELF or name.startswith("baselines/") or not path.is_file():
            continue
        if path.suffix in {".py", ".md", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".sh", ""}:
            paths.append(path)
    return paths


def test_nothing_speaks_of_borrowed_machines_or_issue_numbers() -> None:
    found = []
    for path in _tracked_text():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


def test_the_check_finds_each_kind_of_word() -> None:
    for line in ("on a lent H100", "15 minutes of device time", "(issue 26)", "(issue: pictures)", "ab, being built"):
        assert FORBIDDEN.search(line), line
    for line in ("the device timer", "a GPU runner's time limit", "an upstream issue on the tracker"):
        assert not FORBIDDEN.search(line), line
