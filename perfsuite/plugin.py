"""perfsuite's pytest plugin (entry point ``pytest11``): options, markers, the matrix, the summary.

Hooks and fixtures only; run state lives in :class:`perfsuite.session.PerfsuiteSession`.
Torch is imported inside workers (and, for GPU facts, only when pytest-benchmark asks),
so ``pytest --help`` and collection stay fast.
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from perfsuite.cli.options import add_plugin_options
from perfsuite.core import registry
from perfsuite.core.engines import ENGINES, OWN_ENGINES
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec, tier_spec
from perfsuite.core.strategies import OPTIONAL_PACKAGES
from perfsuite.session.collection import MARKER_OF_MODULE, NO_GPU, NOT_FOR_HERE, mark_unrunnable, skipped_why
from perfsuite.session.scope import gpu_tier_selected

MARKERS = {
    "cpu": "CPU tier: real training runs of the tiny models",
    "gpu": "full-size models on a CUDA GPU (skipped without one)",
    "slow": "takes more than a few seconds",
    "nightly": "too long for every push: deselected by default, run with `pytest -m nightly`",
    # One per engine of perfsuite's own beyond the default, named for it.
    **{n: f"the case runs through {e.title} (ids end in -{n})" for n, e in OWN_ENGINES.items() if n != ENGINES[0]},
    "distributed": "the case launches its ranks as processes (ids end in -ws<N> beyond one rank)",
    "scope": "scope(name): the smallest perfsuite scope the test belongs to (push, nightly, weekly; default push)",
    "alone": "times something itself: under pytest-xdist no other test runs meanwhile",
    # One per optional package, named for its extra.
    **{p.extra: f"needs {p.distribution} installed" for p in OPTIONAL_PACKAGES},
}
_SESSION = "perfsuite-session"
_REGISTRY = pytest.StashKey[registry.Snapshot]()
_WORKER = "perfsuite-xdist-worker"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from perfsuite import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfsuite", "perfsuite: step time, memory and loss against stored baselines")
    add_plugin_options(group)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # Before any conftest.py declares models or cases: what this session adds is undone at its end.
    early_config.stash[_REGISTRY] = registry.snapshot()


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark reads its options
def pytest_configure(config: pytest.Config) -> None:
    from perfsuite.session import PerfsuiteSession, parallel

    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    parallel.check(config)
    session = PerfsuiteSession(config)  # reads [tool.perfsuite], the project's declarations included
    config.pluginmanager.register(session, _SESSION)
    if parallel.is_worker(config):
        worker = parallel.Worker(config)
        config.pluginmanager.register(worker, _WORKER)
        session.runs.alone, session.runs.beside_others = worker.alone, True
        session.runs.ahead = functools.partial(_boot_ahead, config)
    elif parallel.distributing(config):
        config.pluginmanager.register(parallel.Controller(config), parallel.CONTROLLER)
    for marker in sorted({m for case in registry.matrix_cases() for m in case.markers} - set(MARKERS)):
        config.addinivalue_line("markers", f"{marker}: declared in a perfsuite matrix entry")
    if not hasattr(config.option, "benchmark_compare"):  # pytest-benchmark not installed, or -p no:benchmark
        from perfsuite.session.benchmark import WithoutPytestBenchmark

        config.pluginmanager.register(WithoutPytestBenchmark(), "perfsuite-without-pytest-benchmark")
        return
    if config.option.benchmark_compare is True:
        if gpu_tier_selected(config) and config.getoption("perfsuite_no_gpu") == "fail":
            from perfsuite.worker.device import cuda_usable

            if not cuda_usable():  # what is wrong, rather than the missing CPU file it would compare with
                raise pytest.UsageError(NO_GPU)
        # A bare --benchmark-compare would take "the latest saved run", letting slowdowns creep in
        # night by night; compare against the file pinned next to this hardware's baselines instead.
        from perfsuite.core.pinned import compare_problem

        hardware, time_class = _local_hardware()
        pinned = session.pinned_benchmark(hardware, time_class)
        if (problem := compare_problem(pinned, time_class)) is not None:
            raise pytest.UsageError(f"--benchmark-compare: {problem}")
        config.option.benchmark_compare = str(pinned)
    if session.refresh:
        from perfsuite.session.benchmark import JsonTarget, SavedNothingIsNoWarning

        config.pluginmanager.register(SavedNothingIsNoWarning(), "perfsuite-refresh-saved-nothing")
        if config.option.benchmark_json is None:
            # pytest-benchmark builds its JSON (machine_info included) only when asked to write one.
            session.benchmark_scratch = Path(tempfile.mkdtemp(prefix="perfsuite-")) / "benchmark.json"
            scratch = "a scratch file, which perfsuite merges into each time class's pinned pytest-benchmark file"
            config.option.benchmark_json = JsonTarget(session.benchmark_scratch, label=scratch)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: no workers for a session that needs one process (a refresh, the GPU tier), else
    xdist's own count."""
    from perfsuite.session.parallel import one_process_only

    return 0 if one_process_only(config) is not None else None


def pytest_report_header(config: pytest.Config) -> str:
    """Which project the session gates (its ``pyproject.toml``), how many cases, and where their baselines are."""
    return str(_session(config).header())


def _local_hardware() -> tuple[str, str]:
    from perfsuite.core.hardware import hardware_key, time_class
    from perfsuite.worker.device import get_device

    device = get_device("auto")
    return hardware_key(device.type, device.name), time_class(device.type, device.name)


def _session(config: pytest.Config) -> Any:
    return config.pluginmanager.get_plugin(_SESSION)


def pytest_unconfigure(config: pytest.Config) -> None:
    saved = config.stash.get(_REGISTRY, None)
    if saved is not None:
        registry.restore(saved)
    if _session(config) is not None:
        _session(config).release_signals()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``perfsuite_case`` with the declared matrix (:func:`perfsuite.core.registry.matrix_cases`),
    ids ``<model>-<strategy>`` (``-trainer`` through the Trainer)."""
    if "perfsuite_case" not in metafunc.fixturenames:
        return
    cases = [_param(case) for case in registry.matrix_cases()]
    if not cases and not metafunc.config.getoption("perfsuite_refresh"):  # a refresh says "nothing to refresh"
        # One that fails saying so (the CPU tier's, as -m cpu selects it), never pytest's quiet skip.
        cases = [pytest.param(None, id="no-case", marks=[pytest.mark.cpu, _UNTIMED_OK])]
    metafunc.parametrize("perfsuite_case", cases)


_UNTIMED_OK = pytest.mark.filterwarnings("ignore:Benchmark fixture was not used")
"""A case ended before its timing never calls pytest-benchmark's fixture: its failure says why, not a warning."""


def _param(case: registry.MatrixCase) -> Any:
    spec = tier_spec(case.model, case.strategy, case.engine, world_size=case.world_size)
    marks = [pytest.mark.cpu if spec.device == "cpu" else pytest.mark.gpu, pytest.mark.scope(case.scope), _UNTIMED_OK]
    if spec.launches_ranks:
        marks.append(pytest.mark.distributed)
    if case.engine != ENGINES[0]:
        marks.append(getattr(pytest.mark, case.engine))
    marks += [getattr(pytest.mark, marker) for marker in case.markers]
    requires = spec.strategy_spec.requires
    marks += [getattr(pytest.mark, MARKER_OF_MODULE[m]) for m in requires if m in MARKER_OF_MODULE]
    return pytest.param(spec, id=spec.id, marks=marks)


@pytest.hookimpl(trylast=True)  # after -m/-k deselected: torch is imported only when a gpu test remains
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from perfsuite.session.scope import select_scope, select_shard

    if config.getoption("perfsuite_shard"):
        select_shard(config, items, config.getoption("perfsuite_shard"), _case_of)
    if config.getoption("perfsuite_scope"):
        select_scope(config, items, config.getoption("perfsuite_scope"))
    if config.getoption("perfsuite_refresh_missing") or config.getoption("perfsuite_missing") == "skip":
        from perfsuite.session.scope import select_by_baselines

        select_by_baselines(config, items, _session(config), _case_of)
    mark_unrunnable(config, items, {item.nodeid: spec for item in items if (spec := _case_of(item)) is not None})


def pytest_runtest_protocol(item: pytest.Item) -> None:
    """A matrix case this process runs or skips counts towards whether the session gated anything."""
    spec = _case_of(item)
    if spec is not None and not item.stash.get(NOT_FOR_HERE, False):
        _session(item.config).note_case(spec, skipped_why(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    try:
        return (yield)
    except KeyboardInterrupt:  # a case stopped before its timing did not leave pytest-benchmark's fixture unused
        if _case_of(item) is not None and (timer := getattr(item, "funcargs", {}).get("benchmark")) is not None:
            timer.skipped = True
        raise


def _case_of(item: pytest.Item) -> CaseSpec | None:
    callspec = getattr(item, "callspec", None)
    spec = callspec.params.get("perfsuite_case") if callspec is not None else None
    return spec if isinstance(spec, CaseSpec) else None


@pytest.fixture(scope="session")
def perfsuite(pytestconfig: pytest.Config) -> Any:
    """The session's :class:`~perfsuite.session.PerfsuiteSession`: ``check(spec, benchmark)``, ``record(spec)``."""
    return _session(pytestconfig)


@pytest.hookimpl(trylast=True)
def pytest_perfsuite_run_case(
    config: pytest.Config, spec: CaseSpec, timeout_s: float, env: dict[str, str]
) -> CaseRecord:
    from perfsuite.worker.process import run_isolated

    return run_isolated(spec, timeout_s=timeout_s, env=env)


def _boot_ahead(config: pytest.Config, renew: bool) -> bool:
    """Boot this process's forkserver (renewed first with ``renew``), unless a conftest's
    ``pytest_perfsuite_run_case`` serves too: its runs may start no worker of ours (``False``)."""
    runners = config.hook.pytest_perfsuite_run_case.get_hookimpls()
    if any(impl.function is not pytest_perfsuite_run_case for impl in runners):
        return False
    from perfsuite.worker.process import ForkserverHung, renew_forkserver, start_forkserver

    if renew:
        renew_forkserver()
    try:
        start_forkserver()
    except ForkserverHung:  # each run tries again, failing its case within its limit, saying why
        return False
    return True


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before any test runs: GPU cases start on the GPU pool, side by side (each test then waits
    for its own); CPU cases run once each, so that the session's drift is known when they are gated."""
    if session.config.option.collectonly:
        return
    cases = [
        (params["perfsuite_case"], item.get_closest_marker("gpu") is not None)
        for item in session.items
        if (params := getattr(getattr(item, "callspec", None), "params", {})).get("perfsuite_case") is not None
        and not item.get_closest_marker("skip")
    ]
    state = _session(session.config)
    from perfsuite.core.preloads import preload_for

    if cases:
        state.catch_signals([spec for spec, _ in cases])  # SIGTERM stops the session as Ctrl-C does
    preload_for(spec for spec, _ in cases)  # before the first worker boots the forkserver
    from perfsuite.worker.preflight import preflight  # the project's own models and engines, before any case

    if (problem := preflight(spec for spec, _ in cases)) is not None:
        raise pytest.UsageError(problem)
    gpu = [spec for spec, on_gpu in cases if on_gpu]
    if gpu:
        state.prefetch(gpu)
    cpu = [spec for spec, on_gpu in cases if not on_gpu]
    if cpu:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        worker = session.config.pluginmanager.get_plugin(_WORKER)

        def progress(line: str) -> None:
            if session.config.get_verbosity() < 0:
                return
            if worker is not None:
                worker.show(line)
            elif reporter is not None:
                reporter.write_line(line)

        if worker is not None:  # first in the worker whose tests read them
            state.runs.first = lambda: state.measure_first(cpu, progress=progress)
        else:
            state.measure_first(cpu, progress=progress)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """pytest-benchmark's machine_info knows the CPU only: add the GPU, driver, CUDA and library versions."""
    from perfsuite.worker.env import environment

    env = environment("auto")
    machine_info["perfsuite"] = {
        "device": env["device"],
        "cuda": env["cuda"],
        "driver": env["driver"],
        "versions": env["versions"],
    }


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    session = _session(config)
    if session.refresh:
        session.benchmark_json = json.loads(json.dumps(output_json, default=str))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = _session(session.config)
    state.close(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    if state.refresh and exitstatus != pytest.ExitCode.INTERRUPTED:
        state.write_staged()
        if state.stager.unwritten:  # a pinned file it could not read: said in the summary
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if state.already_complete and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK  # --missing found every selected case complete: nothing to do
    session.exitstatus = state.gated_exit(session.exitstatus)  # a GPU gate that measured nothing fails
    scratch = getattr(state, "benchmark_scratch", None)
    if scratch is not None:
        scratch.unlink(missing_ok=True)
        scratch.parent.rmdir()
    worker = session.config.pluginmanager.get_plugin(_WORKER)
    if worker is not None:  # an xdist worker prints nothing: the controller prints what it sends
        from perfsuite.session.parallel import Recorder

        recorder = Recorder()
        _summarize(recorder, session.exitstatus, session.config)
        wrote = bool(_session(session.config).outcomes) and session.config.getoption("perfsuite_json") is not None
        worker.send_summary(recorder.written, session.exitstatus, wrote_results=wrote)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(_WORKER):
        _summarize(terminalreporter, exitstatus, config)


def _summarize(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The perfsuite section of the summary, and the files asked for (``--perfsuite-json``, ``--perfsuite-report``,
    ``--perfsuite-markdown``)."""
    from perfsuite.reports.tables import gate_markdown, gate_text
    from perfsuite.session.results import write_without_cases
    from perfsuite.session.scope import left_complete

    state = _session(config)
    if state.already_complete:
        terminalreporter.write_line(left_complete(state.already_complete))
    state.report_nothing_gated(terminalreporter, config.getoption("perfsuite_markdown"))
    if not state.outcomes:
        if (said := write_without_cases(config, state)) is not None:
            terminalreporter.write_line(said)
        return
    terminalreporter.section("perfsuite")
    unbaselined = len(state.unbaselined)
    terminalreporter.write(
        gate_text(state.outcomes, refresh=state.refresh, notes=state.summary_notes(), unbaselined=unbaselined)
    )
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        for line in state.interrupted_lines():
            terminalreporter.write_line(line)
    elif state.refresh:
        terminalreporter.write_line(state.stager.written_line())
        for line in state.stager.unwritten:
            terminalreporter.write_line(f"perfsuite: {line}")
    if state.refresh:
        left = state.budget.summary() if state.budget is not None else None
        if left is not None:
            terminalreporter.write_line(left)
    markdown = config.getoption("perfsuite_markdown")
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        nothing = state.nothing_gated()  # first, as on the terminal: the summary's "passed" counts skips
        markdown.write_text(
            (f"**{nothing}**\n\n" if nothing else "")
            + gate_markdown(state.outcomes, refresh=state.refresh, notes=state.summary_notes(), unbaselined=unbaselined)
        )
    results = config.getoption("perfsuite_json")
    report = config.getoption("perfsuite_report")
    payload = state.results_json() if results is not None or report is not None else {}
    if results is not None:
        from perfsuite.core.baselines import write_json_atomic

        write_json_atomic(results, payload)
    if report is not None and not state.refresh:
        from perfsuite.core.results import parse_results
        from perfsuite.core.results_file import ResultsError
        from perfsuite.reports import write_report
        from perfsuite.reports.charts import ReportExtraMissing

        try:
            written = write_report(parse_results(payload, "this pytest session"), report)
        except (ResultsError, ReportExtraMissing) as exc:  # its own payload, read as any results file is
            terminalreporter.write_line(f"perfsuite: no report: {exc}")
        else:
            terminalreporter.write_line("wrote " + ", ".join(str(p) for p in written))
