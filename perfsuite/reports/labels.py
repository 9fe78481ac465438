"""Labels of a scatter placed so that none covers another label, a point or the legend.

A simple repel, deterministic: each label in turn tries offsets from its point, nearest
first and around it in a fixed order, and keeps the first whose box (measured with
matplotlib's renderer, padded) stays inside the axes and overlaps no point's marker, no
label already placed, no leader line and the legend. A label placed away from its point gets
a thin leader line to it, which crosses no other label where any free place allows. The
boxes are display coordinates of the figure as laid out; the figure's layout is frozen once
they are placed, so saving it does not move the axes under them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

Box = tuple[float, float, float, float]
"""``(x0, y0, x1, y1)`` in display pixels."""

RADII_PT = (2.0, 5.0, 9.0, 14.0, 20.0, 28.0, 38.0, 50.0, 64.0, 80.0, 100.0, 125.0, 150.0)
"""Gaps tried between a point and its label's box, in points, nearest first."""
ANGLES = 16
"""Directions tried at each gap, counter-clockwise from upper right."""
PAD_PT = 1.5
"""Clearance kept around every box: a browser's font may set the text a little wider."""
LEADER_PT = 6.0
"""A label whose box lies farther than this from its point gets a leader line."""


def renderer_of(fig: Figure) -> RendererBase:
    """An Agg renderer for ``fig`` with its layout computed (the figure gets an Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    renderer: RendererBase = canvas.get_renderer()  # type: ignore[no-untyped-call]
    return renderer


def overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(box: Box, frame: Box) -> bool:
    return box[0] >= frame[0] and box[1] >= frame[1] and box[2] <= frame[2] and box[3] <= frame[3]


def _crosses(segment: tuple[float, float, float, float], box: Box) -> bool:
    """Whether the segment ``(x0, y0, x1, y1)`` passes through ``box`` (Liang-Barsky clipping)."""
    x0, y0, x1, y1 = segment
    dx, dy = x1 - x0, y1 - y0
    low, high = 0.0, 1.0
    for p, q in ((-dx, x0 - box[0]), (dx, box[2] - x0), (-dy, y0 - box[1]), (dy, box[3] - y0)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


def _extent(annotation: Annotation, renderer: RendererBase) -> Box:
    """The text's box alone (an annotation's own extent takes in its leader line too)."""
    from matplotlib.text import Text

    annotation.update_positions(renderer)
    box = Text.get_window_extent(annotation, renderer)
    return (box.x0, box.y0, box.x1, box.y1)


def label_boxes(annotations: Sequence[Annotation], renderer: RendererBase) -> list[Box]:
    """Each label's text box as drawn, in display pixels (unpadded)."""
    return [_extent(a, renderer) for a in annotations]


def place_labels(
    ax: Axes,
    renderer: RendererBase,
    points: Sequence[tuple[float, float]],
    texts: Sequence[str],
    marker_pt: float,
    avoid: Sequence[Box] = (),
    fontsize: float = 7,
) -> list[Annotation]:
    """Annotate ``points`` (data coordinates) with ``texts``, each placed apart from every other
    label, every point (a marker ``marker_pt`` wide) and the boxes in ``avoid`` (the legend).
    A label that fits nowhere is put at its nearest candidate all the same."""
    scale = ax.figure.dpi / 72
    pad = PAD_PT * scale
    frame = ax.get_window_extent(renderer)
    inside: Box = (frame.x0, frame.y0, frame.x1, frame.y1)
    shown = [(float(x), float(y)) for x, y in ax.transData.transform(points)] if points else []
    half = marker_pt * scale / 2 + pad
    markers: list[Box] = [(x - half, y - half, x + half, y + half) for x, y in shown]
    blocked: list[Box] = markers + [(b[0] - pad, b[1] - pad, b[2] + pad, b[3] + pad) for b in avoid]
    leaders: list[tuple[float, float, float, float]] = []
    placed: list[Annotation] = []
    for point, (x, y), text in zip(points, shown, texts, strict=True):
        probe = ax.annotate(text, point, fontsize=fontsize)
        x0, y0, x1, y1 = _extent(probe, renderer)
        probe.remove()
        width, height = x1 - x0 + 2 * pad, y1 - y0 + 2 * pad
        others = blocked[len(points) :]  # a leader may pass a marker, never a label or the legend
        dx, dy, gap = _first_free(x, y, width, height, half, scale, inside, blocked, others, leaders)
        leader = gap > LEADER_PT
        annotation = ax.annotate(
            text,
            point,
            xytext=(dx / scale, dy / scale),
            textcoords="offset points",
            ha="center",
            va="center",
            fontsize=fontsize,
            arrowprops={"arrowstyle": "-", "color": "0.55", "lw": 0.5, "shrinkA": 0, "shrinkB": 0} if leader else None,
        )
        annotation.set_in_layout(False)  # the axes must not move once the labels are placed
        if leader:
            leaders.append((x, y, x + dx, y + dy))
        x0, y0, x1, y1 = _extent(annotation, renderer)
        blocked.append((x0 - pad, y0 - pad, x1 + pad, y1 + pad))
        placed.append(annotation)
    return placed


def _first_free(
    x: float,
    y: float,
    width: float,
    height: float,
    half: float,
    scale: float,
    inside: Box,
    blocked: Sequence[Box],
    others: Sequence[Box],
    leaders: Sequence[tuple[float, float, float, float]],
) -> tuple[float, float, float]:
    """The first offset ``(dx, dy, gap)`` (pixels, and the gap in points) at which a box of
    ``width`` × ``height`` centred there is free, its leader crossing no label or legend; failing
    that, the first free box whatever its leader crosses; failing that, the nearest candidate."""
    candidates = []
    for gap in RADII_PT:
        for k in range(ANGLES):
            angle = math.pi / 4 + 2 * math.pi * k / ANGLES
            dx = math.cos(angle) * (half + gap * scale + width / 2)
            dy = math.sin(angle) * (half + gap * scale + height / 2)
            candidates.append((dx, dy, gap))
    free = []
    for dx, dy, gap in candidates:
        box = (x + dx - width / 2, y + dy - height / 2, x + dx + width / 2, y + dy + height / 2)
        if _inside(box, inside) and not any(overlaps(box, b) for b in blocked):
            if not any(_crosses(s, box) for s in leaders):
                free.append((dx, dy, gap))
    for dx, dy, gap in free:
        if gap <= LEADER_PT or not any(_crosses((x, y, x + dx, y + dy), b) for b in others):
            return (dx, dy, gap)
    return (free or candidates)[0]
