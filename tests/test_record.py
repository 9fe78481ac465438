"""A case's record, typed (perfsuite.core.record): read from the JSON a worker sends and a results file
holds, checked (a value of the wrong type names its key), and written back exactly as it was read."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from perfsuite.core.record import CaseRecord, failed_json
from perfsuite.core.results import parse_results
from perfsuite.core.results_file import ResultsError
from perfsuite.core.spec import CaseSpec

SPEC = CaseSpec(model="tiny-bert", strategy="vanilla", steps=2, warmup_steps=1, threads=1, device="cpu")


def _ok(**changes: Any) -> dict[str, Any]:
    """A record as a worker sends it, in its key order (nulls, a key no field names, nested pieces)."""
    record: dict[str, Any] = {
        "model": "tiny-bert",
        "strategy": "vanilla",
        "engine": "loop",
        "status": "ok",
        "error": None,
        "device": "cpu",
        "hardware": "cpu",
        "time_class": "amd-25.1-avx2",
        "threads": 1,
        "precision": "fp32",
        "num_parameters": 499524,
        "model_config": {"hidden_size": 64, "layers": [1, 2]},
        "world_size": 1,
        "step_time_s": {"median": 0.08, "mean": 0.081, "min": 0.07, "max": 0.1, "samples": [0.07, 0.08, 0.1]},
        "warmup_step_s": [0.9],
        "compile_s": None,
        "step_time_calibrated": {"median": 12, "samples": [11.5, 12, 12.5]},
        "calibration": {"workload": "numpy-mix-v2", "median_s": 0.013, "samples_s": [0.013, 0.012]},
        "tokens_per_s": {"real": 7500.0, "padded": 24300.0},
        "timed_tokens": {"real": 600, "padded": 1944},
        "padding_fraction": 0.69,
        "peak_memory_bytes": 23000000,
        "memory_breakdown_bytes": {"parameters": 2000000, "activations": 21000000},
        "memory_breakdown_error": None,
        "loss": [1.39, 1.2, 1],
        "grad_norm": [1.05, None, 0.9],
        "applied": {"optimizer_class": "torch.optim.adamw.AdamW", "attention_implementation": "sdpa"},
        "timed_threads": None,
        "phases_s": {"build": 0.05, "timed": 1.2},
        "a_key_of_tomorrow": {"kept": [1, "as it came"]},
        "worker_startup_s": None,
        "wall_s": 3.1,
        "preloaded": ["bitsandbytes"],
        "warnings": [{"category": "FutureWarning", "message": "m", "where": "f.py:1", "count": 648}],
        "output": "",
    }
    record.update(changes)
    return record


def test_a_record_is_written_back_exactly_as_it_was_read() -> None:
    data = _ok()
    record = CaseRecord.from_json(data, "tiny-bert-vanilla")
    assert record.to_json() == data
    assert json.dumps(record.to_json(), indent=2) == json.dumps(data, indent=2)  # key order and number types too
    assert record.timed().samples == (0.07, 0.08, 0.1)
    assert record.step_time_calibrated is not None
    assert record.step_time_calibrated.median == 12
    assert record.warnings[0].count == 648
    assert record.extra == {"a_key_of_tomorrow": {"kept": [1, "as it came"]}}
    assert record.applied["attention_implementation"] == "sdpa"


def test_an_absent_key_stays_absent_and_a_null_stays_null() -> None:
    data = {"model": "tiny-bert", "strategy": "vanilla", "status": "ok", "compile_s": None}
    record = CaseRecord.from_json(data, "r")
    assert record.to_json() == data
    assert (record.compile_s, record.wall_s, record.loss, record.applied) == (None, None, (), {})


def test_a_several_ranks_record_is_written_back_as_the_worker_aggregated_it() -> None:
    from perfsuite.worker.distributed.aggregate import aggregate

    def rank(index: int) -> dict[str, Any]:
        return {
            **_ok(rank=index, pid=100 + index, steps=3, batch_size=16, micro_batches=None),
            "peak_flops": None,
            "flops_per_step": 1e9,
        }

    data = {**aggregate([rank(0), rank(1)]), "worker_startup_s": 0.1}
    assert {"ranks", "loss_per_rank", "peak_memory_per_rank_bytes"} <= set(data)
    record = CaseRecord.from_json(data, "tiny-bert-ddp-ws2")
    assert json.dumps(record.to_json()) == json.dumps(data)
    assert [r["pid"] for r in record.ranks] == [100, 101]


def test_a_failed_case_s_record_has_its_identity_status_and_error_and_keys_set_later_go_last() -> None:
    record = CaseRecord.failed(SPEC, status="skipped", error="interrupted before it ran")
    assert record.to_json() == failed_json(SPEC, status="skipped", error="interrupted before it ran")
    marked = record.updated(interrupted=True, status="skipped")
    assert list(marked.to_json()) == ["model", "strategy", "engine", "world_size", "status", "error", "interrupted"]
    assert marked.interrupted
    assert not record.interrupted  # frozen: the first one is unchanged
    with pytest.raises(ValueError, match="tiny-bert-vanilla: no step times"):
        record.timed()


def test_a_key_no_field_names_is_set_as_json_and_keys_left_out_are_absent_as_a_dict_s() -> None:
    data = _ok()
    record = CaseRecord.from_json(data, "r").updated(a_key_of_tomorrow=[2], per_rank=[[1.0]], wall_s=4.5)
    expected = {**data, "a_key_of_tomorrow": [2], "wall_s": 4.5, "per_rank": [[1.0]]}
    assert json.dumps(record.to_json()) == json.dumps(expected)  # a key it had stays, a new one goes last
    assert record.extra == {"a_key_of_tomorrow": [2], "per_rank": [[1.0]]}
    left = record.without("a_key_of_tomorrow", "warnings", "step_time_s", "never_there")
    gone = {"a_key_of_tomorrow", "warnings", "step_time_s"}
    assert json.dumps(left.to_json()) == json.dumps({k: v for k, v in expected.items() if k not in gone})
    assert (left.warnings, left.step_time_s, left.extra) == ((), None, {"per_rank": [[1.0]]})
    assert left == CaseRecord.from_json(left.to_json(), "r")  # as a record read without them
    with pytest.raises(ValueError, match="'status' is required"):
        record.without("status")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"step_time_s": {"median": "fast", "samples": []}}, r"step_time_s.median is 'fast' \(str\), not a number"),
        ({"loss": [1.0, "x"]}, r"loss\[1\] is 'x' \(str\), not a number"),
        ({"warnings": [{"count": "many"}]}, r"warnings\[0\].count is 'many' \(str\), not an integer"),
        ({"memory_breakdown_bytes": {"activations": None}}, "memory_breakdown_bytes.activations is None"),
        ({"applied": None}, "applied is None .*not an object"),
        ({"status": 1}, "status is 1 .*not a string"),
        ({"peak_memory_bytes": True}, "peak_memory_bytes is True .*not an integer"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_its_key(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^r.json, case 0: {message}"):
        CaseRecord.from_json(_ok(**changes), "r.json, case 0")


def test_a_record_without_its_identity_or_not_an_object_is_refused() -> None:
    with pytest.raises(ValueError, match="^w: no 'strategy', 'status'$"):
        CaseRecord.from_json({"model": "tiny-bert"}, "w")
    with pytest.raises(ValueError, match=r"^w: \[\] \(list\) is not an object$"):
        CaseRecord.from_json([], "w")


def test_a_results_file_with_a_wrong_value_is_one_line_naming_the_file_the_case_and_the_key() -> None:
    run = {"schema_version": 1, "env": {}, "cases": [_ok(), _ok(peak_memory_bytes="23 MB")]}
    with pytest.raises(ResultsError, match=r"^r.json: cases\[1\]: peak_memory_bytes is '23 MB' \(str\)"):
        parse_results(run, "r.json")
    outcome = {"case": "tiny-bert-vanilla", "status": "passed", "checks": [], "records": [_ok(loss="low")]}
    with pytest.raises(ResultsError, match=r"^g.json: tiny-bert-vanilla's records\[0\]: loss is 'low'"):
        parse_results({"refresh": False, "cases": [outcome]}, "g.json")
    assert parse_results(run | {"cases": [_ok()]}, "r.json").cases[0].record == CaseRecord.from_json(_ok(), "r")


@pytest.mark.cpu
def test_a_real_run_s_record_is_what_its_worker_sent() -> None:
    """What the worker answered, typed once and written back: the same JSON, key for key."""
    from perfsuite.worker.process import run_in_worker

    sent = run_in_worker(SPEC, timeout_s=300)
    assert sent["status"] == "ok", sent["error"]
    record = CaseRecord.from_json(sent, SPEC.id)
    assert json.dumps(record.to_json(), indent=2) == json.dumps(sent, indent=2)
    assert record.extra == {}  # every key a run writes has its field


@dataclasses.dataclass(frozen=True)
class _Inner:
    at: tuple[str | None, int]
    share: float = 0.0


@dataclasses.dataclass(frozen=True)
class _Outer:
    name: str
    inner: tuple[_Inner, ...] = ()
    per: dict[str, int] = dataclasses.field(default_factory=dict)
    last: _Inner | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("no name")


def test_a_plain_dataclass_is_read_by_its_fields_types_and_a_wrong_value_named_by_its_key() -> None:
    """What explanations are read with (``dataclasses.asdict``'s JSON, or its tuples before JSON)."""
    from perfsuite.core.typed_json import read_as

    made = _Outer("x", (_Inner((None, 2), 0.5),), {"a": 1}, _Inner(("f", 3)))
    assert read_as(_Outer, json.loads(json.dumps(dataclasses.asdict(made))), "it") == made
    assert read_as(_Outer, dataclasses.asdict(made), "it") == made  # tuples, before JSON
    assert (
        read_as(_Outer, {"name": "x", "inner": [{"at": ["f", 1], "share": 1}], "more": 0}, "it").inner[0].share == 1.0
    )
    for data, said in [
        ({"inner": []}, "it: no 'name'"),
        ({"name": "x", "inner": [{"at": ["f"]}]}, "it: inner[0].at is ['f'] (list), not a list of 2"),
        ({"name": "x", "inner": [{"at": ["f", True]}]}, "it: inner[0].at[1] is True (bool), not an integer"),
        ({"name": "x", "per": {"a": "1"}}, "it: per.a is '1' (str), not an integer"),
        ({"name": "x", "last": 3}, "it: last is 3 (int), not an object"),
        ({"name": ""}, "it: _Outer: no name"),
        ("x", "it: 'x' (str) is not an object"),
    ]:
        with pytest.raises(ValueError, match="^it: ") as caught:
            read_as(_Outer, data, "it")
        assert str(caught.value) == said


@pytest.mark.parametrize(
    "spec",
    [
        CaseSpec(model="tiny-bert", strategy="vanilla"),
        CaseSpec(model="tiny-bert", strategy="ddp", world_size=2),
        CaseSpec(model="tiny-bert", strategy="fp16", engine="trainer"),
    ],
    ids=lambda spec: spec.id,
)
def test_a_record_names_its_case_as_the_case_itself_does(spec: CaseSpec) -> None:
    """What a message about a record names (a pool's refusal of a file's case) is the case's id,
    ranks and engine included, never ``<model>-<strategy>`` alone."""
    record = CaseRecord.from_json(failed_json(spec, status="failed", error="x"), "record")
    assert record.case_id == spec.id
