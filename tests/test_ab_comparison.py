"""``perfsuite ab``'s set-up lines with fake sides (no workers): what the two sides differ in."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from perfsuite.ab.comparison import AbRun, schedule_for


def _side(label: str, **versions: str) -> Any:
    return SimpleNamespace(env=SimpleNamespace(label=label), versions=lambda: {"torch": "2.13.0", **versions})


@pytest.mark.parametrize(
    ("sides", "line"),
    [
        ((_side("current"), _side("current")), "the same versions (an A/A comparison)"),
        (
            (_side("current"), _side("benchmarks/ab/slow-python")),
            "the same package versions, in current and benchmarks/ab/slow-python",
        ),
        ((_side("current"), _side("transformers==5.0.0", transformers="5.0.0")), "transformers"),
    ],
)
def test_the_version_line_says_an_a_a_comparison_only_of_one_environment(sides: tuple[Any, Any], line: str) -> None:
    run = AbRun(sides, [], schedule_for(1, floor=0.03, alpha=0.05, first=None, cap=None), say=print)
    (said,) = run.version_lines()
    assert said.startswith("perfsuite: base → candidate: ")
    assert line in said
    assert ("A/A" in said) == (sides[0].env.label == sides[1].env.label)


def test_a_case_stopped_before_its_first_look_shows_its_pairs_mean_without_a_verdict() -> None:
    from perfsuite.reports.ab import rows

    case = {
        "case": "bert-base-uncased-vanilla",
        "verdict": "undecided",
        "error": None,
        "interrupted": True,
        "time": None,  # no look reached: no interval, no verdict on the time
        "mode": "alternate",
        "ratios": [1.0887, 1.0489, 1.0376, 1.0734],
        "memory": {"a": 2**30, "b": 2**30, "breakdown_a": {}, "breakdown_b": {}},
        "loss": {"max_abs_diff": 0.0},
    }
    (row,) = rows({"cases": [case]})
    assert row[1:4] == ["undecided (interrupted)", "1.062 before the first look", "4 alternate"]
    (row,) = rows({"cases": [{**case, "ratios": []}]})
    assert row[2:4] == ["—", "0 alternate"]
