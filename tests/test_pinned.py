"""The pinned pytest-benchmark files: where each class's lives, read strictly, merged by a refresh,
pared by a pool (:mod:`perfsuite.core.pinned`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsuite.core.baselines import BaselineError
from perfsuite.core.coverage import coverage
from perfsuite.core.goalposts import baseline_moves
from perfsuite.core.pinned import compare_problem, is_pinned, merged, pinned_path, read_pinned, without

GPU = "nvidia-h100-80gb-hbm3"


def _entry(case: str, mean: float = 1.0) -> dict[str, object]:
    return {"param": case, "fullname": f"tests/test_matrix.py::test_case[{case}]", "stats": {"mean": mean}}


def test_one_file_per_time_class_which_nothing_else_takes_for_a_baseline(tmp_path: Path) -> None:
    epyc = pinned_path(tmp_path, "cpu", "amd-25.1-avx2")
    assert epyc == tmp_path / "cpu" / "pytest-benchmark.amd-25.1-avx2.json"
    assert pinned_path(tmp_path, GPU, GPU) == tmp_path / GPU / "pytest-benchmark.json"
    assert is_pinned(epyc.name)
    assert is_pinned(pinned_path(tmp_path, GPU, GPU).name)
    assert not is_pinned("tiny-bert-vanilla.json")
    # The coverage count and the goalposts (standard library only, so it keeps the prefix itself) agree.
    epyc.parent.mkdir()
    epyc.write_text("{}")
    assert coverage(tmp_path) == []
    assert baseline_moves(f"baselines/cpu/{epyc.name}", None, "{}") == (
        f"`baselines/cpu/{epyc.name}`: the pinned pytest-benchmark file added"
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "Expecting property name"),
        ("[]", "not a JSON object"),
        ('{"benchmarks": {}}', "'benchmarks' is not a list"),
        ('{"benchmarks": [{"param": "tiny-bert-vanilla"}]}', "each with its fullname"),
        ('{"benchmarks": [{"fullname": 3}]}', "each with its fullname"),
        (b"\xff\xfe", "can't decode"),
    ],
)
def test_a_file_it_cannot_use_is_named_with_what_is_wrong(tmp_path: Path, text: str | bytes, why: str) -> None:
    path = tmp_path / "pytest-benchmark.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(BaselineError, match="corrupt pinned pytest-benchmark file") as raised:
        read_pinned(path)
    assert why in str(raised.value)
    assert str(raised.value).endswith("; delete it and refresh")


def test_none_yet_reads_as_empty_and_a_refresh_merges_its_cases_in(tmp_path: Path) -> None:
    path = tmp_path / "pytest-benchmark.json"
    assert read_pinned(path) == {}
    fresh = [_entry("tiny-bert-vanilla", 2.0)]
    output = {"machine_info": {"node": "new"}, "benchmarks": fresh}
    first = merged(read_pinned(path), output, fresh)
    assert first == output
    old = {"machine_info": {"node": "old"}, "benchmarks": [_entry("tiny-bert-vanilla"), _entry("a")]}
    path.write_text(json.dumps(old))
    again = merged(read_pinned(path), output, fresh)
    assert again["machine_info"] == {"node": "new"}  # the refresh's machine
    assert again["benchmarks"] == [_entry("a"), _entry("tiny-bert-vanilla", 2.0)]  # replaced, the rest kept, sorted


def test_a_pool_removes_only_the_withdrawn_cases_entries() -> None:
    pinned = {"machine_info": {}, "benchmarks": [_entry("tiny-bert-all"), _entry("tiny-bert-vanilla")]}
    assert without(pinned, ["tiny-bert-all"]) == {"machine_info": {}, "benchmarks": [_entry("tiny-bert-vanilla")]}
    assert without(pinned, ["tiny-llama-all"]) is None  # nothing to rewrite
    assert without({}, ["tiny-bert-all"]) is None
    assert pinned["benchmarks"] == [_entry("tiny-bert-all"), _entry("tiny-bert-vanilla")]  # untouched


def test_with_no_file_the_compare_suggests_a_refresh_only_where_it_would_not_replace_pooled_times(
    tmp_path: Path,
) -> None:
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    path = pinned_path(tmp_path, "cpu", "amd-26.2-avx512-vnni-bf16")
    assert compare_problem(path, "amd-26.2-avx512-vnni-bf16") == (
        f"no pinned pytest-benchmark file {path}; record one with `perfsuite baselines refresh`"
    )
    sessions = [{"date": "2026-12-07T17:17:31+00:00", "commit": "c013dea", "host": "vm"}] * 5
    pooled = {"time": {"amd-26.2-avx512-vnni-bf16": {"median": 17.1, "sessions": sessions}}}
    (cpu / "tiny-bert-vanilla.json").write_text(json.dumps(pooled))
    (cpu / "corrupt.json").write_text("{")  # the gate reports it; the message is not lost to it
    problem = compare_problem(path, "amd-26.2-avx512-vnni-bf16")
    assert problem is not None
    assert "pooled from 5 sessions (`perfsuite baselines pool`), which records no pytest-benchmark rounds" in problem
    assert "run without --benchmark-compare" in problem
    assert "would write the file, but replace the pooled times with one session's" in problem
    # Another class's pooled times say nothing of this one's.
    assert compare_problem(pinned_path(tmp_path, "cpu", "amd-25.1-avx2"), "amd-25.1-avx2") == (
        f"no pinned pytest-benchmark file {pinned_path(tmp_path, 'cpu', 'amd-25.1-avx2')}; "
        "record one with `perfsuite baselines refresh`"
    )
