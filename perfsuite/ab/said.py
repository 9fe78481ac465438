"""What ``perfsuite ab`` says of a case as it goes: its memory and loss as the first pair decided them,
and a new case's one run (:func:`perfsuite.reports.ab.new_figures`)."""

from __future__ import annotations

from perfsuite.ab.rounds import CaseResult
from perfsuite.core.check import Check
from perfsuite.core.gates import BREAKDOWN_PREFIX, category_change, is_regression
from perfsuite.core.loss import seeds_said, side_by_side


def checks_line(result: CaseResult) -> str:
    """Memory and loss as the first pair decided them: ``regressed: loss max |Δ| 25.1 (final 2.1 → 27.2)
    at pair 1``; a loss that moved within its tolerance is said too (on one stack it moves only where the
    code's arithmetic changed), and a breakdown category that moved against a peak that moved, apart
    from the gains (:attr:`~perfsuite.core.check.Check.moment`)."""
    failing = [c for c in result.checks if not c.ok]
    moved = loss_within_tolerance(result)
    if not failing:
        same = f"memory as base, {moved}" if moved else "memory and loss as base"
        return f"{same} at pair 1 (time: pairs to come)"
    worse = [c for c in failing if is_regression(c, result.checks)]
    moment = [c for c in failing if c.moment]
    better = [c for c in failing if c not in worse and c not in moment]
    said = (("regressed", worse), ("improved", better), ("moved with the peak's moment", moment))
    parts = [f"{word}: {', '.join(check_change(result, c) for c in checks)}" for word, checks in said if checks]
    return f"{'; '.join([*parts, *([moved] if moved else [])])} at pair 1"


def loss_within_tolerance(result: CaseResult) -> str | None:
    """``loss within its tolerance (final …, max |Δ| … from step N)`` where the curves differ and the check
    holds; from other initial weights, how it lies against the base's seeds."""
    held = [c for c in result.checks if c.metric == "loss" and c.ok]
    if held and held[0].seeds:  # from other weights, as the base's curve moves at another seed
        return seeds_said(True, held[0].rel, held[0].tolerance, held[0].baseline, held[0].measured)
    moved = result.loss_max_abs_diff  # None without two curves of one length, 0 where they are identical
    return f"loss within its tolerance ({side_by_side(result.loss_a, result.loss_b)})" if held and moved else None


def check_change(result: CaseResult, check: Check) -> str:
    """A failing memory or loss check of ``result`` in a few words: ``loss max |Δ| 0.25``,
    ``memory: buffers -256.0 KiB``."""
    diff = result.loss_max_abs_diff
    if check.metric == "loss" and check.seeds:
        return seeds_said(False, check.rel, check.tolerance, check.baseline, check.measured)
    if check.metric == "loss" and not check.compared:
        return f"loss from other initial weights ({check.baseline} → {check.measured})"
    if check.metric == "loss" and diff is not None:
        return f"loss max |Δ| {diff:.3g} (final {result.loss_a[-1]:.6g} → {result.loss_b[-1]:.6g})"
    if check.metric.startswith(BREAKDOWN_PREFIX):
        name = check.metric.removeprefix(BREAKDOWN_PREFIX)
        return f"memory: {category_change(name, result.breakdown_a.get(name, 0), result.breakdown_b.get(name, 0))}"
    if check.rel is not None:
        return f"{check.metric} {check.rel:+.1%}"
    return check.metric


def new_line(result: CaseResult) -> str:
    """A case only the candidate declares, once run: ``new: the base's code does not declare model 'x';
    the candidate, one run: 5.10 ms a step, peak 12.30 MiB, final loss 2.31``, or why it could not run."""
    from perfsuite.reports.ab import new_figures

    said = f"the base's code does not declare {result.new}"
    return f"{result.verdict}: {said}; {result.error or new_figures(result.as_json())}"


def pairs_line(result: CaseResult, finished: bool) -> str:
    """A case's pairs and time verdict so far (``  tiny-bert-vanilla: 15 pair(s), B/A 1.004 [0.99, 1.02] →
    same``); once ``finished``, the case's verdict too where it is not the time's (or it has an error)."""
    t = result.time
    line = f"  {result.case}: {len(result.log_ratios)} pair(s)"
    if t is not None:
        line += f", B/A {t.said()} → {t.verdict}"
    if finished and (t is None or result.verdict != t.verdict or result.error):
        line += f" · {result.verdict}" + (f" ({result.error})" if result.error else "")
    return line
