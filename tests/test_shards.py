"""Splitting the GPU matrix across machines (perfsuite.core.shards, ``--perfsuite-shard``) and merging
the shards' results into one night (``perfsuite merge``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perfsuite.cli import main
from perfsuite.core.results_file import ResultsError
from perfsuite.core.shards import assign, merge_results, parse_shard


def test_a_shard_is_i_of_n() -> None:
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/2", "3/2", "2", "a/b", "1/0"):
        with pytest.raises(ValueError, match="I/N"):
            parse_shard(bad)


def test_whole_models_are_balanced_by_case_count_the_largest_on_shard_one() -> None:
    cases = ["bert"] * 9 + ["gpt2"] * 5 + ["t5"] * 4 + ["xlmr"] * 3 + ["llama"] * 2
    placed = assign(cases, 2)
    assert placed["bert"] == 1
    load = {s: sum(cases.count(m) for m, shard in placed.items() if shard == s) for s in (1, 2)}
    assert load == {1: 12, 2: 11}
    assert assign(cases, 2) == placed  # every machine computes the same split
    assert set(assign(cases, 8).values()) == {1, 2, 3, 4, 5}  # more shards than models: some stay empty


def test_the_shards_cover_the_matrix_once_each_model_on_one_shard(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sharded_cases="def test_case(perfsuite_case):\n    pass\n")

    def collected(*args: str) -> set[str]:
        result = pytester.runpytest("--collect-only", "-q", "-m", "cpu", "-p", "no:cacheprovider", *args)
        return {line for line in result.outlines if "::test_case[" in line}

    everything = collected()
    shards = [collected(f"--perfsuite-shard={i}/3") for i in (1, 2, 3)]
    assert all(shards)
    assert set.union(*shards) == everything
    assert sum(len(s) for s in shards) == len(everything)
    models = [{re.match(r".*\[(tiny-[a-z0-9]+)-", line).group(1) for line in shard} for shard in shards]  # type: ignore[union-attr]
    assert sum(len(m) for m in models) == len(set.union(*models))  # no model on two shards


def _shard(path: Path, *cases: str, refresh: bool = False) -> Path:
    path.write_text(
        json.dumps(
            {
                "schema_version": 2,
                "refresh": refresh,
                "env": {"commit": "abc", "machine": path.stem},
                "cases": [{"case": c, "status": "passed", "checks": [], "records": []} for c in cases],
            }
        )
    )
    return path


def test_the_shards_results_merge_into_one_night(tmp_path: Path) -> None:
    one = _shard(tmp_path / "one.json", "bert-base-uncased-vanilla", "bert-base-uncased-ddp-ws2")
    two = _shard(tmp_path / "two.json", "gpt2-vanilla")
    merged = merge_results([one, two], expect=2)
    assert [c["case"] for c in merged["cases"]] == [
        "bert-base-uncased-vanilla",
        "bert-base-uncased-ddp-ws2",
        "gpt2-vanilla",
    ]
    assert [s["env"]["machine"] for s in merged["env"]["shards"]] == ["one", "two"]
    assert main(["merge", str(one), str(two), "--expect", "2", "-o", str(tmp_path / "night.json")]) == 0
    assert len(json.loads((tmp_path / "night.json").read_text())["cases"]) == 3


def test_a_lost_shard_or_a_case_in_two_shards_fails_the_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _shard(tmp_path / "one.json", "gpt2-vanilla")
    with pytest.raises(ResultsError, match="1 shard results for 2 shards"):
        merge_results([one], expect=2)
    again = _shard(tmp_path / "again.json", "gpt2-vanilla")
    with pytest.raises(ResultsError, match="gpt2-vanilla is in two shards"):
        merge_results([one, again])
    assert main(["merge", str(one), str(tmp_path / "lost.json"), "-o", str(tmp_path / "x.json")]) == 2
    assert "lost.json: no such results file" in capsys.readouterr().err
