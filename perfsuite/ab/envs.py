"""What a side of ``perfsuite ab`` runs in: an interpreter, a virtual environment, or requirement pins
laid over the current environment (an *overlay*).

An overlay is built the way the notes prescribe (docs/ab.md): resolve the whole set first
(``uv pip install --dry-run`` of every installed distribution, the pinned ones at their
pins, which keeps each installed version that still fits and moves only what must), then
install exactly what moved, with no further resolution, into a cache directory keyed by
that set (``--target``), which the side's workers put first on their path. A set that
cannot resolve with the installed stack is an :class:`EnvError` naming uv's reason.

An overlay is reused only while every file in it is the one installed: the build records each
file's SHA-256 (:data:`MANIFEST`), and an overlay whose files differ from the record, or that
holds one more or one fewer, is built again. Bytecode caches are dropped before the check
(Python writes them as the side imports; a planted one would run instead of its source).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from perfsuite.core.cache import cache_root

NOT_RESOLVED = frozenset({"perfsuite", "pip", "setuptools", "wheel", "uv"})
"""Never part of an overlay's resolution: perfsuite itself (editable) and the installers."""

_TORCH_BUILD = re.compile(r"^(nvidia-(?!ml-py)|cuda-|triton==)")
"""What torch's CUDA build pulls in with it (its CUDA libraries, triton): named in a refusal beside the
torch it comes with. Not NVML's Python bindings, which DeepSpeed up to 0.15 requires by themselves."""


MANIFEST = ".perfsuite-overlay.json"
"""In an overlay: the set it holds and every file's SHA-256, written when it is built."""


class EnvError(Exception):
    """A side that cannot be set up: one line saying why; ``side``, which one (``None``: not known)."""

    def __init__(self, message: str, side: str | None = None) -> None:
        super().__init__(message)
        self.side = side


@dataclass(frozen=True)
class Env:
    """One side: the interpreter its workers run, and what goes first on their path."""

    label: str
    python: str
    path: tuple[str, ...] = ()
    pins: tuple[str, ...] = ()
    """The requirements asked for (an overlay), checked against what the side's workers import."""
    moved: tuple[str, ...] = field(default=(), compare=False)
    """``name==version`` of everything the overlay holds (the asked-for pins and what moved with them)."""
    cwd: str | None = None
    """Where its server runs: the project whose declarations it reads (a tree of the team's code at a
    commit, :mod:`perfsuite.ab.own`); ``None``: this process's working directory."""


def split_spec(text: str) -> list[str]:
    """``a==1,b==2`` → ``["a==1", "b==2"]``; a comma inside one specifier (``a>=1,<2``) stays."""
    return [part.strip() for part in re.split(r",(?=\s*[A-Za-z])", text) if part.strip()]


def parse_env(text: str, *, name: str) -> Env | list[Requirement]:
    """An interpreter, a virtual environment's interpreter, ``current``, or the requirements of a spec."""
    if not text.strip():
        raise EnvError(f"--{name} is empty: give an interpreter, a virtual environment, 'current' or pins")
    if text in ("current", "."):
        return Env(label="current", python=sys.executable)
    path = Path(text).expanduser()
    if path.is_dir():
        python = path / "bin" / "python"
        if not python.is_file():
            raise EnvError(f"--{name} {text}: a directory without bin/python; give a virtual environment")
        return Env(label=text, python=str(python))
    if path.is_file():
        if not os.access(path, os.X_OK):
            raise EnvError(f"--{name} {text}: not executable; give a Python interpreter")
        return Env(label=text, python=str(path))
    if "/" in text or not re.search(r"[=<>~!]", text):
        raise EnvError(
            f"--{name} {text!r}: neither an interpreter, a virtual environment, 'current', "
            "nor requirement pins such as transformers==4.57.6 or 'torch==2.12.0,accelerate==1.10.0'"
        )
    requirements: list[Requirement] = []
    for part in split_spec(text):
        try:
            requirement = Requirement(part)
        except InvalidRequirement as exc:
            reason = str(exc).splitlines()[0]
            raise EnvError(f"--{name} {text!r}: {part!r} is not a requirement ({reason})") from None
        if any(
            canonicalize_name(r.name) == canonicalize_name(requirement.name) and r.marker == requirement.marker
            for r in requirements
        ):  # the same package under other markers (one per Python) is two pins, not one twice
            raise EnvError(f"--{name} {text!r}: {requirement.name} is pinned more than once; give it once")
        requirements.append(requirement)
    return requirements


def _uv() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise EnvError("an overlay needs uv: pip install uv") from None
        return found


def installed() -> dict[str, str]:
    """Every distribution of this environment, by normalised name."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_normal(name), dist.version)
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _local_free(version: str) -> str:
    return version.split("+", 1)[0]


def uv_reason(stderr: str, most: int = 600) -> str:
    """uv's reason for a failure on one line: without its warnings and the line naming the environment
    it used (``Using Python 3.11.7 environment at: <path>``: a pull request's comment shows the reason).
    Past ``most`` characters (a build's log), its first line (what failed) and its end (why), cut
    between words."""
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    kept = [line for line in said if not re.match(r"warn|using .* at: ", line, re.IGNORECASE)]
    whole = " ".join(kept)
    if len(whole) <= most:
        return whole
    first = kept[0] if len(kept[0]) <= most // 3 else kept[0][: most // 3].rsplit(" ", 1)[0]
    end = whole[-(most - len(first) - 3) :]
    return f"{first} … {end.split(' ', 1)[1] if ' ' in end else end}"


def resolve(requirements: list[Requirement], *, python: str = sys.executable) -> list[str]:
    """``name==version`` of what must change in this environment for ``requirements`` to hold,
    the whole installed set resolved together (:mod:`uv`'s dry run; nothing is installed)."""
    present = installed()
    asked = {_normal(r.name): str(r) for r in requirements}
    lines = [asked.get(name, name) for name in sorted(present) if name not in NOT_RESOLVED]
    lines += [spec for name, spec in asked.items() if name not in present]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(lines) + "\n")
    try:
        done = subprocess.run(
            [_uv(), "pip", "install", "--dry-run", "--python", python, "-r", handle.name],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError) as exc:  # uv hung on the index, or is gone
        raise EnvError(f"{', '.join(asked.values())}: uv could not resolve it: {exc}") from None
    finally:
        Path(handle.name).unlink(missing_ok=True)
    if done.returncode != 0:
        reason = uv_reason(done.stderr)
        raise EnvError(f"{', '.join(asked.values())} does not resolve with the installed stack: {reason}")
    moved = []
    for line in done.stderr.splitlines() + done.stdout.splitlines():
        match = re.match(r"^\s*\+\s+(\S+)==(\S+)", line)
        if match:
            name, version = _normal(match.group(1)), match.group(2)
            if _local_free(present.get(name, "")) != _local_free(version):
                moved.append(f"{name}=={version}")
    # A CUDA torch is told by what torch itself would become, not by a package beside it: an old
    # DeepSpeed adds nvidia-ml-py and keeps the CPU torch.
    torch = [m for m in moved if m.startswith("torch==")]
    if torch and "torch" not in asked:
        builds = torch + [m for m in moved if _TORCH_BUILD.match(m)]
        raise EnvError(
            f"{', '.join(asked.values())} would replace the installed torch ({', '.join(builds[:3])}, ...); "
            "hold it with --with 'torch==<installed>', or compare a virtual environment"
        )
    return sorted(moved)


def _digests(root: Path) -> dict[str, str]:
    """Every file under ``root`` but the manifest, by relative path: its SHA-256, or where a link points."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[name] = f"link:{path.readlink()}"
        elif path.is_file() and name != MANIFEST:
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            found[name] = digest.hexdigest()
    return found


def intact(target: Path, moved: list[str]) -> bool:
    """Whether ``target`` holds exactly the files its build recorded, for ``moved``."""
    if target.is_symlink():
        return False
    try:
        recorded = json.loads((target / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    for cache in [p for p in target.rglob("__pycache__") if p.is_dir() and not p.is_symlink()]:
        shutil.rmtree(cache, ignore_errors=True)
    return bool(recorded == {"moved": moved, "files": _digests(target)})


def install_into(
    target: Path, record: list[str], install: list[str], *, label: str, environ: dict[str, str] | None = None
) -> None:
    """``target`` made to hold what ``uv pip install --no-deps --target`` of ``install`` (requirements, or a
    source tree to build) puts there, with the manifest that lets it be reused while intact (:func:`intact`
    against ``record``); whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    done = subprocess.run(
        [_uv(), "pip", "install", "--no-deps", "--target", str(scratch), "--python", sys.executable, *install],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, **(environ or {})},
    )
    if done.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise EnvError(f"{label}: installing {' '.join(record)} failed: {uv_reason(done.stderr)}")
    (scratch / MANIFEST).write_text(json.dumps({"moved": record, "files": _digests(scratch)}))
    if target.is_symlink():
        target.unlink()
    shutil.rmtree(target, ignore_errors=True)
    scratch.replace(target)


def overlay(requirements: list[Requirement], *, label: str) -> Env:
    """The overlay for ``requirements`` (built once per resolved set, then reused from the cache while intact)."""
    moved = resolve(requirements)
    if not moved:
        return Env(label=label, python=sys.executable, pins=tuple(str(r) for r in requirements))
    key = hashlib.sha256(("\n".join([sys.version, *moved])).encode()).hexdigest()[:16]
    target = cache_root() / "overlays" / key
    if not intact(target, moved):
        install_into(target, moved, moved, label=label)
    return Env(
        label=label,
        python=sys.executable,
        path=(str(target),),
        pins=tuple(str(r) for r in requirements),
        moved=tuple(moved),
    )


def make_env(text: str, *, name: str, held: list[Requirement] | tuple[Requirement, ...] = ()) -> Env:
    """The side ``--name text`` asks for, built (an overlay) where needed; ``held`` (``--with``) are laid
    over this environment on every side too, so that what the side asks for resolves with them
    (an old release beside the companion it needs)."""
    asked = _asked(text, name=name, held=held)
    return asked if isinstance(asked, Env) else overlay(asked[0], label=asked[1])


def moves(text: str, *, name: str, held: list[Requirement] | tuple[Requirement, ...] = ()) -> list[str] | None:
    """What the side ``--name text`` (with ``held``) would lay over this environment, ``name==version``,
    resolved and not installed (``[]``: it runs this environment as it is); ``None``: an interpreter or a
    virtual environment of its own. An :class:`EnvError` says why it cannot be set up."""
    asked = _asked(text, name=name, held=held)
    return None if isinstance(asked, Env) else resolve(asked[0])


def _asked(
    text: str, *, name: str, held: list[Requirement] | tuple[Requirement, ...]
) -> Env | tuple[list[Requirement], str]:
    """The environment ``--name text`` names, or the requirements it lays over this one (its own pins,
    then the ``held`` ones it does not pin) with the side's label."""
    parsed = parse_env(text, name=name)
    with_ = f" with {', '.join(map(str, held))}" if held else ""
    if isinstance(parsed, Env):
        if not held:
            return parsed
        if parsed.label != "current":
            raise EnvError(f"--with lays packages over this environment; --{name} {text} is an environment of its own")
        return list(held), f"current{with_}"
    pinned = {_normal(r.name) for r in parsed}
    return [*parsed, *(r for r in held if _normal(r.name) not in pinned)], f"{text}{with_}"


def parse_held(text: str | None) -> tuple[Requirement, ...]:
    """``--with``'s requirements (``'torch==2.13.0,numpy<2'``); an :class:`EnvError` names a bad one."""
    if not text:
        return ()
    parsed = parse_env(text, name="with")
    if isinstance(parsed, Env):
        raise EnvError(f"--with {text!r}: give requirements, such as 'torch==2.13.0,numpy<2'")
    return tuple(parsed)
