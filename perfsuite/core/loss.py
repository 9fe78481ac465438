"""The loss gate: a run's loss curve against its baseline's, step by step. Pure: no torch, no pytest.

A tolerance chosen by the precision per step; a NaN never passes; a failure names the first
step that diverged. The curve is always compared; where it diverged and the run started
from other weights than the baseline's (their digests differ, :mod:`perfsuite.worker.weights`),
the divergence is the weights' and not the training step's, so the loss is *not compared*,
said so. A digest that differs under a curve that holds (a buffer renamed by an upgrade, the
same values) changes nothing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from perfsuite.core.baselines import refresh_command
from perfsuite.core.check import Check
from perfsuite.core.observation import Observation
from perfsuite.core.stats import t_quantile
from perfsuite.core.tolerance import Tolerance


def weights_apart(recorded: str | None, now: str | None) -> bool:
    """Whether two initial-weights digests differ, both of one algorithm (another is no evidence)."""
    return bool(recorded and now and recorded != now and recorded.split(":")[0] == now.split(":")[0])


def other_weights(baseline: Mapping[str, Any], observed: Observation) -> str | None:
    """The baseline's initial-weights digest when the run's is of the same algorithm and differs, else ``None``."""
    recorded = (baseline.get("spec") or {}).get("initial_weights")
    return str(recorded) if weights_apart(recorded, observed.initial_weights) else None


def _weights_not_compared(case_id: str, recorded: str, observed: Observation, hardware: str, *, fail: bool) -> Check:
    now = str(observed.initial_weights)
    return Check(
        "loss",
        not fail,
        f"weights {recorded.split(':')[-1][:12]}",
        f"weights {now.split(':')[-1][:12]}",
        "not compared",
        "same initial weights",
        f"{case_id}: loss not compared: this run started from other initial weights than the baseline's "
        f"({now} against {recorded}: the random generator, a library's or this code's initialisation "
        "changed), so its curve differs from the first step whatever the training step does (time and memory "
        "were gated); where the change is this code's, `perfsuite ab --base-ref BASE` compares the two side by "
        f"side; then record this stack's curve with {refresh_command(case_id, hardware=hardware)}",
        compared=False,
    )


def check_loss(
    case_id: str,
    baseline: Mapping[str, Any],
    observed: Observation,
    tol: Tolerance,
    *,
    hardware: str = "cpu",
    fail_uncompared: bool = False,
) -> Check:
    """The loss curve, step by step; where it diverged from a run that started from other weights
    (:func:`other_weights`), *not compared* instead, a failure then only with ``fail_uncompared``."""
    check = _curve(case_id, baseline, observed, tol)
    recorded = other_weights(baseline, observed)
    if check.ok or recorded is None:
        return check
    return _weights_not_compared(case_id, recorded, observed, hardware, fail=fail_uncompared)


def check_against_seeds(
    case_id: str, reference: Sequence[Sequence[float]], curve: Sequence[float], weights: str, confidence: float
) -> Check:
    """A curve that started from other initial weights (``weights``: ``a → b``' digests) against the
    reference's curves at ``len(reference)`` seeds (its own first), in two windows, the first half of the
    steps (where it starts from) and the rest (where it ends up): in each, its mean within the reference
    means' prediction interval, ``mean ± t·sd·√(1 + 1/n)`` (t with n - 1 degrees of freedom), at
    ``confidence`` over both (Bonferroni), it trains as the reference does at another seed. Above one
    (or not finite) it fails as a regression; below one and above none it fails as lower (``rel`` < 0).
    Needs 3 curves or more, of one length, whose means differ."""
    if len(reference) < 3 or any(len(c) != len(curve) for c in reference):
        raise ValueError(f"{case_id}: {len(reference)} reference curves for a prediction interval")
    n, steps = len(reference), len(curve)
    windows = [(0, steps // 2), (steps // 2, steps)] if steps >= 2 else [(0, steps)]
    t = t_quantile(1 - (1 - confidence) / (2 * len(windows)), n - 1)
    judged = []  # per window: its steps, the reference's centre and half-width, the curve's mean
    for first, end in windows:
        means = [statistics.fmean(c[first:end]) for c in reference]
        spread = statistics.stdev(means)
        if spread == 0:
            raise ValueError(f"{case_id}: the reference's curves at {n} seeds are alike: no spread to judge by")
        now = statistics.fmean(curve[first:end]) if all(math.isfinite(v) for v in curve) else math.inf
        name = f"step {first}" if end - first == 1 else f"steps {first}-{end - 1}"
        judged.append((name, statistics.fmean(means), t * spread * math.sqrt(1 + 1 / n), now))
    above = [w for w in judged if not w[3] - w[1] <= w[2]]  # inf and nan included
    below = [w for w in judged if w[1] - w[3] > w[2]]
    worst = max(above or below or judged, key=lambda w: abs(w[3] - w[1]) / w[2])
    scale = abs(worst[1]) or 1.0
    rel = (worst[3] - worst[1]) / scale if math.isfinite(worst[3]) else math.inf
    how = f"the base's {n} seeds' {confidence * 100:.6g}% interval{'s' if len(judged) > 1 else ''}"
    said = "; ".join(f"{w[0]} {w[3]:.4g} in {w[1]:.4g} ± {w[2]:.2g}" for w in judged)
    verdict = (
        "it trains as the base's does at another seed"
        if not above and not below
        else f"{'higher' if above else 'lower'} than the base's at another seed ({worst[0]})"
    )
    message = f"{case_id}: loss from other initial weights ({weights}): its mean loss, against {how}: {said}: {verdict}"
    return Check(
        "loss",
        not above and not below,
        ", ".join(f"{w[0]} {w[1]:.4g} ± {w[2]:.2g}" for w in judged),
        ", ".join(f"{w[0]} {w[3]:.4g}" for w in judged),
        f"{rel:+.2%}",
        how,
        message,
        rel=rel,
        limit=worst[2] / scale,
        seeds=n,
    )


def seeds_said(ok: bool, rel: float | None, tolerance: str, baseline: str, measured: str) -> str:
    """A loss judged against the base's seeds (:func:`check_against_seeds`) in a few words: ``loss from other
    initial weights, as at another seed (mean loss steps 0-5 2.1, steps 6-11 1.6; the base's 6 seeds' 97.5%
    intervals: steps 0-5 2.05 ± 0.1, steps 6-11 1.62 ± 0.05)``, or ``higher than`` or ``lower than``."""
    how = "as" if ok else "higher than" if rel is None or not rel < 0 else "lower than"
    return f"loss from other initial weights, {how} at another seed (mean loss {measured}; {tolerance}: {baseline})"


def _curve(case_id: str, baseline: Mapping[str, Any], observed: Observation, tol: Tolerance) -> Check:
    base, now = list(baseline["loss"]), list(observed.losses)
    how = f"rtol {tol.loss_rtol:g}, atol {tol.loss_atol:g} per step"
    summary = f"{len(now)} steps"
    if len(base) != len(now):
        return Check(
            "loss",
            False,
            f"{len(base)} steps",
            summary,
            "—",
            how,
            f"{case_id}: loss: the baseline has {len(base)} steps and this run {len(now)}; "
            "the case's step count changed, so refresh its baseline",
        )
    bad = next((i for i, v in enumerate(now) if not math.isfinite(v)), None)
    if bad is not None:
        return Check(
            "loss",
            False,
            f"{base[bad]:.6g} at step {bad}",
            f"{now[bad]} at step {bad}",
            "—",
            how,
            f"{case_id}: loss is {now[bad]} at step {bad} (baseline {base[bad]:.6g}): a non-finite loss never passes",
        )
    diffs = [abs(n - b) for n, b in zip(now, base, strict=True)]
    rels = [d / abs(b) if b else (0.0 if d == 0 else math.inf) for d, b in zip(diffs, base, strict=True)]
    first = next(
        (i for i, (d, b) in enumerate(zip(diffs, base, strict=True)) if d > tol.loss_atol + tol.loss_rtol * abs(b)),
        None,
    )
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    change = f"max |Δ| {diffs[worst]:.2g} (rel {max(rels):.2g})"
    # For reports and history: the step that used most of its tolerance, as a relative change and limit.
    allowed = [tol.loss_atol + tol.loss_rtol * abs(b) for b in base]
    tightest = max(
        range(len(diffs)),
        key=lambda i: diffs[i] / allowed[i] if allowed[i] else (math.inf if diffs[i] else 0.0),
    )
    scale = abs(base[tightest]) or 1.0
    numbers = {"rel": (now[tightest] - base[tightest]) / scale, "limit": allowed[tightest] / scale}
    if first is None:
        return Check("loss", True, f"final {base[-1]:.6g}", f"final {now[-1]:.6g}", change, how, "", **numbers)
    return Check(
        "loss",
        False,
        f"{base[first]:.6g} at step {first}",
        f"{now[first]:.6g} at step {first}",
        change,
        how,
        f"{case_id}: loss diverges from the baseline at step {first} (of 0-{len(now) - 1}): "
        f"{now[first]!r} vs {base[first]!r}; "
        f"largest absolute difference {diffs[worst]:.3g} (step {worst}), largest relative {max(rels):.3g}; "
        f"tolerance {how}",
        **numbers,
    )


def first_difference(a: Sequence[float], b: Sequence[float]) -> int | None:
    """The first step at which two curves of one length differ at all (two NaNs are alike); ``None``
    where they are identical."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y and not (math.isnan(x) and math.isnan(y))),
        None,
    )


def max_difference(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The largest ``|a_i - b_i|`` of two curves (``None`` without two of one length): a step finite on one
    side only differs infinitely, two NaNs are alike (a run stops at a non-finite loss; a file may hold one)."""
    if not a or len(a) != len(b):
        return None
    steps = (0.0 if x == y or (math.isnan(x) and math.isnan(y)) else abs(x - y) for x, y in zip(a, b, strict=True))
    return max(math.inf if math.isnan(d) else d for d in steps)


def side_by_side(a: Sequence[float] | None, b: Sequence[float] | None) -> str | None:
    """Two runs' curves of one case for a reader, where they ended and how far apart they ran:
    ``final 6.37959 → 6.37973, max |Δ| 0.00527 from step 0``, or ``identical, final 6.37959``;
    ``None`` without two curves of one length."""
    worst = max_difference(a or (), b or ())
    if worst is None or not a or not b:
        return None
    first = first_difference(a, b)
    if first is None:
        return f"identical, final {a[-1]:.6g}"
    return f"final {a[-1]:.6g} → {b[-1]:.6g}, max |Δ| {worst:.3g} from step {first}"
