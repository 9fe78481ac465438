"""One side of a side-by-side comparison (``perfsuite ab``): a long-lived process in that side's
environment that runs cases on request, each in a fresh worker from its own forkserver.

``python -m perfsuite.worker.serve``, started by :mod:`perfsuite.ab.sides` with the side's
interpreter and path. It reads one JSON request per line on stdin and answers one JSON
line on its protocol stream (the original stdout; anything else printed goes to stderr):

- ``{"op": "probe", "names": [...]}``: this environment as its workers see it: the interpreter, and per
  library its version and the file it imports from, so an overlay that did not take is
  caught before anything is compared;
- ``{"op": "environ", "env": {...}}``: set in this process, before its forkserver boots, so that the
  forkserver and every worker have it: the side's torch extensions directory, where the forkserver
  builds and loads DeepSpeed's CPU Adam (:func:`perfsuite.worker.engines.deepspeed.load_cpu_adam`);
- ``{"op": "run", "spec": {...CaseSpec fields}, "timeout_s": T, "env": {...}}``: the case's record
  (:func:`perfsuite.worker.process.run_isolated`; a crash or hang is a failed record); the names
  resolve against perfsuite's registry and the declarations of the project around the working
  directory (its own models and engines included), read at the first run;
- ``{"op": "declares", "specs": [{...CaseSpec fields}, ...]}``: per case, ``null`` where this side's code
  declares its model, recipe and engine, else the name it does not (``model 'x'``): a case the other
  side's code adds, asked before any run;
- ``{"op": "explain", "spec": {...}, "ask": {...ExplainAsk fields}, "timeout_s": T, "env": {...}}``: an
  explanation run of the case in a fresh worker (:mod:`perfsuite.worker.explain`): its record, whose
  ``explain`` is an :class:`~perfsuite.core.explain.records.ExplainRecord`'s JSON;
- ``{"op": "reset"}``: stop this side's forkserver and boot a new one, answering once it has
  imported everything (``boot_s``): a new interpreter, so a new randomised address-space layout,
  which every worker forked from it inherits. Kept, one layout would bias every run of the side by
  a few percent (measured in docs/ab.md: an A/A comparison called a case 4% faster); renewed before
  each round, the layout's effect is noise that the pairs average out. Booted here rather than at
  the round's first run, both sides' boots overlap and none shares the machine with a run;
- ``{"op": "exit"}``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from perfsuite.core.declaration import load_project
from perfsuite.core.provenance import LIBRARIES
from perfsuite.core.spec import CaseSpec
from perfsuite.core.strategies import OPTIONAL_PACKAGES

_IMPORT_NAMES = {p.distribution: p.module for p in OPTIONAL_PACKAGES}


def probe(names: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The interpreter and, per library (perfsuite's and ``names``), ``{"version", "file"}``
    (``None`` when absent); nothing is imported."""
    libraries: dict[str, dict[str, str | None] | None] = {}
    for name in dict.fromkeys((*LIBRARIES, "huggingface_hub", "tokenizers", *_IMPORT_NAMES, *names)):
        try:
            version: str | None = metadata.version(name)
        except metadata.PackageNotFoundError:
            libraries[name] = None
            continue
        module = _IMPORT_NAMES.get(name, name.replace("-", "_"))
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        libraries[name] = {"version": version, "file": found.origin if found is not None else None}
    return {"python": sys.executable, "version": sys.version.split()[0], "pid": os.getpid(), "libraries": libraries}


@functools.cache
def _load_project_once() -> None:
    load_project()  # the comparison's cases may name the project's own models and engines


def _spec(fields: dict[str, Any]) -> CaseSpec:
    """The case asked for; a name this side does not know (comparing the project's own code at two
    commits: a model, recipe or engine one commit declares and the other does not) said as such, not
    with every name it does know."""
    from perfsuite.core.strategies import UnknownNameError

    _load_project_once()
    known = {f.name for f in dataclasses.fields(CaseSpec) if f.init}
    try:
        return CaseSpec(**{k: v for k, v in fields.items() if k in known})
    except ValueError as exc:  # an unknown model or recipe (UnknownNameError), or engine
        named = str(exc).partition("; valid")[0]
        if not re.fullmatch(r"unknown \w+ '[^']*'", named):  # a malformed name: said as it was
            raise
        raise UnknownNameError(f"{named}{_UNDECLARED}") from None


def _undeclared(fields: dict[str, Any]) -> str | None:
    """The name of ``fields``' case this side's code does not declare (``model 'x'``), or ``None`` where it declares
    every one (a malformed name, or another problem, is left to the case's run to say)."""
    from perfsuite.core.strategies import UnknownNameError

    try:
        _spec(fields)
    except UnknownNameError as exc:  # "unknown model 'x': this side's …": model 'x'
        said = str(exc)
        return said.removesuffix(_UNDECLARED).removeprefix("unknown ") if said.endswith(_UNDECLARED) else None
    except ValueError:
        return None
    return None


_UNDECLARED = ": this side's code does not declare it"


def project_code() -> dict[str, Any]:
    """The project this side serves (the ``pyproject.toml`` around its working directory) and, per module
    of the team's own code it declares, the file its workers import that module from."""
    from perfsuite.core.declaration import find_pyproject
    from perfsuite.core.engines import PROJECT_ENGINES
    from perfsuite.core.models import MODELS
    from perfsuite.core.project_code import module_file, split_reference

    _load_project_once()
    references = [(m.factory, m.root) for m in MODELS.values()] + [(m.batch, m.root) for m in MODELS.values()]
    references += [(e.engine_class, e.root) for e in PROJECT_ENGINES.values()]
    files = {split_reference(ref)[0]: module_file(ref, root) for ref, root in references if ref}
    pyproject = find_pyproject(Path.cwd())  # the server's own working directory
    return {"pyproject": None if pyproject is None else str(pyproject), "code": dict(sorted(files.items()))}


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    if request.get("op") == "probe":
        return {"ok": True, "probe": {**probe(request.get("names", ())), "project": project_code()}}
    if request.get("op") == "environ":
        os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})
        return {"ok": True}
    if request.get("op") == "reset":
        from perfsuite.worker.process import renew_forkserver, start_forkserver

        renewed = renew_forkserver()
        return {"ok": True, "reset": renewed, "boot_s": start_forkserver()}
    if request.get("op") == "declares":
        return {"ok": True, "unknown": [_undeclared(fields) for fields in request["specs"]]}
    if request.get("op") == "run":
        from perfsuite.worker.process import run_isolated

        spec, env = _spec(request["spec"]), dict(request.get("env") or {})
        record = run_isolated(spec, timeout_s=float(request["timeout_s"]), env=env)
        return {"ok": True, "record": record.to_json()}
    if request.get("op") == "explain":
        from perfsuite.worker.explain import explain_case
        from perfsuite.worker.process import run_in_worker

        spec, env = _spec(request["spec"]), dict(request.get("env") or {})
        target = functools.partial(explain_case, ask=dict(request["ask"]))
        answer = run_in_worker(spec, timeout_s=float(request["timeout_s"]), target=target, env=env)
        return {"ok": True, "record": answer}
    return {"ok": False, "error": f"unknown request {request.get('op')!r}"}


def serve(requests: IO[str], answers: IO[str]) -> None:
    for line in requests:
        request = json.loads(line)
        if request.get("op") == "exit":
            return
        try:
            answer = _answer(request)
        except Exception as exc:  # a bad request, not a case's fault: say so and go on
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer, default=str) + "\n")
        answers.flush()


def main() -> None:
    # The protocol keeps the original stdout; what libraries print at import goes to stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
