"""A side of a comparison as a running process: :mod:`perfsuite.worker.serve` in the side's
environment, asked to probe itself and to run cases (each in a fresh worker of its own forkserver)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from perfsuite.ab.envs import Env, EnvError
from perfsuite.core.cache import cache_root
from perfsuite.core.reach import WATCH_ENV, Ask
from perfsuite.core.record import CaseRecord


@contextlib.contextmanager
def _on_cores(cores: Sequence[int]) -> Iterator[None]:
    """Processes started in the block run on ``cores`` (and so do their forkservers and workers).

    Linux gives each thread its own affinity and a child inherits its parent thread's: this thread
    is moved for the block, the others stay. Nothing is moved for ``()``."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def extensions_dir(libraries: dict[str, Any]) -> str:
    """A torch extensions directory per DeepSpeed and torch, each by version and by where it is
    installed (``libraries``: a side's probe). No side loads another's CPU Adam; and two
    environments with the same versions at different places, whose builds use different
    headers, do not rebuild it in turn (40 s a time on two cores) as they would in one directory."""
    names = ("deepspeed", "torch")
    parts = [libraries.get(name) or {} for name in names]
    key = re.sub(
        r"[^\w.+-]", "_", "-".join(f"{n}{lib.get('version', 'none')}" for n, lib in zip(names, parts, strict=True))
    )
    where = hashlib.sha256("\n".join(str(lib.get("file")) for lib in parts).encode()).hexdigest()[:12]
    return str(cache_root() / "torch-extensions" / f"{key}-{where}")


class Side:
    """One long-lived server per side; both sides' cases cost the same start-up.

    ``cores``: where the server, its forkserver and its workers run (a lane's cores,
    :mod:`perfsuite.ab.lanes`); by default wherever this process may. ``server_env``: the
    server's environment over this process's (what its forkserver preloads, where this process's
    settings are not for the side's cases). ``probed``: packages its probe reads besides those it pins."""

    def __init__(
        self,
        name: str,
        env: Env,
        cores: Sequence[int] = (),
        server_env: Mapping[str, str] | None = None,
        probed: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.env = env
        self.watch = Ask()
        """The code whose calls a case's build, first step and profile step count (:mod:`perfsuite.core.reach`)."""
        self.at_seeds: dict[str, CaseRecord] = {}
        """Its runs of a case at other seeds (:func:`perfsuite.ab.pairs.other_seeds`), by the request: a loss
        curve and initial weights on one stack are the same at every run, so a bisection's good end, compared
        with each point, runs each seed once."""
        environ = {**os.environ, **(server_env or {})}
        if env.path:
            environ["PYTHONPATH"] = os.pathsep.join([*env.path, *filter(None, [environ.get("PYTHONPATH")])])
        with _on_cores(cores):
            self.proc = subprocess.Popen(  # noqa: S603 - the side's own interpreter, by design
                [env.python, "-m", "perfsuite.worker.serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=environ,
                cwd=env.cwd,
            )
        # What it pins, and ``probed`` (what the other side pins): a package one side adds is read on both.
        names = [Requirement(pin).name for pin in env.pins]  # as pinned: check_pins reads them so
        known = {canonicalize_name(name) for name in names}
        for name in probed:  # what the other side pins, each once however it is spelled
            if canonicalize_name(name) not in known:
                names.append(name)
                known.add(canonicalize_name(name))
        try:
            self.probe: dict[str, Any] = self._ask({"op": "probe", "names": names})["probe"]
            self.extensions = extensions_dir(self.probe["libraries"])
            # Before its forkserver boots, which builds and loads CPU Adam there for every worker. A
            # perfsuite too old to take it (a venv of its own) still sets it in each worker, below.
            told = {"TORCH_EXTENSIONS_DIR": self.extensions}
            self._ask({"op": "environ", "env": told}, unknown_ok=True)
        except EnvError:
            self.close()
            raise

    def _ask(self, request: dict[str, Any], *, unknown_ok: bool = False) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            code = self.proc.poll()
            raise EnvError(
                f"{self.name} ({self.env.label}): its worker did not start (exit {code}); "
                f"does `{self.env.python} -c 'import perfsuite.worker.serve'` work?",
                self.name,
            )
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok") and not (unknown_ok and str(answer.get("error", "")).startswith("unknown request")):
            raise EnvError(f"{self.name} ({self.env.label}): {answer.get('error')}", self.name)
        return answer

    def versions(self) -> dict[str, str | None]:
        return {name: (lib or {}).get("version") for name, lib in self.probe["libraries"].items()}

    def check_pins(self) -> None:
        """Refuse a side whose workers do not import what its overlay pinned."""
        for pin in self.env.pins:
            requirement = Requirement(pin)
            lib = self.probe["libraries"].get(requirement.name)
            version = (lib or {}).get("version")
            if version is None or not requirement.specifier.contains(version.split("+")[0], prereleases=True):
                where = (lib or {}).get("file") or "nowhere"
                raise EnvError(
                    f"{self.name}: the overlay did not take: its workers see {requirement.name} {version} "
                    f"(from {where}), not {requirement.specifier}",
                    self.name,
                )
            moved = {m.split("==")[0] for m in self.env.moved}
            overlaid = self.env.path and requirement.name.lower().replace("_", "-") in moved
            # A distribution whose module is named otherwise (pyyaml's yaml) has no file to check; the
            # version above came from the first metadata on the path, the overlay's when it took.
            file = (lib or {}).get("file")
            if overlaid and file is not None and not str(file).startswith(self.env.path[0]):
                raise EnvError(
                    f"{self.name}: {requirement.name} imports from {lib and lib.get('file')}, not the overlay",
                    self.name,
                )

    def reset(self) -> None:
        """A new forkserver (and so a new address-space layout) for the runs that follow, booted before this returns."""
        self._ask({"op": "reset"})

    def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
        """One run of a case (a :class:`CaseSpec`'s fields) in a fresh worker; ``env`` is set in that worker.
        Its record comes back as JSON from the side's environment and is checked and typed here, once."""
        env = {"TORCH_EXTENSIONS_DIR": self.extensions, **(env or {})}
        if self.watch and spec.get("profile"):
            env[WATCH_ENV] = self.watch.request()
        answer = self._ask({"op": "run", "spec": spec, "timeout_s": timeout_s, "env": env})
        try:
            return CaseRecord.from_json(answer.get("record"), f"{self.name} ({self.env.label}): its record")
        except ValueError as exc:  # a side that answers what no perfsuite writes: the side's fault, as a dead one's
            raise EnvError(str(exc), self.name) from None

    def undeclared(self, specs: list[dict[str, Any]]) -> list[str | None]:
        """Per case (a :class:`CaseSpec`'s fields), the name this side's code does not declare (``model
        'x'``), or ``None``; all ``None`` from a perfsuite too old to say (its runs then say it)."""
        answer = self._ask({"op": "declares", "specs": specs}, unknown_ok=True)
        unknown = answer.get("unknown")
        if not isinstance(unknown, list) or len(unknown) != len(specs):
            return [None] * len(specs)
        return [str(name) if name else None for name in unknown]

    def explain(self, spec: dict[str, Any], ask: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """An explanation run of a case (:mod:`perfsuite.worker.explain`; ``ask``: an ``ExplainAsk``'s JSON)."""
        request = {"op": "explain", "spec": spec, "ask": ask, "timeout_s": timeout_s}
        record: dict[str, Any] = self._ask({**request, "env": {"TORCH_EXTENSIONS_DIR": self.extensions}})["record"]
        return record

    def close(self) -> None:
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
            self.proc.wait(10)
        except (OSError, ValueError, subprocess.TimeoutExpired):  # ValueError: its stdin closed already
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # a server that died (Ctrl-C reaches its group): a broken pipe
                    stream.close()
