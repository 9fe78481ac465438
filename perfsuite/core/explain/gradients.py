"""Where two loss curves part and how: the first step beyond the loss tolerance, the gradients of
each parameter A against B up to there, and whether the runs started from the same weights, saw
the same data and stepped with the same learning rate.

At the first step whose gradients differ, the ratio of each parameter's gradient norm (B ÷ A)
says what kind of change it is: one ratio shared by every tensor is a **scale** (the loss or its
reduction multiplied: an accumulation factor applied twice, a loss scale), a few tensors apart
while the rest sit at 1 is a **local** change (a kernel, a dtype, an attention implementation in
those layers), every tensor at its own ratio means the forward itself differs, or, at a step whose
loss still agrees from the same weights and data, that the gradients
are computed or accumulated otherwise. Equal gradients up to the step where the losses part point to the optimizer's
update (the learning rate, its state). Where the sides started from other initial weights, saw other
data by then or stepped at another learning rate before it, every gradient moves with them, and the
ratios are read as nothing more than a few tensors apart: a scale or a forward read there (one ratio by
chance about shared) would name a cause that is not there.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from perfsuite.core.explain.initial import Moved, moved, values_differ
from perfsuite.core.explain.initial import describe as describe_initial
from perfsuite.core.explain.records import ExplainRecord, StepFacts
from perfsuite.core.loss import first_difference

SAME_RATIO = 1e-3
"""A gradient whose norm is within this relative distance of another's is the same (the loss
gate's default relative tolerance): two runs of one stack agree to the last bit."""
APART_SHOWN = 8
"""Tensors named when a few are apart."""
FURTHEST_SHOWN = 3
"""Tensors named, furthest from 1 first, when every gradient moved."""
NEAR_SCALE = 0.15
"""Ratios all within 15% of their median, itself more than 15% off 1, are one scale of the loss applied
unevenly (a mean over each micro-batch's tokens instead of over the step's: about the accumulation
count, not exactly)."""
NEGLIGIBLE = 1e-5
"""A gradient this small beside the largest of its side is rounding, not signal (a key projection's
bias under softmax, whose gradient is zero in exact arithmetic): its ratio is left out."""


@dataclass(frozen=True)
class Ratio:
    name: str
    ratio: float
    """B's gradient norm ÷ A's (``inf`` where A's is zero and B's is not)."""


@dataclass(frozen=True)
class LossCause:
    """Why two loss curves part (see the module's docstring)."""

    step: int | None
    """The first step where B's loss is beyond the tolerance of A's; ``None``: the curves hold."""
    loss_a: float | None = None
    loss_b: float | None = None
    differ: tuple[str, ...] = ()
    """Which of ``initial weights``, ``data``, ``learning rate`` differ between the sides up to ``step``."""
    grad_step: int | None = None
    """The first step whose gradients differ (``None``: none up to ``step``, or none recorded)."""
    shape: str = "unknown"
    """``scale``, ``near_scale`` (every ratio within :data:`NEAR_SCALE` of one), ``local``, ``everywhere``
    (at ``grad_step``), ``inputs`` (gradients apart at ``grad_step`` from other initial weights, data up
    to it or a learning rate before it: no shape read), ``optimizer`` (equal gradients up to ``step``, the
    losses still part) or ``unknown`` (no gradients recorded)."""
    scale: float | None = None
    """The one ratio every gradient shares at ``grad_step`` (``near_scale``: their median), where they share one."""
    apart: tuple[Ratio, ...] = ()
    """At ``grad_step``: the tensors off the ratio most of them share, furthest first."""
    ratios: tuple[Ratio, ...] = ()
    """At ``grad_step``: every parameter's ratio, in the model's order."""
    grads_compared: int = 0
    """Steps whose gradients were compared (0: none were recorded)."""
    reproduced: bool = True
    """Whether the explanation runs' losses matched the compared runs' up to ``step``."""
    started_otherwise: tuple[Moved, ...] = ()
    """Where the initial weights differ: the parameters whose initial statistics moved, furthest first."""
    parameters: int = 0
    """How many parameters the initial statistics compared."""
    values_differ: int | None = None
    """Where the initial weights differ: how many parameters started from other values (``None``: a
    record without their digests)."""
    last_only: str | None = None
    """``A`` or ``B``: the side whose update at ``grad_step`` used its last micro-batch's gradient
    alone while the other side's did not (the earlier micro-batches dropped); ``None`` otherwise or
    where the engine records no micro-batch's gradient apart."""
    first_losses: tuple[float, float] | None = None
    """Step 0's loss on each side (the compared runs'), where both have one."""
    learning_rates: tuple[int, tuple[float, ...], tuple[float, ...]] | None = None
    """Where the learning rates differ: the first step they do, and each side's there (one per param group)."""
    differs_from: int | None = None
    """The first step whose losses differ at all, where that is before ``step`` (the comparison's table
    reads ``max |Δ| ... from step`` it)."""


def _first_difference(a: Sequence[float], b: Sequence[float]) -> int | None:
    """:func:`perfsuite.core.loss.first_difference` over the steps both curves have."""
    n = min(len(a), len(b))
    return first_difference(a[:n], b[:n])


def first_apart(a: Sequence[float], b: Sequence[float], *, rtol: float, atol: float) -> int | None:
    """The first step where ``b`` leaves ``a``'s tolerance (``atol + rtol·|a|``), as the loss gate judges."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if not math.isfinite(y) or abs(y - x) > atol + rtol * abs(x):
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def ratios(a: dict[str, float], b: dict[str, float]) -> list[Ratio]:
    """Each parameter's gradient norm ratio B ÷ A, in A's order; a parameter of one side only, and one
    whose gradient is negligible on both sides (:data:`NEGLIGIBLE`), are left out."""
    found = []
    floor_a, floor_b = (NEGLIGIBLE * max(side.values(), default=0.0) for side in (a, b))
    for name, norm_a in a.items():
        if name not in b:
            continue
        norm_b = b[name]
        if norm_a <= floor_a and norm_b <= floor_b:
            continue
        ratio = 1.0 if norm_a == norm_b else (norm_b / norm_a if norm_a else math.inf)
        found.append(Ratio(name, ratio))
    return found


def _off(ratio: float, around: float) -> float:
    """How far ``ratio`` is from ``around``, as a log ratio (``inf`` for a zero or infinite one)."""
    if ratio <= 0 or around <= 0 or math.isinf(ratio) or math.isinf(around):
        return math.inf
    return abs(math.log(ratio / around))


def shape_of(found: Sequence[Ratio]) -> tuple[str, float | None, tuple[Ratio, ...]]:
    """``(kind, scale, apart)`` of differing gradients: ``scale`` when every tensor shares one ratio
    (returned), ``local`` when most sit at 1 and a few do not (``apart``, furthest first),
    ``everywhere`` otherwise (``apart``: those off the median ratio)."""
    finite = [r.ratio for r in found if r.ratio > 0 and math.isfinite(r.ratio)]
    centre = statistics.median(finite) if finite else math.inf
    apart = sorted((r for r in found if _off(r.ratio, centre) > SAME_RATIO), key=lambda r: -_off(r.ratio, centre))
    if finite and not apart:
        return "scale", centre, ()
    if finite and _off(centre, 1.0) <= SAME_RATIO:
        return "local", None, tuple(apart)
    near = math.log1p(NEAR_SCALE)
    if finite and _off(centre, 1.0) > near and all(_off(r.ratio, centre) <= near for r in found):
        return "near_scale", centre, tuple(apart)
    return "everywhere", None, tuple(apart)


def loss_cause(
    loss_a: Sequence[float],
    loss_b: Sequence[float],
    run_a: ExplainRecord,
    run_b: ExplainRecord,
    *,
    rtol: float,
    atol: float,
) -> LossCause:
    """Why ``loss_b`` parts from ``loss_a`` (the compared runs' curves), from each side's explanation run."""
    step = first_apart(loss_a, loss_b, rtol=rtol, atol=atol)
    if step is None:
        return LossCause(step=None)
    upto = [(x, y) for x, y in zip(run_a.steps, run_b.steps, strict=False)][: step + 1]
    differ = []
    started: tuple[Moved, ...] = ()
    values: int | None = None
    if run_a.initial_weights != run_b.initial_weights:
        differ.append("initial weights")
        started, values = moved(run_a.initial, run_b.initial), values_differ(run_a.initial, run_b.initial)
    if any(x.data != y.data for x, y in upto):
        differ.append("data")
    # A step's rate is read after its update: those of the steps before ``step`` made its loss.
    rates = next(((i, x.lr, y.lr) for i, (x, y) in enumerate(upto[:step]) if x.lr != y.lr), None)
    if rates is not None:
        differ.append("learning rate")
    reproduced = all(
        math.isclose(s.loss, ref, rel_tol=1e-6, abs_tol=1e-9)
        for run, curve in ((run_a, loss_a), (run_b, loss_b))
        for s, ref in zip(run.steps[: step + 1], curve, strict=False)
    )
    compared = [(i, x.grads, y.grads) for i, (x, y) in enumerate(upto) if x.grads is not None and y.grads is not None]
    cause = LossCause(
        step=step,
        loss_a=loss_a[step] if step < len(loss_a) else None,
        loss_b=loss_b[step] if step < len(loss_b) else None,
        differ=tuple(differ),
        grads_compared=len(compared),
        reproduced=reproduced,
        started_otherwise=started,
        parameters=len({s.name for s in (*run_a.initial, *run_b.initial)}),
        values_differ=values,
        first_losses=(loss_a[0], loss_b[0]) if loss_a and loss_b else None,
        differs_from=first if (first := _first_difference(loss_a, loss_b)) is not None and first < step else None,
        learning_rates=rates,
    )
    for index, grads_a, grads_b in compared:
        assert grads_a is not None
        assert grads_b is not None
        found = ratios(grads_a, grads_b)
        if any(_off(r.ratio, 1.0) > SAME_RATIO for r in found) or set(grads_a) != set(grads_b):
            shape, scale, apart = shape_of(found)
            # Most at 1, a few apart, is said as it is; any other shape, from other weights or data by
            # this step (its batch included; a learning rate's before it), is read as nothing more.
            if shape != "local" and _otherwise(differ, upto[: index + 1], rates, index):
                shape, scale, apart = "inputs", None, ()
            alone = {side: _last_only(run.steps[index]) for side, run in (("A", run_a), ("B", run_b))}
            # Said only where the other side recorded its last micro-batch apart and accumulated others
            # into its update (with one micro-batch a step, or none recorded, the two are the same).
            only = [side for side, yes in alone.items() if yes is True and alone["B" if side == "A" else "A"] is False]
            return dataclasses.replace(
                cause,
                grad_step=index,
                shape=shape,
                scale=scale,
                apart=apart,
                ratios=tuple(found),
                last_only=only[0] if len(only) == 1 else None,
            )
    return dataclasses.replace(cause, shape="optimizer" if compared else "unknown")


def _otherwise(
    differ: Sequence[str],
    upto: Sequence[tuple[StepFacts, StepFacts]],
    rates: tuple[int, object, object] | None,
    index: int,
) -> bool:
    """Whether the weights or the batch of step ``index`` differ between the sides: other initial weights,
    other data up to it (``upto``), or another learning rate at a step before it."""
    return (
        "initial weights" in differ
        or any(x.data != y.data for x, y in upto)
        or (rates is not None and rates[0] < index)
    )


def _last_only(step: StepFacts) -> bool | None:
    """Whether the step's update used its last micro-batch's gradient alone (each tensor's the same);
    ``None`` where the step recorded no micro-batch's gradient apart."""
    if step.grads is None or not step.last_micro:
        return None
    found = ratios(step.last_micro, step.grads)
    return bool(found) and all(_off(r.ratio, 1.0) <= SAME_RATIO for r in found)


def describe(cause: LossCause) -> str:
    """The cause in one line: ``parts at step 0 (8.3115 → 8.3946): every gradient ×1.010 there; the same
    initial weights, data and learning rate``."""
    if cause.step is None:
        return "the loss curves hold"
    head = f"parts at step {cause.step}"
    if cause.differs_from is not None:  # differing earlier, within the tolerance: both said, as the table says one
        head = f"differs from step {cause.differs_from}, beyond the loss tolerance at step {cause.step}"
    if cause.loss_a is not None and cause.loss_b is not None:
        head += f" ({cause.loss_a:.6g} → {cause.loss_b:.6g})"
    said = _shape_said(cause)
    verb = "differs" if cause.differ == ("learning rate",) else "differ"  # initial weights, data: plural
    inputs = f"{', '.join(cause.differ)} {verb}" if cause.differ else "the same initial weights, data and learning rate"
    if cause.learning_rates is not None:
        step, lr_a, lr_b = cause.learning_rates
        inputs += f" (learning rate {_rates(lr_a)} → {_rates(lr_b)} after step {step})"
    lines = [head, said]
    if cause.last_only is not None:
        other = "A" if cause.last_only == "B" else "B"
        lines.append(
            f"{cause.last_only}'s update used its last micro-batch's gradient alone, the earlier ones dropped "
            f"({other}'s accumulates them)"
        )
    lines.append(inputs)
    if "initial weights" in cause.differ and cause.parameters:
        lines.append(describe_initial(cause.started_otherwise, cause.parameters, cause.values_differ))
    if not cause.reproduced:
        lines.append("the explanation's runs did not reproduce the compared losses (a nondeterministic step)")
    return "; ".join(part for part in lines if part)


def _rates(rates: Sequence[float]) -> str:
    """One learning rate per param group, said once where the groups share it."""
    if not rates:
        return "none recorded"
    if len(set(rates)) == 1:
        return f"{rates[0]:.4g}"
    return "(" + ", ".join(f"{r:.4g}" for r in rates) + ")"


def _shape_said(cause: LossCause) -> str:
    where = "there" if cause.grad_step == cause.step else f"from step {cause.grad_step}"
    if cause.shape == "unknown":
        return "no gradients recorded"
    if cause.shape == "optimizer":
        return f"gradients identical up to step {cause.step}: the update differs (optimizer, learning rate)"
    if cause.shape == "scale" and cause.scale is not None:
        return f"every gradient ×{cause.scale:.4g} {where} ({len(cause.ratios)} tensors): a scale of the loss"
    if cause.shape == "near_scale" and cause.scale is not None:
        return (
            f"every gradient about ×{cause.scale:.3g} {where} ({_range(cause.ratios)}, {len(cause.ratios)} tensors): "
            "a scale of the loss, applied unevenly (as a count of micro-batches or tokens)"
        )
    if cause.shape == "local":
        named = ", ".join(f"{r.name} ×{r.ratio:.3g}" for r in cause.apart[:APART_SHOWN])
        more = ", …" if len(cause.apart) > APART_SHOWN else ""
        return f"{len(cause.apart)} of {len(cause.ratios)} gradients apart {where}: {named}{more}"
    if not cause.ratios:
        return f"the sides' gradients name different parameters {where}"
    if cause.shape == "inputs":
        started = next((d for d in cause.differ if d != "learning rate"), "learning rates")
        return (
            f"gradients apart {where} ({_range(cause.ratios)}), as other {started} make them: the "
            "gradients cannot tell what else changed"
        )
    if cause.grad_step == 0 and cause.step is not None and cause.step > 0 and not cause.differ and _equal_first(cause):
        # Step 0 from the same weights and data, its loss the same: not the forward. (Past step 0 an
        # earlier update may already have moved the weights within the loss's tolerance; a step-0 loss
        # within the tolerance but not equal is another forward or loss, as label smoothing's is.)
        furthest = sorted(cause.ratios, key=lambda r: -_off(r.ratio, 1.0))[:FURTHEST_SHOWN]
        named = ", ".join(f"{r.name} ×{r.ratio:.3g}" for r in furthest)
        return (
            f"every gradient at its own ratio at step {cause.grad_step}, whose loss agrees "
            f"({_range(cause.ratios)}; furthest {named}): the same forward, its gradients computed or "
            "accumulated otherwise"
        )
    said = f"every gradient at its own ratio {where} ({_range(cause.ratios)})"
    return f"{said}: the forward or the loss computed from it differs"


def _equal_first(cause: LossCause) -> bool:
    """Whether step 0's losses are the same but for rounding (not merely within the loss's tolerance)."""
    return cause.first_losses is not None and math.isclose(*cause.first_losses, rel_tol=1e-6, abs_tol=1e-9)


def _range(found: Sequence[Ratio]) -> str:
    finite = [r.ratio for r in found if math.isfinite(r.ratio)]
    return f"×{min(finite):.3g} to ×{max(finite):.3g}" if finite else "no finite ratio"
