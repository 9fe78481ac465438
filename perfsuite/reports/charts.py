"""The report's charts, each an inline SVG string drawn with matplotlib (the ``report`` extra).

No pyplot and no global backend: each chart is a :class:`matplotlib.figure.Figure`
saved to SVG with text kept as text, a fixed hash salt and no date, so the same input
gives the same bytes. Colours of the memory categories follow PyTorch's memory-timeline
exporter, so people who know that chart recognise this one.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from perfsuite.core.results import ReportCase

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

CATEGORY_COLOURS = {
    "parameters": "darkgreen",
    "gradients": "mediumblue",
    "optimizer_state": "goldenrod",
    "activations": "red",
    "temporaries": "mediumpurple",
    "buffers": "darkslategray",
    "other": "grey",
}
"""Our breakdown's categories in PyTorch's colours (``torch.profiler._memory_profiler``)."""

_STYLE: dict[str, Any] = {
    "svg.hashsalt": "perfsuite",
    "svg.fonttype": "none",
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 7,
    "legend.frameon": False,
}
MIB = 2**20
PARETO_MARKER_PT = 5.0
"""The time-against-memory plot's marker size (points)."""


class ReportExtraMissing(ImportError):
    """matplotlib is not installed: charts need the ``report`` extra."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ReportExtraMissing("the report's charts need matplotlib: pip install 'perfsuite[report]'") from None


@contextmanager
def _figure(width: float, height: float, **kwargs: Any) -> Iterator[Figure]:
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_STYLE):  # type: ignore[arg-type]
        yield Figure(figsize=(width, height), layout="constrained", **kwargs)


def to_svg(fig: Figure) -> str:
    """``fig`` as an SVG element to inline in HTML (no XML prolog, no date)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context(_STYLE):  # type: ignore[arg-type]
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "perfsuite"})
    text = buffer.getvalue()
    # Path data at 0.1 pt is finer than a screen pixel and a third of matplotlib's size.
    text = _PATH_DATA.sub(lambda m: 'd="' + _DECIMALS.sub(r"\1", m.group(1)) + '"', text)
    return text[text.index("<svg") :]


_PATH_DATA = re.compile(r'\bd="([^"]*)"')
_DECIMALS = re.compile(r"(\d\.\d)\d+")


def strategy_colours(strategies: Sequence[str]) -> dict[str, Any]:
    """A stable colour per strategy name (the same strategy keeps its colour across models)."""
    import matplotlib

    palette = list(getattr(matplotlib.colormaps["tab20"], "colors", ()))
    ordered = sorted(set(strategies), key=lambda s: (s != "vanilla", s))
    return {name: palette[i % len(palette)] for i, name in enumerate(ordered)}


def _allowed(baseline: Sequence[float], tolerance: Mapping[str, Any] | None) -> list[float] | None:
    if not tolerance:
        return None
    return [float(tolerance["loss_atol"]) + float(tolerance["loss_rtol"]) * abs(b) for b in baseline]


def _deviation(case: ReportCase) -> list[float] | None:
    """Each step's (run − baseline) ÷ tolerance, what the loss gate checks; ``None`` without a
    baseline curve of the run's length and a tolerance to divide by."""
    base = (case.baseline or {}).get("loss")
    allowed = _allowed(base, case.tolerance) if base else None
    losses = [float(v) for v in case.record.loss] if case.record is not None else []
    if not base or not allowed or len(base) != len(losses):
        return None
    return [(v - b) / a if math.isfinite(v) and a else math.nan for v, b, a in zip(losses, base, allowed, strict=True)]


def compared(cases: Sequence[ReportCase]) -> bool:
    """Whether any case that ran has a deviation from its baseline to draw (the loss chart's lower panel)."""
    return any(_deviation(c) is not None for c in cases if c.ran)


def loss_chart(cases: Sequence[ReportCase], title: str) -> str:
    """Each strategy's loss per optimizer step, its baseline dashed inside the per-step
    tolerance band. Where a case has a baseline, a lower panel shows the difference from it in
    units of that tolerance (what the gate checks; outside ±1 fails), which shows a deviation
    the curves cannot; without one there is nothing to draw there, and no panel."""
    ran = [c for c in cases if c.ran]
    colours = strategy_colours([c.strategy for c in ran])
    lower = compared(ran)
    baselines = any((c.baseline or {}).get("loss") for c in ran)
    with _figure(7.5, 5.2 if lower else 3.6) as fig:
        if lower:
            top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
        else:
            top, bottom = fig.subplots(), None
        for case in ran:
            assert case.record is not None
            losses = [float(v) for v in case.record.loss]
            colour = colours[case.strategy]
            steps = range(len(losses))
            top.plot(
                steps, [v if math.isfinite(v) else math.nan for v in losses], color=colour, lw=1.2, label=case.strategy
            )
            bad = [i for i, v in enumerate(losses) if not math.isfinite(v)]
            if bad:
                top.plot(bad, [top.get_ylim()[1]] * len(bad), "x", color=colour, ms=6)
            base = (case.baseline or {}).get("loss")
            if not base:
                continue
            allowed = _allowed(base, case.tolerance)
            top.plot(range(len(base)), base, color=colour, lw=1, ls="--", alpha=0.8)
            if allowed:
                low = [b - a for b, a in zip(base, allowed, strict=True)]
                high = [b + a for b, a in zip(base, allowed, strict=True)]
                top.fill_between(range(len(base)), low, high, color=colour, alpha=0.15, lw=0)
            ratio = _deviation(case)
            if bottom is not None and ratio is not None:
                bottom.plot(steps, ratio, color=colour, lw=1.2)
        what = " (dashed: baseline, band: tolerance)" if baselines else ""
        top.set_title(f"{title}: loss per optimizer step{what}")
        top.set_ylabel("loss")
        if bottom is not None:
            bottom.axhspan(-1, 1, color="0.85", lw=0, label="tolerance")
            bottom.axhline(0, color="0.4", lw=0.6)
            bottom.set_ylabel("(run − baseline) ÷ tolerance")
        (bottom or top).set_xlabel("optimizer step")
        fig.legend(ncols=min(len(ran), 7) or 1, loc="outside lower center")  # beside the curves, not over them
        return to_svg(fig)


def memory_chart(cases: Sequence[ReportCase], title: str) -> str:
    """One stacked bar per strategy: the breakdown at the peak (MiB), the measured peak marked
    (black) and the baseline's peak (a hollow diamond), labelled with the peak as % of vanilla."""
    ran = [c for c in cases if c.ran]
    control = next((c for c in ran if c.strategy == "vanilla"), None)
    control_peak = control.record.peak_memory_bytes if control and control.record else None
    categories = [k for k in CATEGORY_COLOURS if any(_breakdown(c).get(k) for c in ran)]
    with _figure(7.5, 0.9 + 0.32 * max(len(ran), 1)) as fig:
        ax = fig.subplots()
        rows = list(range(len(ran)))
        left = [0.0] * len(ran)
        for category in categories:
            widths = [_breakdown(c).get(category, 0) / MIB for c in ran]
            ax.barh(
                rows, widths, left=left, color=CATEGORY_COLOURS[category], height=0.7, label=category.replace("_", " ")
            )
            left = [a + b for a, b in zip(left, widths, strict=True)]
        peaks = [c.record.peak_memory_bytes if c.record is not None else None for c in ran]
        marked = [(row, peak / MIB) for row, peak in zip(rows, peaks, strict=True) if peak is not None]
        if marked:
            ax.scatter([x for _, x in marked], [row for row, _ in marked], marker="|", s=160, color="black", lw=1.5)
        for row, peak in zip(rows, peaks, strict=True):
            if peak is not None:
                pct = f" ({100 * peak / control_peak:.0f}% of vanilla)" if control_peak else ""
                ax.annotate(
                    f"{peak / MIB:,.1f} MiB{pct}",
                    (peak / MIB, row),
                    xytext=(6, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=7,
                )
        base = [((c.baseline or {}).get("memory") or {}).get("peak_bytes") for c in ran]
        known = [(row, b / MIB) for row, b in zip(rows, base, strict=True) if b is not None]
        if known:
            ax.scatter(
                [x for _, x in known],
                [row + 0.42 for row, _ in known],
                marker="D",
                s=14,
                facecolors="none",
                edgecolors="black",
                lw=0.8,
            )
        ax.set_yticks(range(len(ran)), [c.strategy for c in ran])
        ax.invert_yaxis()
        ax.set_xlabel("MiB at the peak (black line: peak" + ("; ◇: the baseline's peak)" if known else ")"))
        ax.set_title(f"{title}: memory breakdown at the peak")
        right = max((c.record.peak_memory_bytes or 0) / MIB for c in ran if c.record) if ran else 1.0
        ax.set_xlim(0, right * 1.45 or 1)
        if categories:  # a run without its profile step (--no-profile) has no breakdown to name
            ax.legend(ncols=len(categories), loc="lower center", bbox_to_anchor=(0.5, 1.06))
        return to_svg(fig)


def _breakdown(case: ReportCase) -> dict[str, int]:
    return dict(case.record.memory_breakdown_bytes or {}) if case.record is not None else {}


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (lower is better), by x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front: list[int] = []
    best = math.inf
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def pareto_points(cases: Sequence[ReportCase]) -> tuple[list[ReportCase], list[tuple[float, float]], bool]:
    """The cases the time-against-memory plot shows, each one's (peak MiB, time), and whether
    time is % of vanilla's (when vanilla ran) rather than milliseconds."""
    ran = [c for c in cases if c.ran and c.record and c.record.peak_memory_bytes is not None]
    control = next((c for c in ran if c.strategy == "vanilla"), None)
    base_time = control.record.timed().median if control and control.record else None
    points = []
    for case in ran:
        assert case.record is not None
        assert case.record.peak_memory_bytes is not None
        median = float(case.record.timed().median)
        points.append((case.record.peak_memory_bytes / MIB, 100 * median / base_time if base_time else 1e3 * median))
    return ran, points, bool(base_time)


def pareto_figure(cases: Sequence[ReportCase], title: str) -> tuple[Figure, list[Annotation]]:
    """:func:`pareto_chart`'s figure, laid out, and its strategy labels (for checking their boxes)."""
    from perfsuite.reports.labels import place_labels, renderer_of

    ran, points, relative = pareto_points(cases)
    colours = strategy_colours([c.strategy for c in ran])
    with _figure(6.0, 4.2) as fig:
        ax = fig.subplots()
        for case, (x, y) in zip(ran, points, strict=True):
            ax.plot(x, y, "o", color=colours[case.strategy], ms=PARETO_MARKER_PT)
        front = pareto_front(points)
        legend = None
        if len(front) > 1:
            xs, ys = zip(*(points[i] for i in front), strict=True)
            ax.step(xs, ys, where="post", color="0.3", lw=1, ls=":", label="Pareto front")
            legend = ax.legend(loc="best")
        control = next((c for c in ran if c.strategy == "vanilla"), None)
        if control is not None:
            cx, cy = points[ran.index(control)]
            ax.axvline(cx, color="0.7", lw=0.6)
            ax.axhline(cy, color="0.7", lw=0.6)
        ax.set_xlabel("peak memory (MiB)")
        ax.set_ylabel("median step time (% of vanilla)" if relative else "median step time (ms)")
        ax.set_title(f"{title}: time against memory")
        ax.margins(0.12)
        renderer = renderer_of(fig)
        box = legend.get_window_extent(renderer) if legend is not None else None
        avoid = [(box.x0, box.y0, box.x1, box.y1)] if box is not None else []
        labels = place_labels(ax, renderer, points, [c.strategy for c in ran], PARETO_MARKER_PT, avoid)
        key = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")
        for i, label in enumerate(labels):  # for the browser test to find them
            label.set_gid(f"pareto-{key}-label-{i}")
        if legend is not None:
            legend.set_gid(f"pareto-{key}-legend")
        fig.set_layout_engine("none")  # laid out once: the labels were placed on this layout
        return fig, labels


def pareto_chart(cases: Sequence[ReportCase], title: str) -> str:
    """Step time against peak memory, one point per strategy, the Pareto front joined:
    the strategies worth choosing between. Time is % of vanilla's when vanilla ran. Each
    label is placed apart from the others, the points and the legend
    (:mod:`perfsuite.reports.labels`)."""
    return to_svg(pareto_figure(cases, title)[0])


def trend_chart(series: Sequence[Mapping[str, Any]], columns: int = 4) -> str:
    """Small multiples, one per series: each night's value ÷ baseline inside the gate's band
    (the y axis spans twice the tolerance each way), nights out of it in red, an orange rule
    where a new segment starts (an upgrade or a refresh).

    Each series: ``{"title", "nights": [str], "values": [float], "tolerance": float, "segment_starts": [int]}``.
    """
    from matplotlib.figure import Figure

    columns = max(1, min(columns, len(series)))
    rows = math.ceil(len(series) / columns) or 1
    import matplotlib

    with matplotlib.rc_context(_STYLE):  # type: ignore[arg-type]
        # A fixed grid, not constrained layout: that costs seconds with a hundred panels.
        fig = Figure(figsize=(7.5, 0.95 * rows + 0.3))
        axes = fig.subplots(rows, columns, squeeze=False)
        fig.subplots_adjust(
            left=0.05,
            right=0.99,
            top=1 - 0.25 / (0.95 * rows + 0.3),
            bottom=0.3 / (0.95 * rows + 0.3),
            hspace=0.75,
            wspace=0.25,
        )
        for ax in axes.flat[len(series) :]:
            ax.set_visible(False)
        for ax, s in zip(axes.flat, series, strict=False):
            values, tol = list(s["values"]), float(s["tolerance"]) or 0.15
            xs = list(range(len(values)))
            ax.axhspan(1 - tol, 1 + tol, color="0.88", lw=0)
            ax.plot(xs, [min(max(v, 1 - 2 * tol), 1 + 2 * tol) for v in values], color="0.25", lw=0.9)
            out = [i for i, v in enumerate(values) if abs(v - 1) > tol]
            if out:
                ax.plot(out, [min(max(values[i], 1 - 2 * tol), 1 + 2 * tol) for i in out], "o", color="crimson", ms=2.5)
            for start in s.get("segment_starts", []):
                ax.axvline(start - 0.5, color="darkorange", lw=1, ls="--")
            ax.set_ylim(1 - 2 * tol, 1 + 2 * tol)
            ax.set_xlim(-0.5, max(len(values) - 0.5, 0.5))
            ax.set_yticks([1 - tol, 1, 1 + tol], [f"{-tol:+.0%}", "0", f"{tol:+.0%}"], fontsize=5)
            nights = list(s["nights"])
            ax.set_xticks(
                [0, len(nights) - 1] if nights else [], [nights[0][5:], nights[-1][5:]] if nights else [], fontsize=5
            )
            ax.set_title(s["title"], fontsize=6, pad=2)
        return to_svg(fig)


def heatmap_chart(rows: Sequence[str], nights: Sequence[str], cells: Sequence[Sequence[float | None]]) -> str:
    """Cases × recent nights, each cell the step-time change in units of the case's tolerance
    (blue faster, red slower, beyond ±1 out of tolerance; blank: the case did not run)."""
    import numpy as np

    data = np.array([[math.nan if v is None else max(-2.0, min(2.0, v)) for v in row] for row in cells], dtype=float)
    with _figure(7.5, 0.8 + 0.16 * max(len(rows), 1)) as fig:
        ax = fig.subplots()
        image = ax.imshow(data, cmap="RdBu_r", vmin=-2, vmax=2, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(rows)), list(rows), fontsize=6)
        ax.set_xticks(range(len(nights)), [n[5:] for n in nights], fontsize=6, rotation=90)
        ax.set_title("step time per night: (value ÷ baseline − 1) ÷ tolerance")
        fig.colorbar(image, ax=ax, shrink=0.6, label="÷ tolerance (|x| > 1 is out)")
        return to_svg(fig)


def pair_ratio_chart(cases: Sequence[Mapping[str, Any]], floor: float) -> str:
    """``perfsuite ab``: each pair's time ratio B/A per case (dots, the first pairs lightest), the
    estimate (red tick) and its interval (black bar); the grey band is ± the floor."""
    shown = [c for c in cases if c.get("ratios")]
    with _figure(7.5, 0.9 + 0.34 * max(len(shown), 1)) as fig:
        ax = fig.add_subplot()
        ax.axvspan(1 / (1 + floor), 1 + floor, color="0.92", zorder=0)
        ax.axvline(1.0, color="0.5", lw=0.8)
        for y, case in enumerate(shown):
            ratios = case["ratios"]
            ax.scatter(ratios, [y] * len(ratios), s=10, c=range(len(ratios)), cmap="Blues", vmin=-len(ratios) / 2)
            t = case.get("time")
            if t and t["low"] and t["high"] is not None:  # an unbounded interval (too few pairs) has no bar
                ax.plot([t["low"], t["high"]], [y, y], color="black", lw=2, solid_capstyle="butt")
            if t:
                ax.plot([t["ratio"]], [y], marker="|", color="tab:red", ms=14, mew=2)
        ax.set_yticks(range(len(shown)), [c["case"] for c in shown])
        ax.invert_yaxis()
        ax.set_xlabel("step time B / A, one dot per pair")
        return to_svg(fig)
