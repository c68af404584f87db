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
clipped to the metric's range (shares in [0, 1], gaps in [−1, 1]). Every sum comes
from DuckDB, so the records are never held as Python objects.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import duckdb
import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from fairrag_core.stats import pairwise_t_tests

from .lines import line_numbers
from .options import AuditOptions, format_duration
from .scan import (
    ATTRIBUTED_FIELDS,
    KNOWN_STYLES,
    METRIC_FIELDS,
    METRIC_RANGES,
    connect,
    load_records,
)

__all__ = ["METRICS", "AuditResult", "audit", "run_audit"]

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

NO_TIMESTAMP = "(no timestamp)"
ALL_TIME = "all"
NO_RANKER = "(none)"
MISSING_VALUE = "(missing)"
UNKNOWN_GROUP = "(unknown)"
MAX_LISTED = 1_000
"""Lines left out (damaged, not records, refused, future) listed per file, with the reason;
all are counted."""
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
        return ["ranker", *self.options.by, "window"]


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
    """:func:`audit` with checked options (and optionally an open DuckDB connection)."""
    con = con or connect()
    counts = load_records(con, options)
    by_cols = [f"by_{i}" for i in range(len(options.by))]
    con.execute(f"CREATE OR REPLACE TEMP VIEW included AS {_included_sql(options)}")
    reading, notes = _reading(con, options, counts)
    left_out = _left_out(con, options)
    fine = ["ranker", *by_cols, "window_start"]
    metrics = _label(_metric_table(con, fine, options), options)
    exposure = _label(_exposure_table(con, fine, options), options)
    trend_view, figure_windows, labels = _trend_view(con, options)
    trend_keys = ["ranker", "window_start"]
    trend_metrics = _label(_metric_table(con, trend_keys, options, trend_view), options, labels)
    trend_exposure = _label(_exposure_table(con, trend_keys, options, trend_view), options, labels)
    cumulative = _cumulative(con, trend_view, trend_exposure)
    rankers = _label(_metric_table(con, ["ranker"], options), options)
    pairwise, pair_notes = _pairwise(con, options)
    drift = _drift(metrics, options)
    notes.extend(_metric_notes(con, options))
    notes.extend(pair_notes)
    generation = _generation_table(con)
    generation_why = _generation_why(generation)
    result = AuditResult(
        options=options,
        reading=reading,
        rankers=rankers,
        metrics=metrics,
        exposure=exposure,
        trend_metrics=trend_metrics,
        trend_exposure=trend_exposure,
        pairwise=pairwise,
        drift=drift,
        left_out=left_out,
        figure_windows=figure_windows,
        cumulative=cumulative,
        notes=notes,
        generation=generation,
        generation_why=generation_why,
    )
    return result


def _included_sql(options: AuditOptions) -> str:
    by = "".join(f", COALESCE(by_{i}, '{MISSING_VALUE}') AS by_{i}" for i in range(len(options.by)))
    if options.window is None:
        window = "NULL::TIMESTAMP"
    else:
        micros = int(options.window.total_seconds() * 1_000_000)
        origin = (
            "TIMESTAMP '2000-01-03 00:00:00'"  # DuckDB's default origin: a Monday, 00:00 UTC
            if options.since is None
            else f"TIMESTAMP '{options.since.replace(tzinfo=None).isoformat()}'"
        )
        window = f"time_bucket(INTERVAL ({micros}) MICROSECOND, ts::TIMESTAMP, {origin})"
    since = "" if options.since is None else f" AND ts >= {_since_literal(options)}"
    return f"""
        SELECT rowid AS rid, file_index, line_index, ts,
            COALESCE(ranker, '{NO_RANKER}') AS ranker {by},
            {window} AS window_start, w, groups, weights, by_group, has_error,
            CASE WHEN w > 0 THEN protected_share END AS p,
            CASE WHEN w > 0 THEN protected_share - target_share END AS d,
            CASE WHEN w > 0 THEN abs(protected_share - target_share) END AS exposure_disparity
            {"".join(f", {m}" for m in METRIC_FIELDS)},
            answered, follows, has_attribution, styles, n_attribution_bullets,
            n_attributed_bullets
        FROM records WHERE usable{since}
    """


def _since_literal(options: AuditOptions) -> str:
    assert options.since is not None
    return f"TIMESTAMPTZ '{options.since.isoformat()}'"


def _t(n: np.ndarray, confidence: float) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.where(
            n >= 2, scipy_stats.t.ppf(0.5 + confidence / 2, np.maximum(n - 1, 1)), np.nan
        )


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


def _metric_table(
    con: duckdb.DuckDBPyConnection, keys: list[str], options: AuditOptions, view: str = "included"
) -> pd.DataFrame:
    """One row per cell of ``keys`` and metric: value, ci_low, ci_high, n, n_missing."""
    key_sql = ", ".join(keys)
    means = "".join(
        f", avg({m}) AS {m}__mean, stddev_samp({m}) AS {m}__std, count({m}) AS {m}__n"
        for m in ("exposure_disparity", *METRIC_FIELDS)
    )
    ratio = "".join(
        f", count({x}) AS {x}__n, sum(w) FILTER ({x} IS NOT NULL) AS {x}__sw, "
        f"sum(w * w) FILTER ({x} IS NOT NULL) AS {x}__sw2, sum(w * {x}) AS {x}__a, "
        f"sum(w * w * {x}) AS {x}__b, sum(w * w * {x} * {x}) AS {x}__c"
        for x in ("p", "d")
    )
    cells = con.execute(
        f"SELECT {key_sql}, count(*) AS records, count_if(has_error) AS errors {ratio} {means} "
        f"FROM {view} GROUP BY {key_sql} ORDER BY {key_sql}"
    ).df()
    rows: list[pd.DataFrame] = []
    n_cells = len(cells)
    for metric in METRICS:
        if metric in ("exposure_share", "amortized_disparity"):
            x = "p" if metric == "exposure_share" else "d"
            n = cells[f"{x}__n"].to_numpy(float)
            m, half = _ratio(
                n,
                cells[f"{x}__sw"].to_numpy(float),
                cells[f"{x}__a"].to_numpy(float),
                cells[f"{x}__b"].to_numpy(float),
                cells[f"{x}__c"].to_numpy(float),
                cells[f"{x}__sw2"].to_numpy(float),
                options.confidence,
            )
            low, high = m - half, m + half
            if metric == "amortized_disparity":
                value = np.abs(m)
                straddles = (low <= 0) & (high >= 0)
                low, high = (
                    np.where(straddles, 0.0, np.minimum(np.abs(low), np.abs(high))),
                    np.maximum(np.abs(low), np.abs(high)),
                )
            else:
                value = m
        else:
            n = cells[f"{metric}__n"].to_numpy(float)
            value = cells[f"{metric}__mean"].to_numpy(float)
            with np.errstate(invalid="ignore", divide="ignore"):
                half = (
                    _t(n, options.confidence) * cells[f"{metric}__std"].to_numpy(float) / np.sqrt(n)
                )
            low, high = value - half, value + half
        frame = cells[[*keys, "records", "errors"]].copy()
        frame["metric"] = metric
        frame["value"] = value
        lowest, highest = RANGES[metric]  # an interval never leaves the metric's range
        frame["ci_low"] = np.clip(low, lowest, highest)
        frame["ci_high"] = np.clip(high, lowest, highest)
        frame["errors"] = frame["errors"].astype(int)
        frame["n"] = n.astype(int)
        frame["n_missing"] = cells["records"].to_numpy(int) - n.astype(int)
        rows.append(frame)
    if not n_cells:
        return pd.DataFrame(
            columns=[
                *keys,
                "records",
                "errors",
                "metric",
                "value",
                "ci_low",
                "ci_high",
                "n",
                "n_missing",
            ]
        )
    table = pd.concat(rows, ignore_index=True)
    order = {name: i for i, name in enumerate(METRICS)}
    table["_order"] = table["metric"].map(order)
    return (
        table.sort_values([*keys, "_order"], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def _exposure_table(
    con: duckdb.DuckDBPyConnection, keys: list[str], options: AuditOptions, view: str = "included"
) -> pd.DataFrame:
    """Exposure share of every social group per cell of ``keys``, with its t interval."""
    key_sql = ", ".join(keys)
    # NULL keys (no window, missing field) must match each other: IS NOT DISTINCT FROM
    join = " AND ".join(f"sums.{k} IS NOT DISTINCT FROM cells.{k}" for k in keys)
    per_group = f"""
        SELECT rid, {key_sql}, w, g, sum(v) / w AS s FROM (
            SELECT rid, {key_sql}, w, COALESCE(unnest(groups), '{UNKNOWN_GROUP}') AS g,
                unnest(weights) AS v
            FROM {view} WHERE by_group IS NULL AND groups IS NOT NULL AND w > 0
        ) GROUP BY rid, {key_sql}, w, g
        UNION ALL
        SELECT rid, {key_sql}, w,
            -- the unknown group (null label) is keyed "None" in exposure_by_group
            CASE WHEN g = 'None' AND unknown THEN '{UNKNOWN_GROUP}' ELSE g END AS g, s
        FROM (
            SELECT rid, {key_sql}, w, unnest(map_keys(by_group)) AS g,
                unnest(map_values(by_group)) AS s,
                COALESCE(len(list_filter(groups, lambda x: x IS NULL)) > 0, false) AS unknown
            FROM {view} WHERE by_group IS NOT NULL AND w > 0
        )
    """
    table = con.execute(f"""
        WITH cells AS (
            SELECT {key_sql}, count(*) AS n, sum(w) AS sw, sum(w * w) AS sw2 FROM {view}
            WHERE w > 0 AND (by_group IS NOT NULL OR groups IS NOT NULL) GROUP BY {key_sql}
        ), sums AS (
            SELECT {key_sql}, g AS "group", sum(w * s) AS a, sum(w * w * s) AS b,
                sum(w * w * s * s) AS c
            FROM ({per_group}) WHERE s IS NOT NULL GROUP BY {key_sql}, g
        )
        SELECT sums.*, cells.n, cells.sw, cells.sw2 FROM sums JOIN cells ON {join}
        ORDER BY {", ".join(f"sums.{k}" for k in keys)}, "group"
    """).df()
    m, half = _ratio(
        table["n"].to_numpy(float),
        table["sw"].to_numpy(float),
        table["a"].to_numpy(float),
        table["b"].to_numpy(float),
        table["c"].to_numpy(float),
        table["sw2"].to_numpy(float),
        options.confidence,
    )
    out = table[[*keys, "group"]].copy()
    out["share"] = m
    out["ci_low"] = np.clip(m - half, 0.0, 1.0)
    out["ci_high"] = np.clip(m + half, 0.0, 1.0)
    out["n"] = table["n"].astype(int)
    out["weight"] = table["sw"].to_numpy(float)  # Σ W_t of the cell: share × weight = Σ W_t ES_g,t
    return out


def _label(
    table: pd.DataFrame, options: AuditOptions, labels: dict[object, str] | None = None
) -> pd.DataFrame:
    """Name the ``by_i`` columns after their fields; a readable ``window`` label (``labels``:
    the automatic windows' labels by window_start)."""
    table = table.rename(columns={f"by_{i}": f for i, f in enumerate(options.by)})
    if "window_start" in table.columns and labels is not None:
        table.insert(
            table.columns.get_loc("window_start"),
            "window",
            [labels.get(s, NO_TIMESTAMP) for s in table["window_start"]],
        )
        return table
    if "window_start" in table.columns:
        starts = pd.to_datetime(table["window_start"])
        if options.window is None:
            names = [ALL_TIME] * len(table)
        else:
            names = [
                NO_TIMESTAMP if pd.isna(s) else s.strftime("%Y-%m-%dT%H:%M:%SZ") for s in starts
            ]
        table.insert(table.columns.get_loc("window_start"), "window", names)
        table["window_start"] = starts
    return table


FIGURE_WINDOWS = 20
"""Windows the time figures aim for when no ``--window`` is given."""
NICE_SECONDS = (
    *(1, 2, 5, 10, 15, 20, 30),
    *(60 * m for m in (1, 2, 5, 10, 15, 20, 30)),
    *(3600 * h for h in (1, 2, 3, 4, 6, 8, 12)),
    *(86_400 * d for d in (1, 2, 3, 4, 7, 14, 30, 61, 91, 182, 365)),
)
"""Window lengths chosen from (1 s to 1 year)."""


def _trend_view(
    con: duckdb.DuckDBPyConnection, options: AuditOptions
) -> tuple[str, str, dict[object, str] | None]:
    """The view the figures' trend tables are computed on, what it says about its windows,
    and the labels of its windows (None: those of ``--window``).

    With ``--window`` the figures use it. Without, about :data:`FIGURE_WINDOWS` windows: by
    the records' time span (the shortest of :data:`NICE_SECONDS` giving at most that many),
    or, when some records have no timestamp or all share one, by record count in the order
    written (time, then file and line)."""
    if options.window is not None:
        return "included", f"windows of {format_duration(options.window)} (--window)", None
    n, dated, first, last = con.execute(
        "SELECT count(*), count(ts), min(ts), max(ts) FROM included"
    ).fetchone() or (0, 0, None, None)
    if not n:
        return "included", "no records", None
    if dated == n and first is not None and last is not None and last > first:
        span = (last - first).total_seconds()
        seconds = next((x for x in NICE_SECONDS if span / x <= FIGURE_WINDOWS), NICE_SECONDS[-1])
        micros = seconds * 1_000_000
        con.execute(f"""
            CREATE OR REPLACE TEMP VIEW trend AS SELECT * REPLACE (time_bucket(
                INTERVAL ({micros}) MICROSECOND, ts::TIMESTAMP,
                TIMESTAMP '2000-01-03 00:00:00') AS window_start) FROM included
        """)
        # labelled by DuckDB: any timestamp it holds has a label (pandas fails before 1677)
        labels: dict[object, str] = dict(
            con.execute(
                "SELECT DISTINCT window_start, strftime(window_start, '%Y-%m-%dT%H:%M:%SZ') "
                "FROM trend"
            ).fetchall()
        )
        length = format_duration(timedelta(seconds=seconds))
        return (
            "trend",
            f"the time figures use {len(labels)} windows of {length}, chosen for about "
            f"{FIGURE_WINDOWS} over the records' span (no --window given)",
            labels,
        )
    size = max(1, math.ceil(n / FIGURE_WINDOWS))
    con.execute(f"""
        CREATE OR REPLACE TEMP VIEW trend AS SELECT * REPLACE ((row_number() OVER (
            ORDER BY ts NULLS LAST, file_index, line_index) - 1) // {size} AS window_start)
        FROM included
    """)
    count = math.ceil(n / size)
    labels = {
        i: f"#{i + 1:02d} (records {i * size + 1}-{min(n, (i + 1) * size)})" for i in range(count)
    }
    why = "some records have no timestamp" if dated < n else "the records share one time"
    return (
        "trend",
        f"the time figures use {count} windows of {size} records each in the order written "
        f"({why}; no --window given)",
        labels,
    )


def _cumulative(
    con: duckdb.DuckDBPyConnection, view: str, trend_exposure: pd.DataFrame
) -> pd.DataFrame:
    """Per ranker, window by window as records accumulate: each group's exposure share and
    the amortized disparity of all records so far (``Σ W_t x_t / Σ W_t`` over them)."""
    sums = con.execute(f"""
        SELECT ranker, window_start, count(*) AS records,
            sum(w) FILTER (d IS NOT NULL) AS sw, sum(w * d) AS a
        FROM {view} GROUP BY ranker, window_start ORDER BY ranker, window_start
    """).df()
    rows: list[pd.DataFrame] = []
    for ranker, cells in sums.groupby("ranker", sort=True):
        cells = cells.sort_values("window_start", kind="stable")
        records = cells["records"].cumsum().to_numpy()
        order = list(cells["window_start"])
        with np.errstate(invalid="ignore", divide="ignore"):
            disparity = np.abs(
                cells["a"].fillna(0).cumsum().to_numpy(float)
                / cells["sw"].fillna(0).cumsum().to_numpy(float)
            )
        rows.append(
            pd.DataFrame(
                {
                    "ranker": ranker,
                    "window_start": order,
                    "records": records,
                    "series": "amortized disparity",
                    "value": disparity,
                }
            )
        )
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
            rows.append(
                pd.DataFrame(
                    {
                        "ranker": ranker,
                        "window_start": order,
                        "records": records,
                        "series": str(group),
                        "value": share,
                    }
                )
            )
    if not rows:
        return pd.DataFrame(columns=["ranker", "window_start", "records", "series", "value"])
    return pd.concat(rows, ignore_index=True)


def _reading(
    con: duckdb.DuckDBPyConnection, options: AuditOptions, counts: dict[str, list[int]]
) -> tuple[pd.DataFrame, list[str]]:
    since = "NULL" if options.since is None else _since_literal(options)
    rows = con.execute(f"""
        SELECT file_index, count_if(usable) AS records,
            count_if(kind = 'not_record') AS not_records,
            count_if(kind = 'refused') AS refused,
            count_if(kind = 'future') AS future,
            count_if(usable AND ts IS NULL AND {since} IS NOT NULL) AS no_timestamp_excluded,
            count_if(usable AND COALESCE(ts < {since}, false)) AS before_since,
            count_if(usable AND ts IS NULL) AS no_timestamp,
            list(DISTINCT source) FILTER (usable) AS sources
        FROM records GROUP BY file_index ORDER BY file_index
    """).fetchall()
    names = [
        "records",
        "not_records",
        "refused",
        "future",
        "no_timestamp_excluded",
        "before_since",
        "no_timestamp",
        "sources",
    ]
    by_file = {row[0]: dict(zip(names, row[1:], strict=True)) for row in rows}
    table = []
    notes: list[str] = []
    for index, path in enumerate(options.paths):
        row = by_file.get(index, {})
        lines, damaged = counts["lines"][index], counts["damaged"][index]
        number = {name: int(row.get(name) or 0) for name in names[:-1]}
        excluded = number["before_since"] + number["no_timestamp_excluded"]
        sources = sorted(row.get("sources") or [])
        table.append(
            {
                "file": str(path),
                "lines": lines,
                "damaged": damaged,
                "not_records": number["not_records"],
                "refused": number["refused"],
                "future": number["future"],
                "records": number["records"],
                "excluded_by_since": excluded,
                "used": number["records"] - excluded,
                "sources": ", ".join(sources),
            }
        )
        if not lines:
            notes.append(f"{path}: no line to read (an empty file)")
        if damaged:
            notes.append(
                f"{path}: {damaged} of {lines} lines damaged (not JSON: torn write, garbage); "
                "skipped, counted and listed under 'Lines left out'"
            )
        if number["not_records"]:
            notes.append(
                f"{path}: {number['not_records']} lines are JSON but not records (not an object, "
                "or none of the record fields); skipped, counted and listed"
            )
        if number["refused"]:
            notes.append(
                f"{path}: {number['refused']} records refused (a value outside its metric's "
                'range, or over a cap: docs/SPEC.md "Auditing logs"); counted and listed by '
                "line with the reason"
            )
        if number["future"]:
            notes.append(
                f"{path}: {number['future']} records dated after the audit started "
                f"({options.now.strftime('%Y-%m-%dT%H:%M:%SZ')}, a clock skew of 5 minutes "
                "allowed): left out (also with --since), counted and listed"
            )
        if options.since is not None and number["no_timestamp_excluded"]:
            notes.append(
                f"{path}: {number['no_timestamp_excluded']} records without a timestamp left "
                "out: --since cannot place them"
            )
        if options.window is not None and number["no_timestamp"] and options.since is None:
            notes.append(
                f"{path}: {number['no_timestamp']} records without a usable timestamp: no time "
                f"window for them; they form the window '{NO_TIMESTAMP}'"
            )
    return pd.DataFrame(table), notes


def _left_out(con: duckdb.DuckDBPyConnection, options: AuditOptions) -> pd.DataFrame:
    """The first :data:`MAX_LISTED` lines of each file that are not records audited, with
    their line numbers (found by one more streaming pass over the files that have any)."""
    rows = con.execute(f"""
        SELECT file_index, line_index, kind, refusal FROM records WHERE NOT usable
        QUALIFY row_number() OVER (PARTITION BY file_index ORDER BY line_index) <= {MAX_LISTED}
        ORDER BY file_index, line_index
    """).fetchall()
    wanted: dict[int, list[int]] = {}
    for file_index, line_index, _, _ in rows:
        wanted.setdefault(int(file_index), []).append(int(line_index))
    numbers = {i: line_numbers(options.paths[i], lines) for i, lines in wanted.items()}
    table = pd.DataFrame(
        [
            {
                "file": str(options.paths[int(f)]),
                "line": numbers[int(f)].get(int(i)),
                "kind": kind,
                "reason": reason,
            }
            for f, i, kind, reason in rows
        ],
        columns=["file", "line", "kind", "reason"],
    )
    table["line"] = table["line"].astype("Int64")  # a line not found (never expected): empty
    return table


def _metric_notes(con: duckdb.DuckDBPyConnection, options: AuditOptions) -> list[str]:
    """What could not be computed for how many records, and why."""
    counts = (
        con.execute(f"""
        SELECT count(*) AS records,
            count_if(protected IS NULL) AS no_protected,
            count_if(protected IS NOT NULL AND target_share IS NULL) AS no_target,
            count_if(NOT model_ok) AS bad_model,
            count_if(model_ok AND w IS NULL) AS no_list,
            count_if(w = 0) AS empty_list,
            count_if(groups IS NULL AND by_group IS NULL AND w IS NOT NULL) AS equal_weight,
            count_if(has_error) AS errors,
            count_if(ts IS NULL) AS no_timestamp,
            count_if(NOT answered) AS no_answer,
            count_if(answered AND NOT has_attribution) AS before_attribution
            {"".join(f", count({m}) AS {m}" for m in METRIC_FIELDS)}
            {"".join(f", count_if(by_{i} IS NULL) AS by_{i}" for i in range(len(options.by)))}
        FROM records WHERE usable
        {"" if options.since is None else f"AND ts >= {_since_literal(options)}"}
    """)
        .df()
        .fillna(0)  # count_if over no rows is NULL
        .iloc[0]
    )
    total = int(counts["records"])
    notes = []
    if counts["no_protected"]:
        notes.append(
            f"{int(counts['no_protected'])} of {total} records name no protected group (the field "
            "`protected` is missing and no --protected was given): no protected exposure share, "
            "exposure disparity or amortized disparity for them"
        )
    if counts["no_target"]:
        notes.append(
            f"{int(counts['no_target'])} records have a protected group but no target share for "
            "it: no disparity for them"
        )
    if counts["bad_model"]:
        notes.append(
            f"{int(counts['bad_model'])} records name an exposure model that is not dcg, uniform "
            "or rbp(p): no exposure figures for them"
        )
    if counts["no_list"]:
        notes.append(
            f"{int(counts['no_list'])} records carry neither `groups`, `exposure_by_group` nor "
            "`exposure_share`: no exposure figures for them"
        )
    if counts["empty_list"]:
        notes.append(
            f"{int(counts['empty_list'])} records showed an empty list: no exposure to share"
        )
    if counts["equal_weight"]:
        notes.append(
            f"{int(counts['equal_weight'])} records have no `groups` and no `k`: each weighs "
            "equally (W_t = 1) in the amortized figures"
        )
    if counts["errors"]:
        notes.append(
            f"{int(counts['errors'])} records are of failed runs (`error`); their retrieval "
            "figures are kept"
        )
    for i, name in enumerate(options.by):
        if counts[f"by_{i}"]:
            notes.append(
                f"--by {name}: missing from {int(counts[f'by_{i}'])} of {total} records (neither "
                f"at top level nor in `metadata`); they form the group '{MISSING_VALUE}'"
            )
    if counts["no_timestamp"] and options.window is None and options.since is None:
        notes.append(
            f"{int(counts['no_timestamp'])} of {total} records have no usable `timestamp`: they "
            "cannot be placed in time windows (--window) nor filtered by --since"
        )
    no_answer, before = int(counts["no_answer"]), int(counts["before_attribution"])
    for metric in METRIC_FIELDS:
        present = int(counts[metric])
        if present >= total:
            continue
        parts = [f"{no_answer} without an answer"] if no_answer else []
        if metric in ATTRIBUTED_FIELDS:
            if before:
                parts.append(
                    f"{before} answered in records without the attributed fields (written "
                    "before the attribution: schema 1, or an earlier library)"
                )
            null = total - present - no_answer - before
        else:
            null = total - present - no_answer
        if null > 0:
            parts.append(f"{null} answered, without a value ({NO_VALUE_BECAUSE[metric]})")
        notes.append(
            f"{metric}: no value in {total - present} of {total} records ({'; '.join(parts)})"
        )
    return notes


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

STYLE_COLUMNS = (*(f"style_{style}" for style in KNOWN_STYLES), "style_none")
"""Columns of :attr:`AuditResult.generation`: the answers using each citation style."""


def _generation_table(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per ranker, what the answers cited (the columns of :attr:`AuditResult.generation`)."""
    styles = "".join(
        f", count_if(list_contains(styles, '{style}'))::BIGINT AS style_{style}"
        for style in KNOWN_STYLES
    )
    return con.execute(f"""
        SELECT ranker, count(*) AS records, count_if(answered)::BIGINT AS answers,
            -- a record without follows_citation_format followed it when its parity has a
            -- value (a valid (DocTitle: X) citation)
            count_if(answered AND COALESCE(follows, generation_parity IS NOT NULL))::BIGINT
                AS follows_format,
            count_if(answered AND generation_parity IS NOT NULL)::BIGINT AS paper_measured,
            count_if(answered AND attributed_generation_parity IS NOT NULL)::BIGINT
                AS attributed_measured,
            count_if(answered AND NOT has_attribution)::BIGINT AS without_attribution,
            count_if(answered AND has_attribution AND n_attributed_bullets = 0)::BIGINT
                AS attributed_nothing,
            COALESCE(sum(n_attribution_bullets) FILTER (answered), 0)::BIGINT AS bullets,
            COALESCE(sum(n_attributed_bullets) FILTER (answered), 0)::BIGINT
                AS attributed_bullets
            {styles},
            count_if(answered AND len(styles) = 0)::BIGINT AS style_none
        FROM included GROUP BY ranker ORDER BY ranker
    """).df()


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


def _pairwise(
    con: duckdb.DuckDBPyConnection, options: AuditOptions
) -> tuple[pd.DataFrame, list[str]]:
    """``fairrag_core.stats.pairwise_t_tests`` between rankers, per metric and ``by`` values."""
    by_cols = [f"by_{i}" for i in range(len(options.by))]
    columns = ["exposure_share", "exposure_disparity", *METRIC_FIELDS]
    select = ", ".join(
        ["ranker", *by_cols, "p AS exposure_share", "exposure_disparity", *METRIC_FIELDS]
    )
    data = con.execute(f"SELECT {select} FROM included").df()
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    skipped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    if data["ranker"].nunique() < 2:
        return pd.DataFrame(), notes
    sizes = data["ranker"].value_counts(sort=True)
    if len(sizes) > MAX_COMPARED_RANKERS:
        notes.append(
            f"rankers compared: the {MAX_COMPARED_RANKERS} of {len(sizes)} rankers with the most "
            "records (the pairs grow as the square of the rankers)"
        )
        data = data[data["ranker"].isin(sizes.index[:MAX_COMPARED_RANKERS])]
    cells = data.groupby(by_cols, sort=True) if by_cols else [((), data)]
    for key, cell in cells:
        key = key if isinstance(key, tuple) else (key,)
        labels = dict(zip(options.by, key, strict=True))
        groups = {name: frame for name, frame in cell.groupby("ranker", sort=True)}
        for metric in columns:
            samples = {
                name: frame[metric].to_numpy(float)
                for name, frame in groups.items()
                if np.isfinite(frame[metric].to_numpy(float)).sum() >= 2
            }
            left_out = tuple(sorted(set(groups) - set(samples)))
            if left_out and len(groups) >= 2:
                where = ", ".join(f"{k}={v}" for k, v in labels.items()) or "all records"
                skipped.setdefault((where, left_out), []).append(metric)
            for row in pairwise_t_tests(samples, alpha=options.alpha):
                rows.append({**labels, "metric": metric, **row.__dict__, "alpha": options.alpha})
    for (where, left_out), metrics in skipped.items():
        notes.append(
            f"rankers compared ({where}): {', '.join(left_out)} left out of the t-tests of "
            f"{', '.join(metrics)} (fewer than 2 values)"
        )
    return pd.DataFrame(rows), notes


def _drift(metrics: pd.DataFrame, options: AuditOptions) -> pd.DataFrame:
    """Windows whose amortized disparity is above the band (whole CI above it: ``certain``)."""
    if options.max_disparity is None or metrics.empty:
        return pd.DataFrame()
    rows = metrics[(metrics["metric"] == "amortized_disparity")]
    rows = rows[rows["value"] > options.max_disparity].copy()
    rows["band"] = options.max_disparity
    rows["certain"] = rows["ci_low"] > options.max_disparity
    keep = [
        "ranker",
        *options.by,
        "window",
        "window_start",
        "value",
        "ci_low",
        "ci_high",
        "n",
        "band",
        "certain",
    ]
    return rows[keep].reset_index(drop=True)


def finite_or_none(value: float) -> float | None:
    """``value`` for JSON: NaN and infinities become None."""
    return float(value) if value is not None and math.isfinite(value) else None
