"""What a person reads: the terminal tables (:mod:`.tables`), and from a results file the
self-contained ``report.html`` (:mod:`.html`, charts in :mod:`.charts`) and the job
summary ``summary.md`` (:mod:`.summary`). Only :mod:`.charts` needs matplotlib (the
``report`` extra; :mod:`.labels` places a scatter's labels for it); nothing here needs torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.core.ab_file import AbFile, is_ab
from perfsuite.core.baselines import write_texts_atomic
from perfsuite.core.results import Results, gate_runs, parse_results
from perfsuite.core.results_file import EXPECTED_REPORT, ResultsError, read_results_json
from perfsuite.reports.ab import write_report as write_ab_report


def write_report(
    results: Results | Path,
    out_dir: Path,
    *,
    history: Path | None = None,
    machine: str | None = None,
    baselines: Path | None = None,
    settings: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``report.html`` and ``summary.md`` into ``out_dir``, both or neither (each is drawn first,
    then the two are written together: :func:`~perfsuite.core.baselines.write_texts_atomic`); return their paths.

    ``results``: a results file or its parsed form; ``perfsuite ab --json``'s file gets the
    comparison's page (:mod:`perfsuite.reports.ab`).

    ``history``: a directory of nightly records (:mod:`perfsuite.history.records`) for the
    trends, the heatmap and the sparklines, limited to this results file's machine.
    ``baselines``: for a ``perfsuite run`` file, compare its cases with these first.
    """
    from perfsuite.history.records import load_records, machine_of
    from perfsuite.reports.html import report_html
    from perfsuite.reports.summary import summary_markdown

    if not isinstance(results, Results):
        data = read_results_json(results, EXPECTED_REPORT)
        if is_ab(data):
            try:  # every value the pages read, checked before any is drawn: a wrong one names its key
                AbFile.from_json(data, str(results))
            except ValueError as exc:
                raise ResultsError(str(exc)) from None
            return write_ab_report(data, out_dir)
        results = parse_results(data, str(results), EXPECTED_REPORT)
    if baselines is not None and results.kind == "run":
        gate_runs(results, baselines, settings)
    records = load_records(history) if history is not None else None
    if records is not None and machine is None and any(c.ran for c in results.cases):
        machine = machine_of(results)
    # Both drawn before either is written, and written together: never a new page beside an old summary.
    page, summary = out_dir / "report.html", out_dir / "summary.md"
    texts = {page: report_html(results, records, machine), summary: summary_markdown(results, records, machine)}
    write_texts_atomic(texts)
    return [page, summary]
