"""The pytest plugin's run state, one :class:`PerfsuiteSession` per pytest run, registered with the
plugin manager as ``perfsuite-session`` (:mod:`perfsuite.plugin` holds only hooks and fixtures).

- :mod:`~perfsuite.session.runs`: each case's records, made once and shared (read this first).
- :mod:`~perfsuite.session.drifts`: the session's drift, from the CPU cases run before any is gated.
- :mod:`~perfsuite.session.gating`: one case against its baseline, with retries while only its time fails.
- :mod:`~perfsuite.session.staging`: a refresh's new baselines, written at the end.
- :mod:`~perfsuite.session.scope`: what runs given this machine's baselines: a refresh of only what is
  missing, within a time limit; a gate that skips cases without a baseline before running them.
- :mod:`~perfsuite.session.benchmark`: pytest-benchmark's rounds from the worker's step times.
- :mod:`~perfsuite.session.results`: what ``--perfsuite-json`` writes.
- :mod:`~perfsuite.session.interrupted`: what an interrupted session keeps and says.
- :mod:`~perfsuite.session.parallel`: the session under pytest-xdist.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from perfsuite.cli.interrupt import Interrupt, terminate_as_interrupt
from perfsuite.core.baselines import BaselineError, MissingBaseline, baseline_path, load_baseline
from perfsuite.core.declaration import find_pyproject, project_baselines_dir, read_pyproject
from perfsuite.core.declaration import load as load_declaration
from perfsuite.core.drift import MIN_CASES, Drift
from perfsuite.core.gates import Outcome, baseline_figures
from perfsuite.core.observation import Observation, observe
from perfsuite.core.pinned import pinned_path
from perfsuite.core.record import CaseRecord
from perfsuite.core.registry import DeclarationError
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import resolve_tolerance
from perfsuite.session.benchmark import record_benchmark
from perfsuite.session.drifts import SessionDrift
from perfsuite.session.gating import gate
from perfsuite.session.interrupted import close_outcomes, summary_lines
from perfsuite.session.results import results_json
from perfsuite.session.runs import RunCache
from perfsuite.session.scope import EMPTY_MATRIX, RefreshBudget
from perfsuite.session.staging import RefreshStager, repeat_while_too_wide


def project_file(config: pytest.Config) -> Path:
    """The project's ``pyproject.toml``: ``--perfsuite-project``'s; else pytest's own config file if it is
    one; else the nearest one at or above the working directory (an option's value such as
    ``--perfsuite-baselines /elsewhere`` can move pytest's rootdir away from the project), then at or
    above the rootdir (a ``pyproject.toml`` without a pytest table is not pytest's)."""
    here = config.invocation_params.dir
    chosen: str | None = config.getoption("perfsuite_project")
    if chosen:
        path: Path = here / chosen
        path = path / "pyproject.toml" if path.is_dir() else path
        if not path.is_file():
            raise pytest.UsageError(f"--perfsuite-project {chosen}: no pyproject.toml there")
        return path.resolve()
    if config.inipath is not None and config.inipath.name == "pyproject.toml":
        return config.inipath
    return find_pyproject(here) or find_pyproject(config.rootpath) or config.rootpath / "pyproject.toml"


def load_settings(path: Path) -> dict[str, Any]:
    """``[tool.perfsuite]`` of ``path`` (empty when there is none), checked: a mistake is a usage error."""
    try:
        return read_pyproject(path)
    except DeclarationError as exc:
        raise pytest.UsageError(str(exc)) from None


class PerfsuiteSession:
    """Registered with the plugin manager as ``perfsuite-session``; one per pytest run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.pyproject = project_file(config)
        self.settings = load_settings(self.pyproject)
        try:
            load_declaration(self.pyproject, self.settings)
        except DeclarationError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.refresh: bool = config.getoption("perfsuite_refresh")
        chosen = config.getoption("perfsuite_baselines")
        self.root = project_baselines_dir(
            self.pyproject.parent, self.settings, (config.invocation_params.dir / chosen).resolve() if chosen else None
        )
        if chosen and not self.root.is_dir() and (self.root.exists() or not self.refresh):
            # A refresh makes the directory; a comparison would run every case to find no baseline there.
            what = "not a directory" if self.root.exists() else "no such directory (a refresh makes one)"
            raise pytest.UsageError(f"--perfsuite-baselines {chosen}: {what}")
        self.missing: str = config.getoption("perfsuite_missing")
        self.time_mode: str = config.getoption("perfsuite_time")
        self.fail_uncompared: bool = config.getoption("perfsuite_uncompared") == "fail"
        self.repeats: int = config.getoption("perfsuite_repeats") if self.refresh else 1
        if self.repeats < 1:
            raise pytest.UsageError("--perfsuite-repeats must be at least 1")
        self.refresh_missing: bool = config.getoption("perfsuite_refresh_missing")
        limit: float | None = config.getoption("perfsuite_refresh_time_limit")
        for name, value in (("missing", self.refresh_missing), ("time-limit", limit)):
            if value not in (None, False) and not self.refresh:
                raise pytest.UsageError(f"--perfsuite-refresh-{name} applies to a refresh: add --perfsuite-refresh")
        if limit is not None and not limit > 0:
            raise pytest.UsageError(
                f"--perfsuite-refresh-time-limit must be a positive number of seconds, not {limit:g}"
            )
        self.explain: bool = config.getoption("perfsuite_explain")
        if self.explain and self.refresh:
            raise pytest.UsageError("--perfsuite-explain explains a gate's failures; a refresh has none")
        self.budget = RefreshBudget(limit) if limit is not None else None
        self.already_complete: dict[str, bool] = {}  # a refresh --missing left out: complete here (True: untimed)
        self.unbaselined: list[str] = []  # cases a gate skipped, --perfsuite-missing=skip: no baseline here
        self.runs = RunCache(config)
        if self.budget is not None:
            self.runs.deadline = self.budget.deadline
        self.drifts = SessionDrift(
            self.settings, lambda hardware, case: baseline_path(self.root, hardware, case), self.time_unit
        )
        self.stager = RefreshStager(self.root, config.rootpath, self.repeats, gate_time=self.time_mode != "off")
        self.outcomes: list[Outcome] = []
        self.benchmark_json: dict[str, Any] | None = None
        self.benchmark_scratch: Path | None = None
        self.selected: list[CaseSpec] = []
        """The matrix cases this session runs, in order (an interrupt reports the rest as not reached)."""
        self.interrupt: Interrupt | None = None
        """What stopped the session from outside; ``None`` until the cases start, and while nothing did."""
        self.interrupted = False
        self.reached: dict[str, str | None] = {}
        """The matrix cases this process ran or skipped: id → why collection skipped it (``None``: to run)."""
        self._signals = contextlib.ExitStack()

    def header(self) -> str:
        """The session's first line: which project it gates, with how many cases, against which baselines."""
        from perfsuite.core import registry

        declared = registry.describe()
        cases = registry.matrix_cases()
        own = len(declared["entries"])
        entries = f"{own} declared entr{'y' if own == 1 else 'ies'}"
        matrix = f"perfsuite's built-in matrix and {entries}" if declared["builtin_matrix"] else entries
        where = (
            self.pyproject
            if self.pyproject.is_file()
            else f"none found (no pyproject.toml at or above {self.config.invocation_params.dir})"
        )
        return f"perfsuite: project {where}: {len(cases)} matrix cases ({matrix}); baselines {self.root}"

    # -- running -------------------------------------------------------------------------

    def records(self, spec: CaseSpec, count: int = 1) -> list[CaseRecord]:
        """``count`` runs of ``spec``, each in a fresh worker; runs already made this session are reused."""
        return self.runs.get(spec, count)

    def record(self, spec: CaseSpec) -> CaseRecord:
        """One run of ``spec`` (cached): what tests of a strategy's claims look at (under pytest-xdist,
        made beside other tests: its memory and loss, not its time)."""
        return self.runs.get(spec, timed=False)[0]

    def prefetch(self, specs: list[CaseSpec]) -> None:
        """Start the GPU cases' first runs on the GPU pool (:meth:`RunCache.prefetch`); not under
        a refresh's time limit, which decides case by case whether one more fits."""
        if self.budget is None:
            self.runs.prefetch(specs)

    def measure_first(self, specs: list[CaseSpec], progress: Callable[[str], None]) -> None:
        """Run each CPU case once before any test is gated (:meth:`RunCache.run_each_once`: side by side,
        a core each, where there are cores for it).

        A CPU case's step time is gated against the session's drift, the median change of
        all its cases (:mod:`perfsuite.core.drift`), which is known only once they have all run.
        Nothing else runs meanwhile (the tests come after). Fewer than
        :data:`~perfsuite.core.drift.MIN_CASES` cases, or a refresh, run in their tests as before.
        """
        unique = list(dict.fromkeys(specs))
        if self.refresh or len(unique) < MIN_CASES:
            return
        if not self.drifts.gates_any(unique):
            return  # no case is gated against the drift (time_drift_limit 0): each runs in its test
        heading = f"perfsuite: running {len(unique)} CPU case(s) first; their median change is the session's drift"
        self.runs.run_each_once(unique, progress, heading)
        self.drifts.measured = [(spec, self.runs.get(spec)[0]) for spec in unique]

    def drift(self, record: CaseRecord) -> Drift | None:
        """The session's drift for ``record``'s group (``None`` when no case was run first)."""
        return self.drifts.of(record)

    def drift_lines(self) -> list[str]:
        """One line per group whose drift was estimated, for the summary."""
        return self.drifts.lines()

    def summary_notes(self) -> list[str]:
        """The lines under the summary table: the session's drift, then where the runs' time went."""
        from perfsuite.reports.walltime import wall_time_line

        spent = wall_time_line(r for outcome in self.outcomes for r in outcome.records)
        return self.drift_lines() + ([spent] if spent is not None else [])

    def catch_signals(self, specs: list[CaseSpec]) -> None:
        """From here to the session's end, SIGTERM (a CI job's time limit) stops it as Ctrl-C does
        (:mod:`perfsuite.cli.interrupt`): the run in flight is dropped and what finished is reported."""
        self.selected = list(dict.fromkeys(specs))
        if threading.current_thread() is threading.main_thread():  # where Python lets a handler be set
            self.interrupt = self._signals.enter_context(terminate_as_interrupt())

    def release_signals(self) -> None:
        """The signal handlers the session had before :meth:`catch_signals`, back."""
        self._signals.close()

    def close(self, *, interrupted: bool = False) -> None:
        """Stop runs nobody waits for any more; after an interrupt, every worker and the forkserver,
        and every selected case gets an outcome (those not gated: not reached, with their runs)."""
        self.runs.close()
        self.interrupted = interrupted
        if interrupted:
            from perfsuite.session.parallel import is_worker
            from perfsuite.worker.process import stop_workers

            stop_workers()
            if self.reached or not is_worker(self.config):  # an xdist worker: the one that ran cases
                close_outcomes(self.outcomes, self.selected, self.runs.records)

    def interrupted_lines(self) -> list[str]:
        """What the summary says of an interrupted session, after its table."""
        signal = self.interrupt.name if self.interrupt is not None and self.interrupt.signum else None
        json = self.config.getoption("perfsuite_json")
        return summary_lines(self.outcomes, refresh=self.refresh, signal=signal, json=json)

    def time_unit(self, device_type: str) -> str:
        if self.time_mode in ("auto", "off"):
            return "calibrated" if device_type == "cpu" else "s"
        return "calibrated" if self.time_mode == "calibrated" else "s"

    # -- the matrix test -----------------------------------------------------------------

    def check(self, spec: CaseSpec | None, benchmark: Any = None) -> None:
        """Run ``spec`` and gate its time, memory and loss against the baseline (or stage a refresh)."""
        if spec is None:  # the matrix declares no case (perfsuite.plugin.pytest_generate_tests)
            pytest.fail(EMPTY_MATRIX, pytrace=False)
        outcome = Outcome(case=spec.id, status="failed")
        self.outcomes.append(outcome)
        if self.budget is not None and (why := self.budget.why_not(spec.id)) is not None:
            outcome.status, outcome.message = "not reached", f"{spec.id}: {why}"
            pytest.skip(outcome.message)
        started = time.monotonic()
        runs = self.records(spec, self.repeats)
        if self.budget is not None:
            stopped = self.budget.why_stopped(spec.id, runs)
            self.budget.ran(time.monotonic() - started)
            if stopped is not None:
                outcome.status, outcome.message = stopped[0], f"{spec.id}: {stopped[1]}"
                if outcome.status == "failed":
                    pytest.fail(outcome.message, pytrace=False)
                pytest.skip(outcome.message)
        outcome.records = list(runs)
        bad = next((r for r in runs if not r.ok), None)
        if bad is not None:
            outcome.message = f"{spec.id}: {bad.status}: {bad.error}"
            if bad.status == "skipped":
                outcome.status = "skipped"
                pytest.skip(outcome.message)
            pytest.fail(outcome.message, pytrace=False)
        hardware = str(runs[0].hardware)
        outcome.hardware = hardware
        try:
            observations = [self._observe(r) for r in runs]
        except ValueError as exc:
            outcome.message = str(exc)
            pytest.fail(outcome.message, pytrace=False)
        time_class = observations[0].time_class
        if benchmark is not None:
            record_benchmark(benchmark, runs, observations, hardware)
        tolerance = resolve_tolerance(
            self.settings, hardware=hardware, case_id=spec.id, precision=str(runs[0].precision), time_class=time_class
        )
        path = baseline_path(self.root, hardware, spec.id)
        if self.refresh:
            if self.time_mode != "off":
                if self.stager.records_time(path, spec.id, hardware, time_class, tolerance):  # not where untimed
                    repeat_while_too_wide(observations, tolerance, partial(self._repeat, spec), self.budget, started)
                runs = outcome.records = list(self.runs.records[spec])
                if self.budget is not None:
                    self.budget.ran(time.monotonic() - started)
            refused = self.stager.stage(spec, runs, observations, path, hardware, outcome, tolerance)
            if refused is not None:
                outcome.message = f"{spec.id}: not recorded: {refused}"
                pytest.fail(outcome.message, pytrace=False)
            if benchmark is not None:
                self.stager.staged_benchmarks[benchmark.fullname] = (hardware, time_class)
            return
        try:
            baseline = load_baseline(path, case_id=spec.id, hardware=hardware)
        except BaselineError as exc:  # failed outside the handler: a message said once, not chained
            outcome.status, outcome.message = "missing" if isinstance(exc, MissingBaseline) else "failed", str(exc)
            baseline = None
        if baseline is None:
            if outcome.status == "missing" and self.missing == "skip":
                pytest.skip(outcome.message)
            pytest.fail(outcome.message, pytrace=False)
        outcome.baseline = baseline_figures(baseline, time_class)
        outcome.tolerance = dataclasses.asdict(tolerance)

        def rerun() -> tuple[CaseRecord, Observation | None]:
            record = self.runs.run(spec, fresh_layout=True)
            return record, self._observe(record) if record.ok else None

        gate(
            spec.id,
            baseline,
            observations[0],
            tolerance,
            outcome,
            hardware=hardware,
            fail_uncompared=self.fail_uncompared,
            drift=self.drift(runs[0]),
            gate_time=self.time_mode != "off",
            rerun=rerun,
        )
        failures = [c.message for c in outcome.checks if not c.ok]
        if failures and self.explain:
            failures += self._explained(spec, baseline, path, outcome, tolerance)
        if failures:
            outcome.message = "\n".join(failures)
            pytest.fail(outcome.message, pytrace=False)
        outcome.status = "passed"

    def _explained(
        self, spec: CaseSpec, baseline: Mapping[str, Any], path: Path, outcome: Outcome, tolerance: Any
    ) -> list[str]:
        """``--perfsuite-explain``'s lines for a failing case (:mod:`perfsuite.session.explaining`)."""
        from perfsuite.core.spec import DEFAULTS
        from perfsuite.session.explaining import Failure, explain_failure

        timeout = DEFAULTS["cpu" if spec.device == "cpu" else "cuda"].timeout
        failure = Failure(spec, baseline, outcome.records[-1], outcome.checks, tolerance, path, self.pyproject.parent)
        try:
            return explain_failure(failure, timeout_s=timeout)
        except Exception as exc:  # the verdict stands whatever the explanation does
            return [f"explain: could not explain: {type(exc).__name__}: {exc}"]

    def _repeat(self, spec: CaseSpec, count: int) -> Observation | None:
        """The observation of ``spec``'s ``count``-th run (made now), ``None`` when it did not run or finish."""
        runs = self.records(spec, count)
        return self._observe(runs[-1]) if len(runs) == count and runs[-1].ok else None

    def _observe(self, record: CaseRecord) -> Observation:
        return observe(record, time_unit=self.time_unit(str(record.device)))

    # -- end of session ------------------------------------------------------------------

    def note_case(self, spec: CaseSpec, skipped: str | None) -> None:
        """A matrix case this process reached, with why collection skipped it (``None``: to run)."""
        self.reached[spec.id] = skipped

    def nothing_gated(self) -> str | None:
        """The line that fails a gate whose matrix cases were all skipped (a refresh gates nothing)."""
        from perfsuite.session.scope import nothing_gated

        if self.refresh or self.config.option.collectonly or self.interrupted:  # each says so itself
            return None
        return nothing_gated(self.reached, self.outcomes)

    def gated_exit(self, exitstatus: int) -> int:
        """``exitstatus``, or a failure where it would pass but the gate gated nothing."""
        if exitstatus == pytest.ExitCode.OK and self.nothing_gated() is not None:
            return pytest.ExitCode.TESTS_FAILED
        return exitstatus

    def report_nothing_gated(self, terminalreporter: Any, markdown: Path | None) -> None:
        """Say that nothing was gated, on the terminal and, when no case ran, in ``--perfsuite-markdown``'s file."""
        nothing = self.nothing_gated()
        if nothing is None:
            return
        terminalreporter.write_line(nothing)
        if markdown is not None and not self.outcomes:
            markdown.parent.mkdir(parents=True, exist_ok=True)
            markdown.write_text(f"**{nothing}**\n")

    @property
    def written(self) -> list[Path]:
        return self.stager.written

    def write_staged(self) -> None:
        """Write every staged baseline (each atomically), then merge the pinned pytest-benchmark files."""
        self.stager.write(self.benchmark_json)

    def pinned_benchmark(self, hardware: str, time_class: str) -> Path:
        return pinned_path(self.root, hardware, time_class)

    def results_json(self) -> dict[str, Any]:
        """What ``--perfsuite-json`` writes: every matrix case's status, checks and run records."""
        return results_json(
            repository=self.config.rootpath, baselines=self.root, refresh=self.refresh, drift=self.drifts.as_json(),
            outcomes=self.outcomes,
        )  # fmt: skip
