"""What a change does to the goalposts: the baselines it rewrites and the tolerances it moves, old → new,
so that a pull request that makes its own gate easier says so at the top of its summary and comment.

Pure and self-contained: the standard library only (it runs as a file of the base commit, read with
``git show``, before any of a pull request's code). Every input is text from git or the API, read as
data; what does not parse is named, never trusted.

    python perfsuite/core/goalposts.py BASE HEAD        # markdown, or nothing when no goalpost moved
"""

from __future__ import annotations

import json
import posixpath
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    try:
        import tomli as tomllib
    except ImportError:  # a runner's own Python 3.10 without tomli: tolerances cannot be read
        tomllib = None

Texts = Mapping[str, "tuple[str | None, str | None]"]
"""Path in the repository → (its text before, its text after); ``None`` where the file does not exist."""

HEADLINE = "**This change moves the goalposts**"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _figures(text: str | None) -> dict[str, Any] | None:
    """A baseline file's case, hardware, step time per time class, peak memory and loss curve."""
    if text is None:
        return None
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    times, memory = data.get("time"), data.get("memory")
    times = times if isinstance(times, dict) else {}
    untimed = data.get("untimed")
    untimed = untimed if isinstance(untimed, dict) else {}
    memory = memory if isinstance(memory, dict) else {}
    return {
        "case": str(data.get("case", "?")),
        "hardware": str(data.get("hardware", "?")),
        "time": {
            str(k): (_number(v.get("median")), str(v.get("unit", ""))) for k, v in times.items() if isinstance(v, dict)
        },
        "memory": _number(memory.get("peak_bytes")),
        "loss": data.get("loss"),
        "untimed": {str(k): _number(v.get("spread")) for k, v in untimed.items() if isinstance(v, dict)},
    }


def _change(old: float | None, new: float | None, unit: str = "", scale: float = 1.0) -> str:
    if old is None or new is None:
        return f"{'—' if old is None else f'{old / scale:.4g}'} → {'—' if new is None else f'{new / scale:.4g}'}{unit}"
    rel = f" ({new / old - 1:+.1%})" if old else ""
    return f"{old / scale:.4g} → {new / scale:.4g}{unit}{rel}"


def baseline_moves(path: str, old: str | None, new: str | None) -> str | None:
    """One line for a changed baseline file: what each figure was and is; ``None`` when nothing gated moved."""
    if path.rsplit("/", 1)[-1].startswith("pytest-benchmark"):  # core/pinned.py's PREFIX (no import: see above)
        how = "added" if old is None else "removed" if new is None else "changed"
        return f"`{path}`: the pinned pytest-benchmark file {how}"
    try:
        before, after = _figures(old), _figures(new)
    except (ValueError, AttributeError) as exc:
        return f"`{path}`: unreadable ({type(exc).__name__}), so what it moves cannot be said"
    named = after or before
    assert named is not None
    where = f"`{named['case']}` on {named['hardware']}"
    if before is None or after is None:
        return f"{where}: baseline {'added' if before is None else 'removed'} (`{path}`)"
    moves = []
    for time_class in sorted(set(before["time"]) | set(after["time"])):
        (was, unit), (now, _) = before["time"].get(time_class, (None, "")), after["time"].get(time_class, (None, ""))
        if was != now:
            moves.append(f"step time [{time_class}] {_change(was, now, f' {unit}' if unit else '')}")
            if now is None and (spread := after["untimed"].get(time_class)) is not None:
                moves[-1] += f" (too noisy to gate: its pooled sessions there spread {spread:.1%})"
    for time_class in sorted(set(before["untimed"]) | set(after["untimed"])):
        was, now = before["untimed"].get(time_class), after["untimed"].get(time_class)
        if was != now and not (now is not None and time_class in before["time"]):  # a withdrawal: said above
            said = "no longer" if now is None else f"now (its pooled sessions there spread {now:.1%})"
            moves.append(f"step time [{time_class}] {said} marked too noisy to gate")
    if before["memory"] != after["memory"]:
        moves.append(f"peak memory {_change(before['memory'], after['memory'], ' MiB', 2**20)}")
    if before["loss"] != after["loss"]:
        moves.append("loss curve changed")
    if others := other_changes(json.loads(old or "{}"), json.loads(new or "{}")):
        shown = ", ".join(others[:8]) + (f" and {len(others) - 8} more" if len(others) > 8 else "")
        moves.append(f"also {shown}")
    return f"{where}: {'; '.join(moves)}" if moves else None


def _said(key: str) -> bool:
    """Whether :func:`baseline_moves` says a change of ``key`` in its own words, or it moves no gate
    (when and where a figure was recorded, which sessions a pool read)."""
    parts = key.split(".")
    return (
        key in ("loss", "memory.peak_bytes")
        or parts[0] in ("provenance", "untimed")
        or (parts[0] == "time" and parts[-1] in ("median", "unit", "recorded", "sessions"))
    )


def other_changes(old: Any, new: Any) -> list[str]:
    """Every other key of a baseline whose value changed (the stored steps, the spread, the breakdown,
    the initial weights' digest, ...): each can move what the gate admits, so none goes unsaid."""
    before, after = _flat(old if isinstance(old, dict) else {}), _flat(new if isinstance(new, dict) else {})
    gone = object()
    return sorted(k for k in set(before) | set(after) if before.get(k, gone) != after.get(k, gone) and not _said(k))


def _flat(table: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(table, dict):
        return {prefix: table}
    found: dict[str, Any] = {}
    for key, value in table.items():
        found.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return found


def _table(data: Any, *keys: str) -> dict[str, Any]:
    """``data``'s table under ``keys`` (``{}`` where there is none, or a value on the way is no table)."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def _settings(text: str | None) -> dict[str, Any]:
    """A ``pyproject.toml``'s ``[tool.perfsuite]`` (``{}`` where there is none, or it is no table);
    ``tomllib.TOMLDecodeError`` where the text is not TOML."""
    return _table(tomllib.loads(text) if text is not None else {}, "tool", "perfsuite")


GOALPOSTS = ("tolerance", "overrides", "baselines", "matrix")
"""The settings of ``[tool.perfsuite]`` that move the gate: its tolerances, where its baselines are,
and which cases it runs."""

PYTEST_FILES = ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg")
"""pytest's own configuration files (read before ``pyproject.toml``): their ``addopts`` can set any
``--perfsuite-*`` option, ``--perfsuite-time=off`` among them."""


def _tolerances(text: str | None) -> dict[str, Any]:
    """``[tool.perfsuite]``'s settings that move the gate (:data:`GOALPOSTS`), and pytest's own
    (``[tool.pytest.ini_options]``: its ``addopts`` set options), flattened to dotted keys."""
    data = tomllib.loads(text) if text is not None else {}
    found = {k: v for k, v in _flat(_table(data, "tool", "perfsuite")).items() if k.split(".", 1)[0] in GOALPOSTS}
    return found | {f"(pytest) {k}": v for k, v in _flat(_table(data, "tool", "pytest", "ini_options")).items()}


def is_config(path: str) -> bool:
    """Whether ``path`` is pytest's own configuration file or a ``conftest.py``."""
    return path in PYTEST_FILES or path.rsplit("/", 1)[-1] == "conftest.py"


def config_moves(path: str, old: str | None, new: str | None) -> str | None:
    """A line for a changed file that can change what the gate runs or how: pytest's own configuration
    file, or a ``conftest.py`` (code of the pull request's that pytest runs first)."""
    if old == new or not is_config(path):
        return None
    how = "added" if old is None else "removed" if new is None else "changed"
    what = (
        "pytest's configuration, whose addopts can set any --perfsuite-* option"
        if path in PYTEST_FILES
        else ("a conftest, whose hooks and fixtures run before the gate")
    )
    return f"`{path}` {how}: {what}"


def baselines_dir(pyproject: str | None) -> str:
    """Where a ``pyproject.toml``'s gate reads its baselines, as git names paths (``./baselines/``
    → ``baselines``); ``baselines`` where it says nothing, or cannot be read."""
    if tomllib is None:  # pragma: no cover - Python 3.10 without tomli
        return "baselines"
    try:
        where = _settings(pyproject).get("baselines", "baselines")
    except tomllib.TOMLDecodeError:
        return "baselines"
    return posixpath.normpath(str(where).replace("\\", "/")) if isinstance(where, str) and where else "baselines"


def under(path: str, directories: Sequence[str]) -> bool:
    """Whether ``path`` (as git names it) is a JSON file in one of ``directories`` or below."""
    return path.endswith(".json") and any(d == "." or path.startswith(f"{d.rstrip('/')}/") for d in directories)


def tolerance_moves(path: str, old: str | None, new: str | None) -> list[str]:
    """One line per setting that moves the gate (:func:`_tolerances`) added, removed or changed."""
    if tomllib is None:  # pragma: no cover - Python 3.10 without tomli
        return [f"`{path}` changed; this Python has no TOML reader to say what it does to the tolerances"]
    try:
        before, after = _tolerances(old), _tolerances(new)
    except tomllib.TOMLDecodeError:
        return [f"`{path}`: not TOML, so what it does to the tolerances cannot be said"]
    return [
        f"`{path}` `{_table_of(key)}`: {before.get(key, '—')} → {after.get(key, '—')}"
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]


def _table_of(key: str) -> str:
    """``[tool.perfsuite] KEY``, or for pytest's own options ``[tool.pytest.ini_options] KEY``."""
    pytest_key = key.removeprefix("(pytest) ")
    return f"[tool.pytest.ini_options] {pytest_key}" if pytest_key != key else f"[tool.perfsuite] {key}"


def moves(texts: Texts, directories: Sequence[str] | None = None) -> list[str]:
    """Every goalpost ``texts`` moves: changed baseline files under the baselines ``directories``
    (default: those ``pyproject.toml`` names before and after, where ``texts`` holds it), then the settings."""
    if directories is None:
        old_settings, new_settings = texts.get("pyproject.toml", (None, None))
        directories = [baselines_dir(old_settings), baselines_dir(new_settings)]
    lines = [
        line
        for path, (old, new) in sorted(texts.items())
        if under(path, directories)
        if (line := baseline_moves(path, old, new)) is not None
    ]
    for path, (old, new) in sorted(texts.items()):
        if path == "pyproject.toml":
            lines += tolerance_moves(path, old, new)
        elif (line := config_moves(path, old, new)) is not None:
            lines.append(line)
    return lines


def markdown(lines: Sequence[str]) -> str:
    """The block put first in a summary or a comment; empty when no goalpost moved."""
    if not lines:
        return ""
    head = f"> {HEADLINE}: the gate below compares against the new figures. Review these first:"
    return "\n".join([head, *(f"> - {line}" for line in lines)]) + "\n\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=60).stdout


NOT_TEXT = "\0 not UTF-8 text"
"""What a file that is not UTF-8 reads as: no JSON or TOML parses it, so it is named unreadable."""


def as_text(data: bytes) -> str:
    """A file's bytes as text, or :data:`NOT_TEXT`."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_TEXT


def _show(repo: Path, rev: str, path: str) -> str | None:
    done = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=repo, capture_output=True, timeout=60)
    return as_text(done.stdout) if done.returncode == 0 else None


def from_git(repo: Path, base: str, head: str) -> list[str]:
    """The goalposts ``head`` moves since it left ``base`` (from their merge base, as a pull request's
    diff reads), from git's objects: nothing is checked out or run. The baselines directory is the one
    each side's ``pyproject.toml`` names, both read; a change of where it is, is a goalpost too."""
    since = _git(repo, "merge-base", base, head).strip()
    directories = {baselines_dir(_show(repo, rev, "pyproject.toml")) for rev in (since, head)}
    # One outside the repository has no file in its history (its move is the setting's line).
    where = sorted(d for d in directories | {"baselines"} if not (d.startswith("/") or d.split("/")[0] == ".."))
    # --no-renames: a baseline moved away is a removal (its case then has none), not only an addition.
    watched = [*where, "pyproject.toml", *PYTEST_FILES, ":(glob)**/conftest.py"]
    changed = _git(repo, "diff", "--name-only", "--no-renames", "-z", since, head, "--", *watched).split("\0")
    texts = {path: (_show(repo, since, path), _show(repo, head, path)) for path in changed if path}
    return moves(texts, where)


def main(argv: Sequence[str] | None = None) -> int:
    """``goalposts.py [--repo DIR] BASE HEAD``: the markdown block, or nothing; bad refs: one line, exit 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    repo = Path()
    if len(args) == 4 and args[0] == "--repo":
        repo, args = Path(args[1]), args[2:]
    if len(args) != 2:
        print("usage: goalposts.py [--repo DIR] BASE HEAD", file=sys.stderr)
        return 2
    try:
        lines = from_git(repo, args[0], args[1])
    except (subprocess.CalledProcessError, OSError) as exc:
        reason = (getattr(exc, "stderr", "") or str(exc)).strip().splitlines()
        print(f"goalposts: error: {reason[0] if reason else exc}", file=sys.stderr)
        return 2
    sys.stdout.write(markdown(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
