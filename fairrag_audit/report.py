"""The audit written out: ``report.md``, a self-contained ``report.html`` (figures embedded as
data URIs), the figures as PNG files, every table as CSV and ``summary.json``."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from fairrag_core.blocks import (
    Block,
    Bullets,
    Figure,
    Heading,
    Paragraph,
    Table,
    html_page,
    markdown,
    markdown_text,
)

from .analysis import ANSWER_COLUMNS, MAX_LISTED, METRICS, STYLE_COLUMNS, AuditResult
from .figures import FIGURES, write_figures
from .options import format_duration

__all__ = [
    "MAX_TABLE_ROWS",
    "OUTPUT_FILES",
    "check_out",
    "csv_safe",
    "markdown_text",
    "write_report",
]

MAX_TABLE_ROWS = 200
"""Rows of one table shown in the report; the CSV files hold them all."""

CI_METHOD = (
    "Intervals are Student t intervals: for means x̄ ± t(n−1)·s/√n; for the exposure share and "
    "the amortized disparity (ratios Σ W_t x_t / Σ W_t) the ratio estimator's linearised "
    "(delta-method) standard error with t(n−1); the disparity's interval is the signed mean's, "
    "folded at 0; every interval is clipped to its metric's range."
)


TABLES = (
    "rankers",
    "metrics",
    "exposure",
    "generation",
    "pairwise",
    "drift",
    "reading",
    "left_out",
)
"""The tables written as CSV files, by their attribute of :class:`AuditResult`."""

OUTPUT_FILES = (
    "report.md",
    "report.html",
    "summary.json",
    *(f"{name}.csv" for name in TABLES),
    *(f"figures/{name}" for name in FIGURES),
)
"""Every file an audit writes into ``--out`` (and replaces when it is there)."""

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""Text a spreadsheet reads as a formula (OWASP "CSV injection"); such a cell gets a ``'``."""


_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
"""A number written as text (a ``--by`` value ``-5``): a spreadsheet reads it as that number."""


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell that starts like a formula prefixed with ``'`` (OWASP's
    rule for CSV injection), but a number written as text (``-5``: no formula; an operator's
    trial found a tenant id ``-5`` written ``'-5``, breaking joins). Numeric columns are left
    numeric: ``-0.25`` stays a number."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object or pd.api.types.is_string_dtype(frame[column]):
            frame[column] = [
                "'" + value
                if isinstance(value, str)
                and value.startswith(FORMULA_START)
                and not _NUMBER.fullmatch(value)
                else value
                for value in frame[column]
            ]
    return frame


def check_out(out: str | Path, logs: Sequence[str | Path] = ()) -> Path:
    """Refuse, before any work, an ``--out`` the report cannot be written to or whose writing
    would replace one of the ``logs`` (``fairrag audit d/reading.csv --out d``): a
    ``ValueError`` naming it."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file; give a folder for the report")
    parent = out
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"--out {str(out)!r}: {str(parent)!r} is a file, not a folder")
    for name in ("figures",):
        if (out / name).exists() and not (out / name).is_dir():
            raise ValueError(f"--out {str(out)!r}: {str(out / name)!r} is a file, not a folder")
    for name in OUTPUT_FILES:
        target = out / name
        for log in logs:
            if target.exists() and Path(log).exists() and os.path.samefile(target, log):
                raise ValueError(
                    f"--out {str(out)!r} would overwrite the log {str(log)!r} with its "
                    f"{name}; give another folder"
                )
    return out


def _fmt(value: object, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def _interval(value: float, low: float, high: float) -> str:
    if value is None or math.isnan(value):
        return "–"
    if math.isnan(low) or math.isnan(high):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def _table(frame: pd.DataFrame, columns: Sequence[str]) -> Table:
    shown = frame.head(MAX_TABLE_ROWS)
    rows = [[_fmt(row[c]) for c in columns] for _, row in shown.iterrows()]
    return Table(list(columns), rows, len(frame))


def _wide(metrics: pd.DataFrame, keys: list[str]) -> Table:
    """One row per cell, one column per metric: ``value [ci_low, ci_high]``."""
    if metrics.empty:
        return Table([*keys, "records"], [], 0)
    cells = metrics.groupby(keys, sort=False)
    rows = []
    for key, group in cells:
        key = key if isinstance(key, tuple) else (key,)
        by_metric = {r["metric"]: r for _, r in group.iterrows()}
        first = group.iloc[0]
        rows.append(
            [str(k) for k in key]
            + [str(int(first["records"]))]
            + [
                _interval(by_metric[m]["value"], by_metric[m]["ci_low"], by_metric[m]["ci_high"])
                if m in by_metric
                else "–"
                for m in METRICS
            ]
        )
    return Table([*keys, "records", *METRICS], rows[:MAX_TABLE_ROWS], len(rows))


def _left_out_blocks(result: AuditResult) -> list[Block]:
    left_out = result.left_out
    if left_out.empty:
        return [Paragraph("None: every non-blank line is a record audited.")]
    counted = int(result.reading[["damaged", "not_records", "refused", "future"]].sum().sum())
    rows = [
        [str(r.file), "–" if pd.isna(r.line) else str(int(r.line)), str(r.kind), str(r.reason)]
        for r in left_out.head(MAX_TABLE_ROWS).itertuples()
    ]
    return [
        Paragraph(
            f"{counted} lines are not records audited: damaged (not JSON), not records, "
            "refused (a value outside its metric's range or over a cap) or dated in the "
            f"future. Listed by line (the first {MAX_LISTED} per file in left_out.csv):"
        ),
        Table(["file", "line", "kind", "reason"], rows, len(left_out)),
    ]


def _generation_blocks(result: AuditResult) -> list[Block]:
    """ "Why the generation metrics are what they are": what the answers cited, per ranker
    (generation.csv), and in words why a generation metric is n/a or thin."""
    table = result.generation
    if table.empty:
        return []
    styles = [c for c in STYLE_COLUMNS if int(table[c].sum())]
    columns = ["ranker", *ANSWER_COLUMNS, *styles]
    shown = table[table["answers"] > 0]
    blocks: list[Block] = [
        Heading("Why the generation metrics are what they are"),
        Bullets(result.generation_why),
    ]
    if not shown.empty:
        blocks += [
            Paragraph(
                "Per ranker: answers; those citing in the paper's format (follows_format); "
                "those whose paper and attributed generation parity is measured; those "
                "recorded without the attributed fields; those attributing nothing; and the "
                "answers using each citation style (style_*, from citation_styles)."
            ),
            _table(shown, columns),
        ]
    return blocks


def _settings(result: AuditResult) -> list[str]:
    """What the audit was asked: the report's first list."""
    o = result.options
    protected = f"protected group for records without one: {o.protected or 'none given'}"
    if o.protected:
        protected += f", target share {o.target_share if o.target_share is not None else 0.5:g}"
    band = o.max_disparity if o.max_disparity is not None else "–"
    return [
        f"logs: {', '.join(str(p) for p in o.paths)}",
        f"split by: ranker{''.join(', ' + f for f in o.by)}",
        f"window: {format_duration(o.window) if o.window else 'none (the whole period)'}",
        f"figures: {result.figure_windows}",
        f"since: {o.since.isoformat() if o.since is not None else 'the first record'}",
        protected,
        f"exposure model for records without one: {o.exposure}",
        f"band for amortized disparity: {band}",
        f"confidence level {o.confidence:g}; pairwise t-tests at alpha {o.alpha:g}",
    ]


def _drift_blocks(result: AuditResult) -> list[Block]:
    band = result.options.max_disparity
    blocks: list[Block] = [Heading("Drift")]
    if band is None:
        return [*blocks, Paragraph("No band given (--max-disparity): drift not checked.")]
    if result.drift.empty:
        return [*blocks, Paragraph(f"Every window's amortized disparity is within [0, {band:g}].")]
    by = result.options.by_columns
    columns = ["ranker", *by, "window", "value", "ci_low", "ci_high", "n", "certain"]
    return [
        *blocks,
        Paragraph(
            f"{len(result.drift)} windows with amortized disparity above {band:g} "
            "(certain: the whole interval is above the band)."
        ),
        _table(result.drift, columns),
    ]


def _pairwise_blocks(result: AuditResult) -> list[Block]:
    blocks: list[Block] = [Heading("Rankers compared")]
    if result.pairwise.empty:
        return [*blocks, Paragraph("Only one ranker in these records: nothing to compare.")]
    columns = [*result.options.by_columns, "metric", "a", "b", "mean_a", "mean_b", "t", "df", "p"]
    return [
        *blocks,
        Paragraph(
            "Independent two-sample Student t-tests with pooled variance, two-tailed "
            "(fairrag_core.stats.pairwise_t_tests), alpha "
            f"{result.options.alpha:g}, on per-record values."
        ),
        _table(result.pairwise, [*columns, "significant"]),
    ]


def _exposure_blocks(result: AuditResult) -> list[Block]:
    by = list(result.options.by_columns)
    exposure = result.exposure.copy()
    exposure["share"] = [
        _interval(v, lo, hi)
        for v, lo, hi in zip(
            exposure["share"], exposure["ci_low"], exposure["ci_high"], strict=True
        )
    ]
    blocks: list[Block] = [
        Heading("Exposure share per group"),
        _table(exposure, ["ranker", *by, "window", "group", "share", "n"]),
    ]
    if by or result.options.window is not None:
        blocks += [
            Heading("Per " + ", ".join(["ranker", *by, "window"])),
            _wide(result.metrics, ["ranker", *by, "window"]),
        ]
    return blocks


def _blocks(result: AuditResult, figures: dict[str, Path]) -> list[Block]:
    """The report, section by section (:mod:`fairrag_core.blocks`)."""
    return [
        Heading("Fairness audit", 1),
        Bullets(_settings(result)),
        Heading("Reading"),
        _table(result.reading, list(result.reading.columns)),
        Heading("What could not be computed"),
        Bullets(result.notes or ["everything asked for was computed"]),
        Heading("Lines left out"),
        *_left_out_blocks(result),
        Heading("Per ranker, whole period"),
        Paragraph(CI_METHOD),
        _wide(result.rankers, ["ranker"]),
        *_generation_blocks(result),
        *_drift_blocks(result),
        Heading("Figures"),
        *(Figure(path, FIGURES[name]) for name, path in figures.items()),
        *_pairwise_blocks(result),
        *_exposure_blocks(result),
    ]


def _summary(result: AuditResult, figures: dict[str, Path]) -> dict[str, object]:
    reading = result.reading
    return {
        "reading": {
            "files": len(reading),
            "lines": int(reading["lines"].sum()),
            "damaged_lines": int(reading["damaged"].sum()),
            "records": int(reading["records"].sum()),
            "used": int(reading["used"].sum()),
        },
        "rankers": json.loads(result.rankers.to_json(orient="records")),
        "generation": json.loads(result.generation.to_json(orient="records")),
        "generation_why": result.generation_why,
        "drift_windows": len(result.drift),
        "figures": sorted(figures),
        "notes": result.notes,
    }


def write_report(result: AuditResult, out: str | Path) -> dict[str, Path]:
    """Write the report of ``result`` into the folder ``out`` (created when missing).

    Returns the paths written: ``report.md``, ``report.html``, ``summary.json``, the CSV tables
    and ``figures/*.png``.
    """
    out = check_out(out, result.options.paths)
    out.mkdir(parents=True, exist_ok=True)
    figures = write_figures(result, out / "figures")
    written: dict[str, Path] = {}
    for name in TABLES:
        path = out / f"{name}.csv"
        csv_safe(getattr(result, name)).to_csv(path, index=False)
        written[path.name] = path
    blocks = _blocks(result, figures)
    (out / "report.md").write_text(markdown(blocks, out), encoding="utf-8")
    (out / "report.html").write_text(html_page(blocks), encoding="utf-8")
    (out / "summary.json").write_text(
        json.dumps(_summary(result, figures), indent=2, default=str), encoding="utf-8"
    )
    for name in ("report.md", "report.html", "summary.json"):
        written[name] = out / name
    written.update({f"figures/{name}": path for name, path in figures.items()})
    return written
