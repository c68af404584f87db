"""The audit written out: ``report.md``, a self-contained ``report.html`` (figures embedded as
data URIs), the figures as PNG files, every table as CSV and ``summary.json``."""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pandas as pd

from .analysis import MAX_LISTED, METRICS, STYLE_COLUMNS, AuditResult
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


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell that starts like a formula prefixed with ``'`` (OWASP's
    rule for CSV injection). Numeric columns are left numeric: ``-0.25`` stays a number."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object or pd.api.types.is_string_dtype(frame[column]):
            frame[column] = [
                "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value
                for value in frame[column]
            ]
    return frame


_MD_INLINE = re.compile(r"[\\`*~|]")
_MD_LINK = re.compile(r"\](?=[(\[])")
_MD_BLOCK_START = re.compile(r"^(\s*)([#+\-=*]+|\d{1,9}[.)])(?=\s|$)")


def _escape_block_start(match: re.Match[str]) -> str:
    mark = match.group(2)
    if mark[0].isdigit():  # an ordered list: CommonMark escapes its "." or ")"
        return match.group(1) + mark[:-1] + "\\" + mark[-1]
    return match.group(1) + "\\" + mark


def markdown_text(text: object, *, block: bool = False) -> str:
    """``text`` safe in Markdown: HTML's ``& < >`` as entities (no raw tag survives), the
    characters that make code, emphasis, strike-through, links or table cells escaped, line
    breaks as spaces; with ``block``, also a leading ``#``, ``-``, ``+``, ``=`` or ``1.`` (a
    heading or list where a line starts)."""
    value = html.escape(str(text), quote=False)
    value = value.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    value = _MD_INLINE.sub(lambda m: "\\" + m.group(0), value)
    value = _MD_LINK.sub(lambda m: "]\\", value)
    if block:
        value = _MD_BLOCK_START.sub(_escape_block_start, value)
    return value


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


@dataclass(frozen=True)
class _Table:
    header: list[str]
    rows: list[list[str]]
    total: int


@dataclass(frozen=True)
class _Figure:
    path: Path
    caption: str


_Block = tuple[str, object]  # ("h2" | "p" | "ul", text or list) or ("table", _Table) or figure


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


def _table(frame: pd.DataFrame, columns: Sequence[str]) -> _Table:
    shown = frame.head(MAX_TABLE_ROWS)
    rows = [[_fmt(row[c]) for c in columns] for _, row in shown.iterrows()]
    return _Table(list(columns), rows, len(frame))


def _wide(metrics: pd.DataFrame, keys: list[str]) -> _Table:
    """One row per cell, one column per metric: ``value [ci_low, ci_high]``."""
    if metrics.empty:
        return _Table([*keys, "records"], [], 0)
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
    return _Table([*keys, "records", *METRICS], rows[:MAX_TABLE_ROWS], len(rows))


def _left_out_blocks(result: AuditResult) -> list[_Block]:
    left_out = result.left_out
    if left_out.empty:
        return [("p", "None: every non-blank line is a record audited.")]
    counted = int(result.reading[["damaged", "not_records", "refused", "future"]].sum().sum())
    rows = [
        [str(r.file), "–" if pd.isna(r.line) else str(int(r.line)), str(r.kind), str(r.reason)]
        for r in left_out.head(MAX_TABLE_ROWS).itertuples()
    ]
    return [
        (
            "p",
            f"{counted} lines are not records audited: damaged (not JSON), not records, "
            "refused (a value outside its metric's range or over a cap) or dated in the "
            f"future. Listed by line (the first {MAX_LISTED} per file in left_out.csv):",
        ),
        ("table", _Table(["file", "line", "kind", "reason"], rows, len(left_out))),
    ]


def _generation_blocks(result: AuditResult) -> list[_Block]:
    """ "Why the generation metrics are what they are": what the answers cited, per ranker
    (generation.csv), and in words why a generation metric is n/a or thin."""
    table = result.generation
    if table.empty:
        return []
    styles = [c for c in STYLE_COLUMNS if int(table[c].sum())]
    columns = [
        "ranker",
        "answers",
        "follows_format",
        "paper_measured",
        "attributed_measured",
        "without_attribution",
        "attributed_nothing",
        *styles,
    ]
    shown = table[table["answers"] > 0]
    blocks: list[_Block] = [
        ("h2", "Why the generation metrics are what they are"),
        ("ul", result.generation_why),
    ]
    if not shown.empty:
        blocks += [
            (
                "p",
                "Per ranker: answers; those citing in the paper's format (follows_format); "
                "those whose paper and attributed generation parity is measured; those "
                "recorded without the attributed fields; those attributing nothing; and the "
                "answers using each citation style (style_*, from citation_styles).",
            ),
            ("table", _table(shown, columns)),
        ]
    return blocks


def _blocks(result: AuditResult, figures: dict[str, Path]) -> list[_Block]:
    o = result.options
    by = list(o.by)
    settings = [
        f"logs: {', '.join(str(p) for p in o.paths)}",
        f"split by: ranker{''.join(', ' + f for f in by)}",
        f"window: {format_duration(o.window) if o.window else 'none (the whole period)'}",
        f"figures: {result.figure_windows}",
        f"since: {o.since.isoformat() if o.since is not None else 'the first record'}",
        f"protected group for records without one: {o.protected or 'none given'}"
        + (
            f", target share {o.target_share if o.target_share is not None else 0.5:g}"
            if o.protected
            else ""
        ),
        f"exposure model for records without one: {o.exposure}",
        f"band for amortized disparity: {o.max_disparity if o.max_disparity is not None else '–'}",
        f"confidence level {o.confidence:g}; pairwise t-tests at alpha {o.alpha:g}",
    ]
    blocks: list[_Block] = [
        ("h1", "Fairness audit"),
        ("ul", settings),
        ("h2", "Reading"),
        ("table", _table(result.reading, list(result.reading.columns))),
        ("h2", "What could not be computed"),
        ("ul", result.notes or ["everything asked for was computed"]),
        ("h2", "Lines left out"),
        *_left_out_blocks(result),
        ("h2", "Per ranker, whole period"),
        ("p", CI_METHOD),
        ("table", _wide(result.rankers, ["ranker"])),
        *_generation_blocks(result),
    ]
    blocks.append(("h2", "Drift"))
    if o.max_disparity is None:
        blocks.append(("p", "No band given (--max-disparity): drift not checked."))
    elif result.drift.empty:
        blocks.append(
            ("p", f"Every window's amortized disparity is within [0, {o.max_disparity:g}].")
        )
    else:
        blocks += [
            (
                "p",
                f"{len(result.drift)} windows with amortized disparity above {o.max_disparity:g} "
                "(certain: the whole interval is above the band).",
            ),
            (
                "table",
                _table(
                    result.drift,
                    ["ranker", *by, "window", "value", "ci_low", "ci_high", "n", "certain"],
                ),
            ),
        ]
    blocks.append(("h2", "Figures"))
    for name, path in figures.items():
        blocks.append(("figure", _Figure(path, FIGURES[name])))
    blocks.append(("h2", "Rankers compared"))
    if result.pairwise.empty:
        blocks.append(("p", "Only one ranker in these records: nothing to compare."))
    else:
        blocks += [
            (
                "p",
                "Independent two-sample Student t-tests with pooled variance, two-tailed "
                f"(fairrag_core.stats.pairwise_t_tests), alpha {o.alpha:g}, on per-record values.",
            ),
            (
                "table",
                _table(
                    result.pairwise,
                    [*by, "metric", "a", "b", "mean_a", "mean_b", "t", "df", "p", "significant"],
                ),
            ),
        ]
    exposure = result.exposure.copy()
    exposure["share"] = [
        _interval(v, lo, hi)
        for v, lo, hi in zip(
            exposure["share"], exposure["ci_low"], exposure["ci_high"], strict=True
        )
    ]
    blocks += [
        ("h2", "Exposure share per group"),
        ("table", _table(exposure, ["ranker", *by, "window", "group", "share", "n"])),
    ]
    if by or o.window is not None:
        blocks += [
            ("h2", "Per " + ", ".join(["ranker", *by, "window"])),
            ("table", _wide(result.metrics, ["ranker", *by, "window"])),
        ]
    return blocks


def _markdown(blocks: list[_Block], out: Path) -> str:
    lines: list[str] = []
    for kind, payload in blocks:
        if kind == "h1":
            lines += [f"# {payload}", ""]
        elif kind == "h2":
            lines += [f"## {payload}", ""]
        elif kind == "p":
            lines += [markdown_text(payload, block=True), ""]
        elif kind == "ul":
            lines += [f"- {markdown_text(item, block=True)}" for item in cast(list, payload)]
            lines += [""]
        elif kind == "table":
            table = cast(_Table, payload)
            lines.append("| " + " | ".join(markdown_text(h) for h in table.header) + " |")
            lines.append("|" + "---|" * len(table.header))
            lines += [
                "| " + " | ".join(markdown_text(cell) for cell in row) + " |" for row in table.rows
            ]
            if table.total > len(table.rows):
                lines.append(f"\n({len(table.rows)} of {table.total} rows; all in the CSV files)")
            lines.append("")
        elif kind == "figure":
            figure = cast(_Figure, payload)
            lines += [f"![{figure.caption}]({figure.path.relative_to(out).as_posix()})", ""]
    return "\n".join(lines)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; white-space: nowrap; }
th { background: #f2f2f2; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
"""


def _html(blocks: list[_Block]) -> str:
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>Fairness audit</title>',
        f"<style>{_STYLE}</style></head><body>",
    ]
    for kind, payload in blocks:
        if kind in ("h1", "h2"):
            parts.append(f"<{kind}>{esc(str(payload))}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{esc(str(payload))}</p>")
        elif kind == "ul":
            items = "".join(f"<li>{esc(str(item))}</li>" for item in cast(list, payload))
            parts.append(f"<ul>{items}</ul>")
        elif kind == "table":
            table = cast(_Table, payload)
            head = "".join(f"<th>{esc(h)}</th>" for h in table.header)
            body = "".join(
                "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in table.rows
            )
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            if table.total > len(table.rows):
                parts.append(
                    f"<p>({len(table.rows)} of {table.total} rows; all in the CSV files)</p>"
                )
        elif kind == "figure":
            figure = cast(_Figure, payload)
            data = base64.b64encode(figure.path.read_bytes()).decode("ascii")
            parts.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{esc(figure.caption)}">'
                f"<figcaption>{esc(figure.caption)}</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


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
    (out / "report.md").write_text(_markdown(blocks, out), encoding="utf-8")
    (out / "report.html").write_text(_html(blocks), encoding="utf-8")
    (out / "summary.json").write_text(
        json.dumps(_summary(result, figures), indent=2, default=str), encoding="utf-8"
    )
    for name in ("report.md", "report.html", "summary.json"):
        written[name] = out / name
    written.update({f"figures/{name}": path for name, path in figures.items()})
    return written
