"""The audit's tables: per ranker, field values and time window, the fairness of what was shown
and said, with confidence intervals; pairwise tests between rankers; drift out of a band.

Definitions (docs/SPEC.md): for record t with shown-list position weights ``v_i`` (its exposure
model), ``W_t = Σ_i v_i`` and the protected exposure share ``p_t = ES_protected,t``; its target
share ``τ_t``.

- **exposure share** of a group over many records: ``Σ_t W_t ES_g,t / Σ_t W_t`` (the
  amortized share; for equal k the mean share). ``ES_g,t`` is the record's
  ``exposure_by_group[g]`` when present, else derived from ``groups`` and the exposure model.
- **amortized disparity**: ``|Σ_t W_t (p_t − τ_t) / Σ_t W_t|`` ("Metrics over many rankings";
  with one target for every record this is ``|Σ_t p_t W_t / Σ_t W_t − τ|``. Records with
  different targets each count against their own: our choice, the spec has one target).
- **exposure disparity**: the mean of the per-list ``|p_t − τ_t|``.
- generation parity, grounded generation parity, groundedness, fairness gap and its magnitude,
  and the attributed generation parity, fairness gap and groundedness (docs/SPEC.md
  "Attribution"): means of the values the records carry (NaN, ``null`` in the log, counted as
  missing).
- what the answers cited (:func:`_generation_table`): per ranker, the answers, those in the
  paper's format, those whose paper and attributed parity are measured, those recorded before
  the attribution, those attributing nothing, and the answers using each citation style (the
  records' ``citation_styles``); :attr:`AuditResult.generation_why` says in words why the
  generation metrics are n/a or thin and what to change.

Confidence intervals are Student t intervals at ``confidence``: for means, ``x̄ ± t_{n−1}
s/√n``; for the two ratio statistics above, the ratio estimator's linearised (delta-method)
standard error ``se² = n / ((n − 1) (Σ W)²) · Σ W_t² (x_t − m)²`` with ``t_{n−1}``. The
interval of the amortized disparity is that of the signed mean folded at 0. Intervals are
clipped to the metric's range (shares in [0, 1], gaps in [−1, 1]). Every table is made from
the partial aggregates of :mod:`fairrag_audit.partials` (sums DuckDB computes, so the records
are never held as Python objects): one run's, or the merged partials of several windows, the
same report either way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from fairrag_core.stats import critical_t, student_t_ppf, student_t_sf

from .options import AuditOptions, format_duration
from .partials import (
    FIGURE_WINDOWS,
    MISSING_VALUE,
    STYLE_COLUMNS,
    WINDOW_ORIGIN,
    Partials,
    compute_partials,
    figure_window_seconds,
    options_of,
    read_partials,
)
from .partials import (
    MAX_LISTED as MAX_LISTED,  # re-exported: the report lists this many lines per file
)
from .scan import ATTRIBUTED_FIELDS, METRIC_FIELDS, METRIC_RANGES

__all__ = ["METRICS", "AuditResult", "audit", "audit_partials", "report_of", "run_audit"]

METRICS = (
    "exposure_share",
    "amortized_disparity",
    "exposure_disparity",
    *METRIC_FIELDS,
)
"""Metric names of the tables, in report order (``exposure_share`` is the protected group's)."""

RANGES = {**dict.fromkeys(METRICS, (0.0, 1.0)), **METRIC_RANGES}
"""Values each metric can take (docs/SPEC.md "Metrics"); intervals are clipped to them."""

PAIRWISE_METRICS = ("exposure_share", "exposure_disparity", *METRIC_FIELDS)
"""Per-record metrics compared between rankers (the amortized disparity is one number per
stream; its per-record counterpart, the signed share, is ``exposure_share``)."""

RATIO_SUMS = ("sw", "a", "b", "c", "sw2")
"""The ratio estimator's sums of a measure x: Σ W, Σ W x, Σ W² x, Σ W² x², Σ W²."""
NO_TIMESTAMP = "(no timestamp)"
ALL_TIME = "all"
MAX_COMPARED_RANKERS = 20
"""Rankers compared two by two (those with the most records): the pairs grow as the square."""


@dataclass
class AuditResult:
    """The tables of one audit (pandas DataFrames) and what could not be computed."""

    options: AuditOptions
    reading: pd.DataFrame
    """Per file: lines, damaged lines, records used, excluded, and records per source."""
    rankers: pd.DataFrame
    """Per ranker over the whole period: one row per metric (value, ci_low, ci_high, n, ...)."""
    metrics: pd.DataFrame
    """Per ranker, ``by`` values and window: one row per metric."""
    exposure: pd.DataFrame
    """Per ranker, ``by`` values, window and social group: the group's exposure share."""
    trend_metrics: pd.DataFrame
    """Per ranker and window (``by`` values pooled): one row per metric (for the figures)."""
    trend_exposure: pd.DataFrame
    """Per ranker, window and social group (``by`` values pooled): exposure share."""
    pairwise: pd.DataFrame
    """Pooled-variance t-tests between rankers, per metric and ``by`` values (whole period)."""
    drift: pd.DataFrame
    """Windows whose amortized disparity is above ``max_disparity``."""
    left_out: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Lines that are not records audited: file, line (1-based), kind (``damaged``,
    ``not_record``, ``refused``, ``future``) and reason; the first MAX_LISTED per file."""
    figure_windows: str = ""
    """How the time figures are split: the ``--window``, or the windows chosen for them."""
    cumulative: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per ranker and window of the figures, as records accumulate: ``records`` so far,
    ``series`` (a group's exposure share, or ``amortized disparity``) and its ``value``."""
    notes: list[str] = field(default_factory=list)
    """What could not be computed, and why (with counts)."""
    generation: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per ranker, what the answers cited: ``answers``, ``follows_format`` (a ``(DocTitle:
    X)`` citation parsed: ``follows_citation_format``, or in a record without it a paper
    generation parity), ``paper_measured`` and ``attributed_measured`` (answers whose
    paper / attributed generation parity has a value), ``without_attribution`` (recorded
    before the attribution: no attributed fields), ``attributed_nothing``, ``bullets`` and
    ``attributed_bullets``, and per citation style ``style_<name>`` the answers using it
    (``style_none``: none)."""
    generation_why: list[str] = field(default_factory=list)
    """Why the generation metrics are what they are (n/a or thin), and what to change."""

    @property
    def keys(self) -> list[str]:
        """The columns a window row is keyed by: ranker, the ``by`` fields, window."""
        return ["ranker", *self.options.by_columns, "window"]


def audit(
    paths: Sequence[str] | str,
    *,
    by: Sequence[str] | str = (),
    since: str | datetime | None = None,
    window: str | None = None,
    max_disparity: float | None = None,
    protected: str | None = None,
    target_share: float | None = None,
    exposure: str = "dcg",
    confidence: float = 0.95,
    alpha: float = 0.01,
) -> AuditResult:
    """Audit JSON-lines fairness logs (plain or gzip) and return the tables.

    Args:
        paths: log files of ``FairnessCallbackHandler``, ``FairnessEventHandler`` or the
            study's ``records.jsonl``, in any mix.
        by: record fields to split by besides the ranker (``tenant``, ``topic``), looked up
            at top level, then inside the record's ``metadata``.
        since: keep records at or after this time: ISO 8601, or a duration before now
            (``7d``). Records without a timestamp are then left out (and counted).
        window: split time into windows of this length (``1h``, ``1d``); records without a
            timestamp go to a window of their own.
        max_disparity: the band ``[0, max_disparity]`` for the amortized disparity; windows
            above it are listed in ``drift``.
        protected: the protected group of records that do not carry ``protected`` themselves.
        target_share: the protected group's target share (default 0.5) for records that do not
            carry ``target`` themselves.
        exposure: exposure model of records without ``exposure_model``: ``dcg``,
            ``uniform``, ``rbp`` or ``rbp(p)``.
        confidence: level of the t confidence intervals.
        alpha: two-tailed level of the pairwise t-tests (docs/SPEC.md: 0.01).

    Returns:
        An :class:`AuditResult`; bad arguments raise ``ValueError`` naming them.
    """
    options = AuditOptions.create(
        paths,
        by=by,
        since=since,
        window=window,
        max_disparity=max_disparity,
        protected=protected,
        target_share=target_share,
        exposure=exposure,
        confidence=confidence,
        alpha=alpha,
    )
    return run_audit(options)


def run_audit(options: AuditOptions, con: duckdb.DuckDBPyConnection | None = None) -> AuditResult:
    """:func:`audit` with checked options (and optionally an open DuckDB connection): the
    report of this run's partial aggregates (:func:`fairrag_audit.partials.compute_partials`).

    Without a connection, the records go to a DuckDB file in a temporary folder (removed
    after), so that the audit's memory stays within DuckDB's limit whatever the number of
    records: the tables of an in-memory database (temporary tables too) stay in memory."""
    return report_of(compute_partials(options, con), options)


def audit_partials(
    folders: Iterable[str | Path],
    *,
    max_disparity: float | None = None,
    confidence: float = 0.95,
    alpha: float = 0.01,
) -> AuditResult:
    """The report of the partial aggregates earlier runs saved (``fairrag audit LOG...
    --partials-out DIR``, :func:`fairrag_audit.partials.write_partials`), merged: equal to
    the one-shot audit of all their logs with the same settings (docs/SPEC.md "Partial
    aggregates"). No log is read. ``max_disparity``, ``confidence`` and ``alpha`` are the
    report's band and levels (:func:`audit`)."""
    folders = list(folders)
    if not folders:
        raise ValueError("--from-partials: give at least one folder of saved partials")
    partials = read_partials(folders)
    levels = {"max_disparity": max_disparity, "confidence": confidence, "alpha": alpha}
    return report_of(partials, options_of(partials, **levels))


def report_of(partials: Partials, options: AuditOptions) -> AuditResult:
    """Every table of the audit (:class:`AuditResult`) from ``partials`` (one run's, or
    merged), at ``options``' levels."""
    fine = ["ranker", *(f"by_{i}" for i in range(len(options.by))), "window_start"]
    cells = partials.cells
    trend_cells, trend_groups, figure_windows, labels = _trend(partials, options)
    trend = ["ranker", "window_start"]
    trend_exposure = _label(
        _exposure_rows(trend_cells, trend_groups, trend, options), options, labels
    )
    metrics = _label(metric_rows(cells, fine, options), options)
    pairwise, pair_notes = _pairwise(cells, options)
    generation = _generation_table(cells)
    return AuditResult(
        options=options,
        reading=_reading(partials.files),
        rankers=_label(metric_rows(_sum_by(cells, ["ranker"]), ["ranker"], options), options),
        metrics=metrics,
        exposure=_label(_exposure_rows(cells, partials.groups, fine, options), options),
        trend_metrics=_label(metric_rows(trend_cells, trend, options), options, labels),
        trend_exposure=trend_exposure,
        pairwise=pairwise,
        drift=_drift(metrics, options),
        left_out=partials.left_out.reset_index(drop=True),
        figure_windows=figure_windows,
        cumulative=_cumulative(trend_cells, trend_exposure),
        notes=[
            *_reading_notes(partials.files, options),
            *_metric_notes(partials.files, options),
            *pair_notes,
        ],
        generation=generation,
        generation_why=_generation_why(generation),
    )


def _t(n: np.ndarray, confidence: float) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.where(n >= 2, student_t_ppf(0.5 + confidence / 2, np.maximum(n - 1, 1)), np.nan)


def _ratio(
    n: np.ndarray,
    sw: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    sw2: np.ndarray,
    confidence: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``m = a / sw`` and the half-width of its t interval, from the sums
    ``a = Σ W x``, ``b = Σ W² x``, ``c = Σ W² x²``, ``sw = Σ W``, ``sw2 = Σ W²``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        m = a / sw
        spread = np.maximum(c - 2 * m * b + m * m * sw2, 0.0)
        se = np.sqrt(n / (n - 1) * spread) / sw
    return m, _t(n, confidence) * se


def _moments(cells: pd.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n``, mean ``Σx / n`` and sample variance ``(Σx² − Σx · mean) / (n − 1)`` of the
    measure ``name`` per cell (NaN without values; a spread within rounding of 0 is 0)."""
    n = cells[f"{name}__n"].to_numpy(float)
    total = cells[f"{name}__sum"].to_numpy(float)
    sumsq = cells[f"{name}__sumsq"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, total / n, np.nan)
        spread = sumsq - total * mean
        spread = np.where(spread <= 1e-12 * sumsq, 0.0, spread)
        variance = np.where(n > 1, spread / (n - 1), np.nan)
    return n, mean, variance


def _sum_by(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The sums of ``frame`` added over the cells of ``keys``."""
    numeric = [
        c for c in frame.columns if c not in keys and pd.api.types.is_numeric_dtype(frame[c])
    ]
    return frame.groupby(keys, dropna=False, sort=True)[numeric].sum().reset_index()


def metric_rows(cells: pd.DataFrame, keys: list[str], options: AuditOptions) -> pd.DataFrame:
    """One row per cell of ``keys`` and metric: value, ci_low, ci_high, n, n_missing; from
    the cells' sums (:func:`fairrag_audit.partials.compute_partials`): ``records``,
    ``errors``, the ratio estimator's sums of ``p`` and ``d`` (``x__n``, ``x__sw``,
    ``x__sw2``, ``x__a``, ``x__b``, ``x__c``) and each other metric's ``m__n``, ``m__sum``,
    ``m__sumsq``."""
    rows: list[pd.DataFrame] = []
    for metric in METRICS:
        if metric in ("exposure_share", "amortized_disparity"):
            x = "p" if metric == "exposure_share" else "d"
            n = cells[f"{x}__n"].to_numpy(float)
            sw, a, b, c, sw2 = (cells[f"{x}__{s}"].to_numpy(float) for s in RATIO_SUMS)
            value, half = _ratio(n, sw, a, b, c, sw2, options.confidence)
            low, high = value - half, value + half
            if metric == "amortized_disparity":
                straddles = (low <= 0) & (high >= 0)
                value, low, high = (
                    np.abs(value),
                    np.where(straddles, 0.0, np.minimum(np.abs(low), np.abs(high))),
                    np.maximum(np.abs(low), np.abs(high)),
                )
        else:
            n, value, variance = _moments(cells, metric)
            with np.errstate(invalid="ignore", divide="ignore"):
                half = _t(n, options.confidence) * np.sqrt(variance / n)
            low, high = value - half, value + half
        frame = cells[[*keys, "records", "errors"]].copy()
        frame["metric"] = metric
        frame["value"] = value
        lowest, highest = RANGES[metric]  # an interval never leaves the metric's range
        frame["ci_low"] = np.clip(low, lowest, highest)
        frame["ci_high"] = np.clip(high, lowest, highest)
        frame["records"] = frame["records"].astype(int)
        frame["errors"] = frame["errors"].astype(int)
        frame["n"] = n.astype(int)
        frame["n_missing"] = cells["records"].to_numpy(int) - n.astype(int)
        rows.append(frame)
    columns = [*keys, "records", "errors", "metric", "value", "ci_low", "ci_high", "n"]
    if cells.empty:
        return pd.DataFrame(columns=[*columns, "n_missing"])
    table = pd.concat(rows, ignore_index=True)
    order = {name: i for i, name in enumerate(METRICS)}
    table["_order"] = table["metric"].map(order)
    return (
        table.sort_values([*keys, "_order"], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def _exposure_rows(
    cells: pd.DataFrame, groups: pd.DataFrame, keys: list[str], options: AuditOptions
) -> pd.DataFrame:
    """Exposure share of every social group per cell of ``keys``, with its t interval."""
    columns = [*keys, "group", "share", "ci_low", "ci_high", "n", "weight"]
    if groups.empty:
        return pd.DataFrame(columns=columns)
    per_cell = _sum_by(cells, keys)[[*keys, "e__n", "e__sw", "e__sw2"]]
    table = _sum_by(groups, [*keys, "group"]).merge(per_cell, on=keys, how="inner")
    m, half = _ratio(
        table["e__n"].to_numpy(float),
        table["e__sw"].to_numpy(float),
        table["a"].to_numpy(float),
        table["b"].to_numpy(float),
        table["c"].to_numpy(float),
        table["e__sw2"].to_numpy(float),
        options.confidence,
    )
    out = table[[*keys, "group"]].copy()
    out["share"] = m
    out["ci_low"] = np.clip(m - half, 0.0, 1.0)
    out["ci_high"] = np.clip(m + half, 0.0, 1.0)
    out["n"] = table["e__n"].astype(int)
    out["weight"] = table["e__sw"].to_numpy(
        float
    )  # Σ W_t of the cell: share × weight = Σ W_t ES_g,t
    return out


def _label(
    table: pd.DataFrame, options: AuditOptions, labels: dict[object, str] | None = None
) -> pd.DataFrame:
    """Name the ``by_i`` columns after their fields; a readable ``window`` label (``labels``:
    the automatic windows' labels by window_start)."""
    table = table.rename(columns={f"by_{i}": f for i, f in enumerate(options.by_columns)})
    if "window_start" not in table.columns:
        return table
    starts = pd.to_datetime(table["window_start"])
    if labels is not None:
        names = [labels.get(s, NO_TIMESTAMP) for s in starts]
    elif options.window is None:
        names = [ALL_TIME] * len(table)
    else:
        names = [NO_TIMESTAMP if pd.isna(s) else s.strftime("%Y-%m-%dT%H:%M:%SZ") for s in starts]
    table.insert(table.columns.get_loc("window_start"), "window", names)
    table["window_start"] = starts
    return table


def _trend(
    partials: Partials, options: AuditOptions
) -> tuple[pd.DataFrame, pd.DataFrame, str, dict[object, str] | None]:
    """The cells and group sums of the figures' windows per ranker (``by`` values pooled),
    what the report says about those windows, and their labels (None: ``--window``'s).

    With ``--window`` the figures use it. Without, about :data:`FIGURE_WINDOWS` windows over
    the dated records' span: the shortest of :data:`NICE_SECONDS` giving at most that many;
    records without a timestamp form the window ``(no timestamp)``, last."""
    keys = ["ranker", "window_start"]
    if options.window is not None:
        why = f"windows of {format_duration(options.window)} (--window)"
        return (
            _sum_by(partials.cells, keys),
            _sum_by(partials.groups, [*keys, "group"]),
            why,
            None,
        )
    seconds = figure_window_seconds(partials.span)
    step, origin = pd.Timedelta(seconds=seconds), pd.Timestamp(WINDOW_ORIGIN)
    frames = []
    for frame, frame_keys in (
        (partials.trend_cells, keys),
        (partials.trend_groups, [*keys, "group"]),
    ):
        if frame.empty:
            frames.append(frame)
            continue
        starts = pd.to_datetime(frame["window_start"])
        frames.append(
            _sum_by(
                frame.assign(window_start=origin + (starts - origin).dt.floor(step)), frame_keys
            )
        )
    cells, groups = frames
    starts = sorted({s for s in pd.to_datetime(cells.get("window_start", [])) if not pd.isna(s)})
    labels: dict[object, str] = {s: s.strftime("%Y-%m-%dT%H:%M:%SZ") for s in starts}
    undated = int(partials.span["records"]) - int(partials.span["dated"])
    if not int(partials.span["records"]):
        return cells, groups, "no records", labels
    if not labels:
        why = (
            f"no record has a timestamp: the time figures have one window, '{NO_TIMESTAMP}' "
            "(windows by record count would not merge across --partials-out windows)"
        )
        return cells, groups, why, labels
    why = (
        f"the time figures use {len(labels)} windows of {format_duration(step.to_pytimedelta())}, "
        f"chosen for about {FIGURE_WINDOWS} over the records' span (no --window given)"
    )
    if undated:
        why += f"; the {undated} records without a timestamp form the window '{NO_TIMESTAMP}'"
    return cells, groups, why, labels


def _cumulative(trend_cells: pd.DataFrame, trend_exposure: pd.DataFrame) -> pd.DataFrame:
    """Per ranker, window by window as records accumulate: each group's exposure share and
    the amortized disparity of all records so far (``Σ W_t x_t / Σ W_t`` over them)."""
    rows: list[pd.DataFrame] = []
    for ranker, cells in trend_cells.groupby("ranker", sort=True):
        cells = cells.sort_values("window_start", kind="stable")
        order = list(cells["window_start"])
        base = {"ranker": ranker, "window_start": order}
        base["records"] = cells["records"].cumsum().to_numpy().astype(int)
        with np.errstate(invalid="ignore", divide="ignore"):
            disparity = np.abs(
                cells["d__a"].cumsum().to_numpy(float) / cells["d__sw"].cumsum().to_numpy(float)
            )
        rows.append(pd.DataFrame({**base, "series": "amortized disparity", "value": disparity}))
        mine = trend_exposure[trend_exposure["ranker"] == ranker]
        if mine.empty:
            continue
        weight = mine.groupby("window_start", dropna=False)["weight"].first()
        amount = mine.assign(a=mine["share"] * mine["weight"]).pivot_table(
            index="window_start", columns="group", values="a", aggfunc="sum", dropna=False
        )
        amount = amount.reindex(order).fillna(0.0)
        total = weight.reindex(order).fillna(0.0).cumsum().to_numpy(float)
        for group in amount.columns:
            with np.errstate(invalid="ignore", divide="ignore"):
                share = amount[group].cumsum().to_numpy(float) / total
            rows.append(pd.DataFrame({**base, "series": str(group), "value": share}))
    if not rows:
        return pd.DataFrame(columns=["ranker", "window_start", "records", "series", "value"])
    return pd.concat(rows, ignore_index=True)


READING_COLUMNS = (
    "file",
    "lines",
    "damaged",
    "not_records",
    "refused",
    "future",
    "records",
    "excluded_by_since",
    "used",
    "sources",
)
"""Columns of :attr:`AuditResult.reading`, one row per file."""


def _reading(files: pd.DataFrame) -> pd.DataFrame:
    """The reading table: per file, lines, damaged, records used, excluded, sources."""
    table = files[list(READING_COLUMNS)].copy()
    for column in READING_COLUMNS[1:-1]:
        table[column] = table[column].astype(int)
    return table.reset_index(drop=True)


def _reading_notes(files: pd.DataFrame, options: AuditOptions) -> list[str]:
    """Per file, what was left out of the audit and why (with counts)."""
    notes: list[str] = []
    for row in files.itertuples():
        path, lines = row.file, int(row.lines)
        said = {
            "damaged": f"{row.damaged} of {lines} lines damaged (not JSON: torn write, "
            "garbage); skipped, counted and listed under 'Lines left out'",
            "not_records": f"{row.not_records} lines are JSON but not records (not an "
            "object, or none of the record fields); skipped, counted and listed",
            "refused": f"{row.refused} records refused (a value outside its metric's range, "
            'over a cap, or a Parquet file that cannot be read: docs/SPEC.md "Auditing '
            'logs"); counted and listed by line with the reason',
            "future": f"{row.future} records dated after the audit started "
            f"({datetime.fromisoformat(row.audited_at).strftime('%Y-%m-%dT%H:%M:%SZ')}, a "
            "clock skew of 5 minutes allowed): left out (also with --since), counted and listed",
        }
        if not lines:
            notes.append(f"{path}: no line to read (an empty file)")
        notes += [f"{path}: {text}" for name, text in said.items() if int(getattr(row, name))]
        if options.since is not None and int(row.no_timestamp_excluded):
            notes.append(
                f"{path}: {row.no_timestamp_excluded} records without a timestamp left out: "
                "--since cannot place them"
            )
        if options.window is not None and int(row.undated) and options.since is None:
            notes.append(
                f"{path}: {row.undated} records without a usable timestamp: no time window for "
                f"them; they form the window '{NO_TIMESTAMP}'"
            )
    records, used = int(files["records"].sum()), int(files["used"].sum())
    if options.since is not None and records and not used:
        notes.append(
            f"no record at or after --since {options.since:%Y-%m-%dT%H:%M:%SZ}: all "
            f"{records:,} records read are before it or undated; nothing was audited"
        )
    return notes


METRIC_NOTES = {
    "no_protected": "records name no protected group (the field `protected` is missing and "
    "no --protected was given): no protected exposure share, exposure disparity or amortized "
    "disparity for them",
    "several_groups": "records have a target of several groups: their exposure disparity is half "
    'the L1 distance between their shares and the target (docs/SPEC.md "Metrics"), and the '
    "audit gives no amortized disparity for them (`fairrag study` reports it)",
    "no_target": "records have a protected group but no target share for it: no disparity for them",
    "bad_model": "records name an exposure model the audit cannot read (dcg, uniform, rbp(p), "
    "or fitted(...) with weights for every position shown and a factor for every group): no "
    "exposure figures for them",
    "no_list": "records carry neither `groups`, `exposure_by_group` nor `exposure_share`: no "
    "exposure figures for them",
    "empty_list": "records showed an empty list: no exposure to share",
    "equal_weight": "records have no `groups` and no `k`: each weighs equally (W_t = 1) in "
    "the amortized figures",
    "share_mistyped": "records without `groups` nor `exposure_by_group` give `exposure_share` as "
    'a value that is not a JSON number (a string such as "0.5", a boolean): no exposure share '
    "for them (read as missing)",
    "share_missing": "records without `groups` nor `exposure_by_group` have a list (`k`) but no "
    "`exposure_share` (absent or null): no exposure share for them",
    "errors": "records are of failed runs (`error`); their retrieval figures are kept",
}
"""What the count of records lacking something means (the report's "What could not be
computed")."""


def _metric_notes(files: pd.DataFrame, options: AuditOptions) -> list[str]:
    """What could not be computed for how many of the records audited, and why."""
    counts = files.drop(columns=["file", "sources", "audited_at", "fingerprint"], errors="ignore")
    counts = counts.sum().astype(int)
    total = int(counts["used"])
    # partials saved by the release before have no share_mistyped nor share_missing: 0
    counts = counts.reindex([*counts.index, *(n for n in METRIC_NOTES if n not in counts.index)])
    counts = counts.fillna(0).astype(int)
    notes = [
        f"{counts[name]} of {total} {text}" if name == "no_protected" else f"{counts[name]} {text}"
        for name, text in METRIC_NOTES.items()
        if counts[name]
    ]
    for i, name in enumerate(options.by):
        if counts[f"by_{i}__missing"]:
            notes.append(
                f"--by {name}: missing from {counts[f'by_{i}__missing']} of {total} records "
                f"(neither at top level nor in `metadata`); they form the group "
                f"'{MISSING_VALUE}'"
            )
    if counts["no_timestamp"] and options.window is None and options.since is None:
        notes.append(
            f"{counts['no_timestamp']} of {total} records have no usable `timestamp`: they "
            "cannot be placed in time windows (--window) nor filtered by --since"
        )
    no_answer, before = int(counts["no_answer"]), int(counts["before_attribution"])
    for metric in METRIC_FIELDS:
        present = int(counts[f"{metric}__present"])
        if present >= total:
            continue
        parts = [f"{no_answer} without an answer"] if no_answer else []
        null = total - present - no_answer
        if metric in ATTRIBUTED_FIELDS and before:
            parts.append(
                f"{before} answered in records without the attributed fields (written "
                "before the attribution: schema 1, or an earlier library)"
            )
            null -= before
        mistyped = int(counts.get(f"{metric}__mistyped", 0))
        if mistyped:
            parts.append(
                f"{mistyped} answered, with a value that is not a JSON number (a string such "
                'as "0.5", a boolean: read as missing)'
            )
            null -= mistyped
        if null > 0:
            parts.append(f"{null} answered, without a value ({NO_VALUE_BECAUSE[metric]})")
        notes.append(
            f"{metric}: no value in {total - present} of {total} records ({'; '.join(parts)})"
        )
    return notes


ANSWER_COLUMNS = (
    "answers",
    "follows_format",
    "paper_measured",
    "attributed_measured",
    "without_attribution",
    "attributed_nothing",
)
"""The counts of answers of :attr:`AuditResult.generation` (the report shows them per ranker)."""

GENERATION_COLUMNS = (
    "records",
    *ANSWER_COLUMNS,
    "bullets",
    "attributed_bullets",
    *STYLE_COLUMNS,
)
"""Columns of :attr:`AuditResult.generation` after ``ranker``."""


def _generation_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per ranker, what the answers cited (the columns of :attr:`AuditResult.generation`)."""
    if cells.empty:
        return pd.DataFrame(columns=["ranker", *GENERATION_COLUMNS])
    table = _sum_by(cells[["ranker", *GENERATION_COLUMNS]], ["ranker"])
    return table.astype({name: "int64" for name in GENERATION_COLUMNS})


NO_VALUE_BECAUSE = {
    "generation_parity": "no valid (DocTitle: X) citation, or no protected group",
    "grounded_generation_parity": "no supported (DocTitle: X) citation, or no protected group",
    "fairness_gap": "no generation parity, or no retrieval exposure share",
    "fairness_gap_magnitude": "no generation parity, or no retrieval exposure share",
    "groundedness": "not written in the record",
    "attributed_generation_parity": "nothing attributed, or no protected group",
    "attributed_fairness_gap": "no attributed parity, or no retrieval exposure share",
    "attributed_groundedness": "not written in the record",
    "attributed_generation_parity_explicit": "nothing cited, or no protected group",
    "attributed_fairness_gap_explicit": "no explicit parity, or no retrieval exposure share",
    "attributed_groundedness_explicit": "not written in the record",
    "attributed_citation_precision": "no shown document cited, or written before issue 33",
}
"""Why a generation metric of an answered record has no value (docs/SPEC.md "Metrics")."""


def _generation_why(table: pd.DataFrame) -> list[str]:
    """In words, from :func:`_generation_table`: how many answers cited nothing in the paper's
    format, in which styles they answered, why a generation metric is n/a or thin, and what to
    change (docs/SPEC.md "Auditing logs")."""
    if table.empty:
        return []
    total = {name: int(table[name].sum()) for name in table.columns if name != "ranker"}
    answers = total["answers"]
    if not answers:
        return [
            f"No record of the {total['records']} carries an answer (no follows_citation_format, "
            "citation_styles or generation metric): no generation metric to report. Records of "
            "a retriever without a generator, or of runs whose answer was not recorded."
        ]
    why = [
        f"Of {answers} answers, {total['follows_format']} cited in the requested format "
        f"(DocTitle: X); the paper's generation parity is measured for "
        f"{total['paper_measured']} and the attributed one for {total['attributed_measured']}."
    ]
    used = [
        f"{column.removeprefix('style_')} {total[column]}"
        for column in STYLE_COLUMNS
        if total[column]
    ]
    with_styles = answers - total["without_attribution"]
    if with_styles:
        why.append(
            f"Citation styles of the {with_styles} answers that record them (citation_styles; "
            f"answers using each, one answer may use several): {', '.join(used) or 'none'}."
        )
    missing = answers - total["paper_measured"]
    if missing:
        why.append(
            f"{missing} answers have no paper generation parity (n/a): they cite no shown "
            "title in the (DocTitle: X) format (or their record names no protected group). "
            "Read attributed_generation_parity for them; to measure the paper's metric, "
            "prompt for its format (fairrag_core.prompts.format_instructions) or use a "
            "generator that follows it."
        )
    if total["without_attribution"]:
        why.append(
            f"{total['without_attribution']} answers are in records without the attributed "
            "fields (written before the attribution: schema 1, or an earlier library): their "
            "attributed metrics are n/a. Records written by this release's handlers and study "
            "carry them."
        )
    if total["style_implicit"]:
        why.append(
            f"{total['style_implicit']} answers name shown people without citing them "
            "(implicit): attributed by the name rule (the document's title and the names its "
            "own text gives). To have them cite, ask for a citation in the prompt."
        )
    if total["attributed_nothing"]:
        why.append(
            f"{total['attributed_nothing']} answers attribute nothing: they cite no shown "
            "document and name nobody shown (empty, off-topic or invented people, or cut "
            "short); read a few (the log's answer field) and raise the generator's token cap "
            "(max_tokens) if they stop mid-answer."
        )
    thin = [
        f"{name} for {row.ranker} ({int(getattr(row, column))} of {int(row.answers)} answers)"
        for row in table.itertuples()
        if row.answers
        for name, column in (
            ("generation_parity", "paper_measured"),
            ("attributed_generation_parity", "attributed_measured"),
        )
        if getattr(row, column) < 2 and total[column]  # n/a everywhere: said above
    ]
    if thin:
        why.append(
            "Too few values for an interval or a t-test (fewer than 2): " + "; ".join(thin) + "."
        )
    return why


def _pairwise(cells: pd.DataFrame, options: AuditOptions) -> tuple[pd.DataFrame, list[str]]:
    """Pooled-variance Student t-tests (``fairrag_core.stats.t_test``'s, from each sample's
    ``n``, ``Σ x`` and ``Σ x²``) between rankers, per metric and ``by`` values, over the whole
    period: the rows of ``fairrag_core.stats.pairwise_t_tests``."""
    by_cols = [f"by_{i}" for i in range(len(options.by))]
    whole = _sum_by(cells, ["ranker", *by_cols]) if not cells.empty else cells
    notes: list[str] = []
    columns = [*options.by_columns, "metric", *PAIRWISE_COLUMNS, "alpha"]
    if whole.empty or whole["ranker"].nunique() < 2:
        return pd.DataFrame(columns=columns), notes  # a table with its header, no row
    sizes = whole.groupby("ranker")["records"].sum().reset_index()
    sizes = sizes.sort_values(["records", "ranker"], ascending=[False, True])
    if len(sizes) > MAX_COMPARED_RANKERS:
        notes.append(
            f"rankers compared: the {MAX_COMPARED_RANKERS} of {len(sizes)} rankers with the most "
            "records (the pairs grow as the square of the rankers)"
        )
        whole = whole[whole["ranker"].isin(sizes["ranker"][:MAX_COMPARED_RANKERS])]
    rows: list[dict[str, Any]] = []
    skipped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for key, cell in whole.groupby(by_cols, sort=True) if by_cols else [((), whole)]:
        labels = dict(
            zip(options.by_columns, key if isinstance(key, tuple) else (key,), strict=True)
        )
        cell = cell.sort_values("ranker")
        for metric in PAIRWISE_METRICS:
            n, mean, variance = _moments(cell, "p" if metric == "exposure_share" else metric)
            samples = {
                str(name): (int(n[i]), mean[i], variance[i])
                for i, name in enumerate(cell["ranker"])
                if n[i] >= 2
            }
            left_out = tuple(sorted(set(cell["ranker"]) - set(samples)))
            if left_out and len(cell) >= 2:
                where = ", ".join(f"{k}={v}" for k, v in labels.items()) or "all records"
                skipped.setdefault((where, left_out), []).append(metric)
            for test in _t_tests(samples, options.alpha):
                rows.append({**labels, "metric": metric, **test, "alpha": options.alpha})
    for (where, left_out), metrics in skipped.items():
        notes.append(
            f"rankers compared ({where}): {', '.join(left_out)} left out of the t-tests of "
            f"{', '.join(metrics)} (fewer than 2 values)"
        )
    return pd.DataFrame(rows, columns=columns), notes


PAIRWISE_COLUMNS = ("a", "b", "mean_a", "mean_b", "t", "df", "p", "critical_t", "significant")
"""The columns of one t-test row (:func:`_t_tests`)."""


def _t_tests(
    samples: dict[str, tuple[int, float, float]], alpha: float
) -> Iterable[dict[str, Any]]:
    """Every unordered pair of ``samples`` (name → n, mean, variance), in order: the fields
    of ``fairrag_core.stats.PairwiseRow`` (``s_p² = ((n_a − 1) s_a² + (n_b − 1) s_b²) / df``,
    ``t = (mean_a − mean_b) / sqrt(s_p² (1/n_a + 1/n_b))``, ``df = n_a + n_b − 2``)."""
    names = list(samples)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (n_a, mean_a, var_a), (n_b, mean_b, var_b) = samples[a], samples[b]
            df = n_a + n_b - 2
            pooled = ((n_a - 1) * var_a + (n_b - 1) * var_b) / df
            # zero pooled variance follows scipy: ±inf (p = 0) for different means, else NaN
            with np.errstate(divide="ignore", invalid="ignore"):
                t = float(np.float64(mean_a - mean_b) / np.sqrt(pooled * (1 / n_a + 1 / n_b)))
            p = float(2.0 * student_t_sf(abs(t), df)) if not math.isnan(t) else math.nan
            crit = critical_t(df, alpha)
            yield {
                "a": a,
                "b": b,
                "mean_a": float(mean_a),
                "mean_b": float(mean_b),
                "t": t,
                "df": df,
                "p": p,
                "critical_t": crit,
                "significant": bool(abs(t) > crit),
            }


def _drift(metrics: pd.DataFrame, options: AuditOptions) -> pd.DataFrame:
    """Windows whose amortized disparity is above the band (whole CI above it: ``certain``);
    without a band or a window, the table's header and no row."""
    keep = [
        "ranker",
        *options.by_columns,
        "window",
        "window_start",
        "value",
        "ci_low",
        "ci_high",
        "n",
        "band",
        "certain",
    ]
    if options.max_disparity is None or metrics.empty:
        return pd.DataFrame(columns=keep)
    rows = metrics[(metrics["metric"] == "amortized_disparity")]
    rows = rows[rows["value"] > options.max_disparity].copy()
    rows["band"] = options.max_disparity
    rows["certain"] = rows["ci_low"] > options.max_disparity
    return rows[keep].reset_index(drop=True)


def finite_or_none(value: float) -> float | None:
    """``value`` for JSON: NaN and infinities become None."""
    return float(value) if value is not None and math.isfinite(value) else None
