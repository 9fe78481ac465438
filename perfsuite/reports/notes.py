"""Numbered notes under a table, for a console (``perfsuite ab``'s causes and remarks). Pure: no torch."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text


class Notes:
    """Numbered notes for a console: each wrapped at the console's width under its own text past its
    ``[n]`` (the marks right-aligned: ``[9]`` under ``[10]``'s ``0]``; a line without a mark under the
    text), and no line of a log padded past its text with spaces."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = list(lines)

    def _grid(self) -> Table:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, justify="right")
        grid.add_column(overflow="fold")
        for line in self.lines:
            mark, text = line.split(" ", 1) if line.startswith("[") else ("", line.strip())
            grid.add_row(mark, Text(text))
        return grid

    def __rich_measure__(self, console: Console, options: Any) -> Measurement:
        return Measurement.get(console, options, self._grid())

    def __rich_console__(self, console: Console, options: Any) -> Iterable[Segment]:
        for segments in console.render_lines(self._grid(), options, pad=False):
            while segments and not segments[-1].control and not segments[-1].text.rstrip():
                segments.pop()
            if segments:
                last = segments.pop()
                segments.append(Segment(last.text.rstrip(), last.style, last.control))
            yield from segments
            yield Segment.line()
