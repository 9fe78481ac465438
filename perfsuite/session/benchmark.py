"""pytest-benchmark's side of a case: the rounds it records are the step times the worker measured."""

from __future__ import annotations

import os
import warnings
from collections.abc import Generator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from perfsuite.core.observation import Observation
from perfsuite.core.record import CaseRecord


def record_benchmark(benchmark: Any, runs: list[CaseRecord], observations: list[Observation], hardware: str) -> None:
    """Give pytest-benchmark the real step times the worker measured (device timer: CUDA events on a GPU).

    pytest-benchmark times a callable in this process; a case trains in a worker (so a
    crash or OOM fails only that case), so its rounds are handed over instead: one round
    per timed optimizer step, over every repeat. Memory and loss go into ``extra_info``.
    """
    if getattr(benchmark, "disabled", False):  # --benchmark-disable, and under pytest-xdist: used, recording nothing
        benchmark._mode = "perfsuite: disabled"
        return
    make_stats = getattr(benchmark, "_make_stats", None)
    if make_stats is None or not hasattr(benchmark, "_mode"):
        raise RuntimeError(
            "this pytest-benchmark's BenchmarkFixture has no _make_stats/_mode; "
            "perfsuite supports pytest-benchmark 4 and 5"
        )
    # What benchmark(...)/pedantic(...) do, minus timing a callable here: mark the fixture used, add rounds.
    benchmark._mode = "perfsuite: step times measured in the case's worker"
    stats = make_stats(1)
    for record in runs:
        for duration in record.timed().samples:
            stats.update(duration)
    first = observations[0]
    benchmark.extra_info.update(
        {
            "hardware": hardware,
            "time_class": first.time_class,
            "time_unit": first.time_unit,
            "time": [o.time for o in observations],
            "peak_memory_bytes": first.peak_bytes,
            "memory_breakdown_bytes": dict(first.breakdown),
            "loss": list(first.losses),
        }
    )


class JsonTarget(os.PathLike[str]):
    """Where pytest-benchmark writes its JSON, in the form either of its versions takes.

    ``--benchmark-json`` is an open file up to pytest-benchmark 5.2 (``with self.json as fh``)
    and a path from 5.3 (``open(self.json, "wb")``). A refresh sets it itself, so the object
    must work both ways: 5.2.3 with a plain ``Path`` failed every refresh on a GPU image
    (Python 3.12 warns on ``Path.__enter__``; 3.11 has no ``Path.write``).
    """

    def __init__(self, path: Path, label: str | None = None) -> None:
        self.path = path
        self.label = label
        """What pytest-benchmark's "Wrote benchmark data in: ..." line names (default: the path)."""
        self._file: BinaryIO | None = None

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return self.label or str(self.path)

    def __enter__(self) -> BinaryIO:
        self._file = self.path.open("wb")
        return self._file

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()


class SavedNothingIsNoWarning:
    """A plugin for a refresh, which always has pytest-benchmark write its JSON: a refresh that ran
    no case says so itself (``perfsuite baselines refresh`` exits 2 saying what selected nothing),
    where pytest-benchmark's note that it saved nothing is a warning, and a traceback where
    warnings are errors (a project's ``filterwarnings = error``)."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self) -> Generator[None, None, None]:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message="Not saving anything, no benchmarks have been run", category=pytest.PytestWarning
            )
            return (yield)


class WithoutPytestBenchmark:
    """Where pytest-benchmark is not installed or not loaded (``-p no:benchmark``): a ``benchmark`` fixture
    that is ``None``, so a matrix test written for pytest-benchmark still runs. The gate is perfsuite's own
    either way; what goes is pytest-benchmark's table, ``--benchmark-compare`` and its saved runs."""

    @pytest.fixture
    def benchmark(self) -> None:
        return None
