"""docs/time-classes.md's table says, per CPU time class, how many cases of each tier have a stored
step time: it is read here against the baselines in `baselines/cpu/`, so a refresh, a pool or a
withdrawal that changes what a class gates changes the page with it."""

from __future__ import annotations

import collections
import re
from pathlib import Path

from perfsuite.core.coverage import coverage
from perfsuite.core.matrix import nightly_only
from perfsuite.core.spec import parse_case_id

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(
    r"^\| `(?P<cls>[a-z0-9.-]+)` \| (?P<push>\d+) of (?P<pushes>\d+) \| (?P<night>\d+) of (?P<nights>\d+) \|"
)


def _stored() -> tuple[collections.Counter[tuple[str, bool]], collections.Counter[bool]]:
    """(class, nightly) → cases with a time for that class; nightly → cases in that tier (as
    `perfsuite baselines classes` reads them)."""
    timed: collections.Counter[tuple[str, bool]] = collections.Counter()
    cases: collections.Counter[bool] = collections.Counter()
    cpu = next(d for d in coverage(ROOT / "baselines") if d.hardware == "cpu")
    assert not cpu.unreadable, cpu.unreadable
    nightly = {case: nightly_only(*parse_case_id(case)) for case in cpu.cases}
    cases.update(nightly.values())
    for found in cpu.classes:
        timed.update((found.time_class, nightly[case]) for case in found.timed)
    return timed, cases


def _rows() -> dict[str, tuple[int, int, int, int]]:
    """The table's rows, class → (every-push timed, every-push cases, nightly timed, nightly cases)."""
    page = (ROOT / "docs" / "time-classes.md").read_text()
    section = page.split("## The classes", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[int, int, int, int]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        found = ROW.match(line)
        assert found, f"a row of docs/time-classes.md's table the test cannot read: {line}"
        assert found["cls"] not in rows, f"{found['cls']} has two rows"
        push, pushes, night, nights = (int(found[k]) for k in ("push", "pushes", "night", "nights"))
        rows[found["cls"]] = (push, pushes, night, nights)
    assert rows, "docs/time-classes.md's table has no row the test reads"
    return rows


def test_the_page_counts_each_classs_timed_cases_as_the_baselines_hold_them() -> None:
    timed, cases = _stored()
    rows = _rows()
    stored = {time_class for time_class, _ in timed}
    unlisted = stored - set(rows)
    assert not unlisted, f"classes with stored times that docs/time-classes.md does not list: {unlisted}"
    for time_class, row in rows.items():
        actual = (timed[time_class, False], cases[False], timed[time_class, True], cases[True])
        assert row == actual, f"{time_class}: the page says {row}, the baselines hold {actual}"
