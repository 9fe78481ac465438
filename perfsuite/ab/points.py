"""A bisection's point against the good end (:mod:`perfsuite.ab.bisecting`): whether its comparison
shows a change of the metric searched, the evidence in a few words, and the judgement the search
(:func:`perfsuite.ab.bisect.search`) takes. A bad end whose own run fails where the good end's runs
is searched as :data:`FAILURE`: the first point whose run fails."""

from __future__ import annotations

import re

from perfsuite.ab.bisect import Judgement
from perfsuite.ab.rounds import CaseResult
from perfsuite.ab.said import check_change, loss_within_tolerance
from perfsuite.core.gates import BREAKDOWN_PREFIX, PEAK_MEMORY

FAILURE = "failure"
"""The metric of a search for the first point whose run fails where the good end's runs: each point
one pair, *bad* where its own run fails, *good* where it completes, whatever its figures."""


def changed(result: CaseResult, metric: str) -> bool | None:
    """Whether ``result`` shows a change of ``metric`` (``None``: the time is undecided)."""
    if metric == FAILURE:
        return result.candidate_failed
    if metric == "time":
        if result.time is None or result.time.verdict == "undecided":
            return None
        return result.time.verdict in ("slower", "faster")
    return any(not c.ok for c in result.checks if counts(c.metric, metric))


def judged(result: CaseResult, metric: str) -> tuple[Judgement, str]:
    """The search's judgement of a point (``cannot`` where it did not install, import or run, or where
    its own run failed in a search of another metric), and how it is shown (``undecided``: a time
    that stayed so at ``--max-pairs``)."""
    if metric == FAILURE:
        judgement: Judgement = "bad" if result.candidate_failed else "cannot" if result.error else "good"
        return judgement, shown(judgement)
    verdict = changed(result, metric)
    judgement = "cannot" if result.error or verdict is None else ("bad" if verdict else "good")
    return judgement, "undecided" if verdict is None and not result.error else shown(judgement)


def counts(check_metric: str, metric: str) -> bool:
    """Whether a check of ``check_metric`` judges ``metric`` (memory or loss)."""
    if check_metric == "attention":  # other kernels: every figure differs
        return True
    if metric == "loss":
        return check_metric == "loss"
    return check_metric == PEAK_MEMORY or check_metric.startswith(BREAKDOWN_PREFIX)


def evidence(result: CaseResult, metric: str) -> str:
    if result.error:
        return result.error
    if metric == FAILURE:
        return "its run completes, as the good end's"
    if metric == "time":
        if result.time is None:
            return f"time: no verdict yet ({len(result.log_ratios)} pair(s))"
        t = result.time
        return f"time B/A {t.said()} over {t.pairs} pairs: {t.verdict}"
    # The metric searched only, each in a few words (the attention check's message says what ran instead).
    failing = [c for c in result.checks if not c.ok and counts(c.metric, metric)]
    said = [_good_end(c.message) if c.metric == "attention" else check_change(result, c) for c in failing]
    held = loss_within_tolerance(result) if metric == "loss" else None  # from other weights: against the seeds
    return _good_end("; ".join(said) or held or f"{metric}: as the good end")


def _good_end(message: str) -> str:
    """A gate's message with the good end where it says baseline or the base (a bisect step's reference),
    and without its advice to refresh a baseline."""
    message = message.replace(": refresh it if expected", "")
    return re.sub(r"\b(the )?base(line)?('s)?\b", lambda m: "the good end" + (m.group(3) or ""), message)


def shown(judgement: Judgement) -> str:
    return "cannot test" if judgement == "cannot" else judgement
