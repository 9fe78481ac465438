"""Isolation: a crashing, hanging or failing case fails alone and the run goes on."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import fault_cases
import pytest

from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.worker.process import run_in_worker, run_isolated, start_forkserver

SPEC = CaseSpec(model="tiny-bert", strategy="vanilla")


def test_each_case_runs_in_its_own_process() -> None:
    a = run_isolated(SPEC, timeout_s=60, target=fault_cases.ok)
    b = run_isolated(SPEC, timeout_s=60, target=fault_cases.ok)
    assert a.status == b.status == "ok"
    assert len({a.pid, b.pid, os.getpid()}) == 3
    assert b.worker_startup_s is not None
    assert b.worker_startup_s < 2.0


def test_a_case_starts_its_own_processes_as_a_training_script_would() -> None:
    """A forkserver's child inherits "forkserver" as its default start method; the worker gives
    the case the platform's, so that a DataLoader with workers (the Trainer's) forks them on
    Linux as in a user's script, instead of booting a forkserver of its own (about 1 s)."""
    import multiprocessing

    answer = run_in_worker(SPEC, timeout_s=60, target=fault_cases.start_method)  # not a case's record
    assert answer["status"] == "ok", answer["error"]
    assert answer["start_method"] == multiprocessing.get_all_start_methods()[0]
    if answer["start_method"] == "fork":
        assert answer["first_batch_s"] < 0.5, answer["first_batch_s"]


def test_crash_hang_and_oom_fail_their_case_and_the_run_continues() -> None:
    targets = [fault_cases.crash, fault_cases.ok, fault_cases.hang, fault_cases.out_of_memory, fault_cases.ok]
    # The forkserver up first: a case's limit covers its worker's start, and a boot (9 s on the
    # slowest 2-core class) would otherwise spend each 5 s limit before the case starts.
    start_forkserver()
    started = time.monotonic()
    records = [run_isolated(SPEC, timeout_s=5, target=t) for t in targets]
    assert [r.status for r in records] == ["failed", "ok", "failed", "failed", "ok"]
    assert records[0].error == "worker killed by signal SIGABRT"
    assert records[2].error == "timed out after 5 s; worker killed"
    assert (records[3].error or "").startswith("out of memory: CUDA out of memory")
    assert all(r.model == "tiny-bert" and r.strategy == "vanilla" for r in records)
    assert time.monotonic() - started < 30  # the hang was cut at its timeout


def test_a_forkserver_whose_imports_hang_fails_the_case_at_its_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker starts once its forkserver has imported everything; an import or a CPU Adam build
    that hangs there would hang the run with no word. The case's time limit covers its worker's start,
    and its message names that limit (a short one runs out during a slow boot too)."""
    from perfsuite.core.preloads import ENV
    from perfsuite.worker.process import ForkserverHung, renew_forkserver

    monkeypatch.setenv(ENV, "hangs_at_import")
    here = str(Path(fault_cases.__file__).parent)  # for the forkserver's own interpreter
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    renew_forkserver()
    try:
        started = time.monotonic()
        record = run_isolated(SPEC, timeout_s=3, target=fault_cases.ok)
        assert time.monotonic() - started < 15
        assert record.status == "failed"
        assert (record.error or "").startswith(
            "its time limit (3 s) ran out while the worker's forkserver was still importing what the session's "
            "cases need: give it a longer one"
        )
        with pytest.raises(ForkserverHung, match="did not finish its imports in 1 s and was stopped"):
            start_forkserver(limit_s=1)  # a boot of its own: no case's limit to blame
    finally:
        monkeypatch.undo()
        renew_forkserver()
    assert run_isolated(SPEC, timeout_s=60, target=fault_cases.ok).status == "ok"  # a new forkserver


def test_a_forkserver_whose_imports_raise_fails_the_case_saying_what_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forkserver ignores an ImportError among its preloads and dies of any other exception,
    which a worker's start sees only as an EOFError: the case says what raised, and where."""
    from perfsuite.worker import process

    here = str(Path(fault_cases.__file__).parent)  # for the forkserver's own interpreter
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    # First, so that each boot dies before importing torch (the error is the same after it).
    monkeypatch.setattr(process, "_PRELOAD", ["raises_at_import", *process._PRELOAD])
    process.renew_forkserver()
    try:
        record = run_isolated(SPEC, timeout_s=120, target=fault_cases.ok)
        assert record.status == "failed"
        assert (record.error or "").startswith(
            "the worker's forkserver exited during its imports: ValueError: this module refuses to import"
        )
        assert "raises_at_import.py" in (record.error or "")
        with pytest.raises(process.ForkserverDied):
            process.start_forkserver()
    finally:
        monkeypatch.undo()
        process.renew_forkserver()
    assert run_isolated(SPEC, timeout_s=60, target=fault_cases.ok).status == "ok"  # a new forkserver


def test_a_record_of_the_wrong_shape_fails_its_case_saying_which_value() -> None:
    record = run_isolated(SPEC, timeout_s=30, target=fault_cases.wrong_record)
    assert record.status == "failed"
    assert (record.error or "").startswith("its record: ")
    assert "applied is None" in (record.error or "")
    assert record.wall_s is not None  # the worker's diagnostics are kept


def test_skip_carries_its_reason() -> None:
    record = run_isolated(SPEC, timeout_s=30, target=fault_cases.skip)
    assert record.status == "skipped"
    assert record.error == "needs an H100"


WORKER_KEYS = ["worker_startup_s", "wall_s", "preloaded", "warnings", "output"]
"""What the worker adds to its case's record, last and in this order."""


def test_the_worker_adds_its_start_up_wall_time_preloads_warnings_and_output_last() -> None:
    """The typed record writes the same JSON as the worker's answer, key for key (its timings and pid aside)."""
    sent = run_in_worker(SPEC, timeout_s=60, target=fault_cases.warns)
    record = run_isolated(SPEC, timeout_s=60, target=fault_cases.warns)
    written = record.to_json()
    assert list(written) == list(sent) == [*fault_cases.ok(SPEC), *WORKER_KEYS]
    timings = {"pid": 0, "worker_startup_s": 0, "wall_s": 0}
    assert json.dumps({**written, **timings}) == json.dumps({**sent, **timings})
    caught = [w for w in record.warnings if w.message == "a case's warning"]
    assert [(w.category, w.count) for w in caught] == [("UserWarning", 2)]
    assert "a note from the case" in (record.output or "")
    for target in (fault_cases.wrong_record, fault_cases.skip, fault_cases.crash):
        failed = run_isolated(SPEC, timeout_s=30, target=target).to_json()
        assert list(failed) == ["model", "strategy", "engine", "world_size", "status", "error", *WORKER_KEYS]


def test_a_worker_that_prints_more_than_its_record_keeps_says_its_output_was_cut() -> None:
    from perfsuite.worker.process import OUTPUT_LIMIT

    sent = run_in_worker(SPEC, timeout_s=60, target=fault_cases.chatty)
    record = run_isolated(SPEC, timeout_s=60, target=fault_cases.chatty)
    assert record.output is not None
    assert len(record.output) == OUTPUT_LIMIT
    assert record.output.rstrip().endswith("line 2999 of a chatty case")  # the end, where errors are
    assert record.output_truncated
    assert list(record.to_json())[-1] == list(sent)[-1] == "output_truncated"
    assert CaseRecord.from_json(record.to_json(), SPEC.id).output_truncated
    assert not run_isolated(SPEC, timeout_s=60, target=fault_cases.warns).output_truncated


def test_case_spec_rejects_unknown_names_before_any_worker_starts() -> None:
    with pytest.raises(ValueError, match="valid: tiny-bert|valid: bert-base-uncased"):
        CaseSpec(model="tiny-mamba", strategy="vanilla")
    with pytest.raises(ValueError, match="unknown strategy 'fp12'"):
        CaseSpec(model="tiny-bert", strategy="fp12")


def test_a_worker_whose_start_a_stop_overlapped_does_not_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt's stop kills the workers whose pid it knows; one still starting (forked, its
    pid not yet read back from the forkserver) is killed as soon as its start returns."""
    import multiprocessing.context

    from perfsuite.worker import process

    real_start = multiprocessing.context.ForkServerProcess.start

    def start_overlapped_by_a_stop(self: multiprocessing.context.ForkServerProcess) -> None:
        real_start(self)
        monkeypatch.setattr(process, "_STOPS", process._STOPS + 1)  # the stop came meanwhile, this pid unknown to it

    monkeypatch.setattr(multiprocessing.context.ForkServerProcess, "start", start_overlapped_by_a_stop)
    record = run_isolated(SPEC, timeout_s=60, target=fault_cases.ok)
    assert record.status == "failed"
    assert record.error == "worker killed by signal SIGKILL"
    monkeypatch.undo()
    assert run_isolated(SPEC, timeout_s=60, target=fault_cases.ok).status == "ok"  # a later run is not stopped
