"""An explanation's charts (inline SVG, :mod:`perfsuite.reports.charts`' look): the differential
flame graph of the profiled step, and where two loss curves part with the gradients' ratios there."""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfsuite.core.explain.flame import Box
from perfsuite.core.explain.frames import short
from perfsuite.core.explain.gradients import LossCause
from perfsuite.reports.charts import _figure, to_svg

NEUTRAL = (0.93, 0.89, 0.80)
"""A frame whose time moved less than the threshold (or when there is none)."""
ROW_IN = 0.17
CHAR_PT = 4.6
"""About the width of one character of the labels (6 pt), to cut a label to its box."""


def _colour(box: Box, largest: float) -> tuple[float, float, float]:
    delta = box.us_b - box.us_a
    if not box.moved or largest <= 0:
        return NEUTRAL
    strength = 0.25 + 0.75 * min(1.0, abs(delta) / largest)
    return (1.0, 1 - 0.8 * strength, 1 - 0.8 * strength) if delta > 0 else (1 - 0.8 * strength, 1 - 0.6 * strength, 1.0)


def flame_chart(boxes: Sequence[Box], width_in: float = 10.0) -> str:
    """The profiled step, outermost frame at the bottom, each box as wide as the sides' mean time in
    it and below it; red where B spends more per step beyond the frame's own bar, blue less."""
    from matplotlib.patches import Rectangle

    depth = 1 + max((b.depth for b in boxes), default=0)
    largest = max((abs(b.us_b - b.us_a) for b in boxes if b.moved), default=0.0)
    with _figure(width_in, 0.6 + ROW_IN * depth) as fig:
        ax = fig.add_subplot()
        for box in boxes:
            ax.add_patch(
                Rectangle(
                    (box.start, box.depth), box.width, 0.94, facecolor=_colour(box, largest), lw=0.2,
                    edgecolor="white",
                )
            )  # fmt: skip
            chars = int(box.width * width_in * 72 / CHAR_PT)
            label = short(box.name).rsplit("/", 1)[-1]
            if chars >= 4:
                text = label if len(label) <= chars else label[: chars - 1] + "…"
                ax.text(box.start + 0.002, box.depth + 0.47, text, fontsize=6, va="center", ha="left", clip_on=True)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, depth)
        ax.set_yticks([])
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1], ["0", "25%", "50%", "75%", "100% of the step"])
        for side in ("left", "top", "right"):
            ax.spines[side].set_visible(False)
        return to_svg(fig)


def gradient_chart(loss_a: Sequence[float], loss_b: Sequence[float], cause: LossCause) -> str:
    """Left: both loss curves, the first step beyond the tolerance marked. Right: each parameter's
    gradient norm B ÷ A at the first step whose gradients differ, in the model's order; the tensors
    off the shared ratio in red."""
    with _figure(10.0, 3.2) as fig:
        left, right = fig.subplots(1, 2, width_ratios=[2, 3])
        left.plot(range(len(loss_a)), loss_a, lw=1.2, label="base")
        left.plot(range(len(loss_b)), loss_b, lw=1.2, ls="--", label="candidate")
        if cause.step is not None:
            left.axvline(cause.step, color="tab:red", lw=0.8)
            left.set_title(f"loss parts at step {cause.step}")
        left.set_xlabel("optimizer step")
        left.legend()
        apart = {r.name for r in cause.apart}
        shown = [(i, r) for i, r in enumerate(cause.ratios) if math.isfinite(r.ratio)]
        colours = ["tab:red" if r.name in apart else "tab:blue" for _, r in shown]
        right.scatter([i for i, _ in shown], [r.ratio for _, r in shown], s=8, c=colours)
        right.axhline(1.0, color="0.5", lw=0.8)
        if cause.scale is not None:
            right.axhline(cause.scale, color="tab:blue", lw=0.6, ls=":")
        right.set_xlabel("parameter (model order)")
        right.set_ylabel("gradient norm B ÷ A")
        step = "no step" if cause.grad_step is None else f"step {cause.grad_step}"
        shape = "other weights, data or learning rate" if cause.shape == "inputs" else cause.shape
        right.set_title(f"gradients at {step}: {shape}")
        return to_svg(fig)
