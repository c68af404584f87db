"""Mergeable partial aggregates of the audit: per ranker, ``--by`` value and window, the counts,
sums and sums of squares every interval of the metric tables is computed from, so that a daily
run reads only its new logs and merges them with the saved ones (docs/SPEC.md "Auditing logs",
"Partial aggregates").

A mean and its t interval need ``n``, ``Σ x`` and ``Σ x²``; the exposure share's ratio
estimator needs ``n``, ``Σ W``, ``Σ W²``, ``Σ W x``, ``Σ W² x`` and ``Σ W² x²``. All are sums, so
partials of disjoint sets of records merge by adding them cell by cell (:func:`merge_partials`),
in any order and on any machine (:mod:`fairrag_audit.distributed`); :func:`metric_table`
turns them into the audit's metric table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from .analysis import _label, load_included, metric_rows
from .options import AuditOptions
from .scan import METRIC_FIELDS, file_connection

__all__ = [
    "MEAN_FIELDS",
    "RATIO_FIELDS",
    "compute_partials",
    "merge_partials",
    "metric_table",
    "read_partials",
    "write_partials",
]

RATIO_FIELDS = ("p", "d")
"""The record's protected exposure share ``p`` and its deviation from the target ``d``, each
averaged by the ratio estimator weighted by the list's exposure ``W`` (docs/SPEC.md)."""

MEAN_FIELDS = ("exposure_disparity", *METRIC_FIELDS)
"""The per-record measures averaged plainly (the generation fields of ``fairrag_core.audit``
as the record schema lists them: derived, not written out here)."""


def _keys(options: AuditOptions) -> list[str]:
    return ["ranker", *(f"by_{i}" for i in range(len(options.by))), "window_start"]


def _sums_sql(keys: list[str]) -> str:
    ratio = "".join(
        f", count({x}) AS {x}__n, sum(w) FILTER ({x} IS NOT NULL) AS {x}__sw, "
        f"sum(w * w) FILTER ({x} IS NOT NULL) AS {x}__sw2, sum(w * {x}) AS {x}__a, "
        f"sum(w * w * {x}) AS {x}__b, sum(w * w * {x} * {x}) AS {x}__c"
        for x in RATIO_FIELDS
    )
    plain = "".join(
        f", count({m}) AS {m}__n, sum({m}) AS {m}__sum, sum({m} * {m}) AS {m}__sumsq"
        for m in MEAN_FIELDS
    )
    key_sql = ", ".join(keys)
    return (
        f"SELECT {key_sql}, count(*) AS records, count_if(has_error) AS errors {ratio} {plain} "
        f"FROM included GROUP BY {key_sql} ORDER BY {key_sql}"
    )


def compute_partials(
    options: AuditOptions, con: duckdb.DuckDBPyConnection | None = None
) -> pd.DataFrame:
    """The partial aggregates of ``options.paths``: one row per ranker, ``by_i`` value and
    window (``window_start``), with ``records``, ``errors`` and the sums of
    :data:`RATIO_FIELDS` and :data:`MEAN_FIELDS`. The records are read and checked exactly as
    :func:`fairrag_audit.audit` reads them."""
    if con is None:
        with file_connection() as own:
            return compute_partials(options, own)
    load_included(con, options)
    frame = con.execute(_sums_sql(_keys(options))).df()
    sums = [c for c in frame.columns if c not in _keys(options)]
    frame[sums] = frame[sums].fillna(0.0)  # a sum over no value
    return frame


def merge_partials(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """Partials of disjoint sets of records, added cell by cell."""
    frames = [f for f in frames if len(f)]
    if not frames:
        raise ValueError("merge_partials needs at least one non-empty frame of partials")
    keys = [c for c in frames[0].columns if c.startswith(("ranker", "by_", "window_start"))]
    merged = pd.concat(frames, ignore_index=True).groupby(keys, dropna=False, sort=True).sum()
    return merged.reset_index()


def metric_table(
    partials: pd.DataFrame, options: AuditOptions, keys: Sequence[str] | None = None
) -> pd.DataFrame:
    """The audit's metric table (``AuditResult.metrics`` when ``keys`` is None: per ranker,
    ``--by`` values and window; ``["ranker"]``: ``AuditResult.rankers``) from partials."""
    fine = _keys(options)
    keys = fine if keys is None else list(keys)
    cells = partials.groupby(keys, dropna=False, sort=True).sum(numeric_only=True).reset_index()
    for m in MEAN_FIELDS:
        n = cells[f"{m}__n"].to_numpy(float)
        total = cells[f"{m}__sum"].to_numpy(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, total / n, np.nan)
            spread = np.maximum(cells[f"{m}__sumsq"].to_numpy(float) - total * mean, 0.0)
            cells[f"{m}__std"] = np.where(n > 1, np.sqrt(spread / (n - 1)), np.nan)
        cells[f"{m}__mean"] = mean
    for x in RATIO_FIELDS:  # DuckDB's sum over no value is NULL: no cell has a ratio then
        empty = cells[f"{x}__n"] == 0
        cells.loc[empty, [f"{x}__sw", f"{x}__sw2", f"{x}__a", f"{x}__b", f"{x}__c"]] = np.nan
    return _label(metric_rows(cells, keys, options), options)


def write_partials(partials: pd.DataFrame, path: str | Path) -> Path:
    """Save partials as Parquet, through DuckDB (one file per run: merge them with
    :func:`read_partials`)."""
    path = Path(path)
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.from_df(partials).write_parquet(str(path))
    finally:
        con.close()
    return path


def read_partials(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Read and merge the partials saved by :func:`write_partials`."""
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        frames = [con.read_parquet(str(Path(p))).df() for p in paths]
    finally:
        con.close()
    return merge_partials(frames)
