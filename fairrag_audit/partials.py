"""Mergeable partial aggregates of the audit: everything its report states, as counts, sums and
sums of squares per ranker, ``--by`` value, window and group, so that a daily run reads only
its new logs and merges them with the saved ones (docs/SPEC.md "Auditing logs", "Partial
aggregates"). The one-shot audit is the report of one run's partials
(:func:`fairrag_audit.analysis.run_audit`), so a merged report equals it up to the order of
floating-point sums.

A mean, its t interval and a t-test need ``n``, ``Σ x`` and ``Σ x²``; the ratio estimator of an
exposure share needs ``n``, ``Σ W``, ``Σ W²``, ``Σ W x``, ``Σ W² x`` and ``Σ W² x²``. All are
sums, so partials of disjoint sets of records merge by adding them cell by cell
(:func:`merge_partials`), in any order and on any machine (:mod:`fairrag_audit.distributed`).
The reading table and the lines left out are per file: they merge by concatenation.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from fairrag_core.target import OTHERS

from .lines import (
    BROKEN_GZIP,
    MAX_DEPTH,
    MAX_LINE_BYTES,
    REFUSED_FIELD,
    line_numbers,
    nesting_depth,
    open_log,
)
from .options import AuditOptions
from .scan import (
    ATTRIBUTED_FIELDS,
    KNOWN_FIELDS,
    KNOWN_STYLES,
    METRIC_FIELDS,
    MISSING_VALUE,
    NO_RANKER,
    UNKNOWN_GROUP,
    connect,
    file_connection,
    is_parquet,
    load_records,
    sql_literal,
)

__all__ = [
    "FIGURE_WINDOWS",
    "MEAN_FIELDS",
    "NICE_SECONDS",
    "PARTIALS_VERSION",
    "RATIO_FIELDS",
    "SETTINGS",
    "Partials",
    "compute_partials",
    "figure_window_seconds",
    "load_included",
    "merge_partials",
    "read_partials",
    "write_partials",
]

PARTIALS_VERSION = 2
"""Version of the saved layout (``partials.json`` and one Parquet file per table); 2 since the
counts of several-group targets and the list of tables written (layout 1 is refused: audit
those logs again)."""

RATIO_FIELDS = ("p", "d")
"""The record's protected exposure share ``p`` and its deviation from the target ``d``, each
averaged by the ratio estimator weighted by the list's exposure ``W`` (docs/SPEC.md)."""

MEAN_FIELDS = ("exposure_disparity", *METRIC_FIELDS)
"""The per-record measures averaged plainly (the generation fields of ``fairrag_core.audit``
as the record schema lists them)."""

SETTINGS = ("by", "window", "since", "protected", "target_share", "exposure")
"""The options that decide the sums: partials merge only when these are equal."""

MAX_LISTED = 1_000
"""Lines left out (damaged, not records, refused, future) listed per file, with the reason;
all are counted."""

FIGURE_WINDOWS = 20
"""Windows the time figures aim for when no ``--window`` is given."""
NICE_SECONDS = (
    *(1, 2, 5, 10, 15, 20, 30),
    *(60 * m for m in (1, 2, 5, 10, 15, 20, 30)),
    *(3600 * h for h in (1, 2, 3, 4, 6, 8, 12)),
    *(86_400 * d for d in (1, 2, 3, 4, 7, 14, 30, 61, 91, 182, 365)),
)
"""Window lengths the figures choose from (1 s to 1 year)."""
WINDOW_ORIGIN = "2000-01-03 00:00:00"
"""Where windows start, whatever ``--since`` (DuckDB's default origin: a Monday, 00:00 UTC)."""

NOTE_COUNTS = (
    "no_protected",
    "several_groups",
    "no_target",
    "bad_model",
    "no_list",
    "empty_list",
    "equal_weight",
    "share_mistyped",
    "share_missing",
    "errors",
    "no_timestamp",
    "no_answer",
    "before_attribution",
)
"""Per file, the records audited that lack something (the report's "What could not be
computed")."""

STYLE_COLUMNS = (*(f"style_{style}" for style in KNOWN_STYLES), "style_none")
"""The answers using each citation style (``style_none``: none)."""


@dataclass
class Partials:
    """The partial aggregates of a set of records (one run, or several merged)."""

    settings: dict[str, Any]
    """The :data:`SETTINGS` they were computed with (JSON values: ``window`` in seconds,
    ``since`` in ISO 8601)."""
    span: dict[str, Any]
    """``records``, ``dated`` (with a timestamp), ``first`` and ``last`` timestamp (ISO 8601
    or None) of the records audited: the figures' automatic windows are chosen from it."""
    cells: pd.DataFrame
    """Per ranker, ``by_i`` value and window (``window_start``): counts and sums."""
    groups: pd.DataFrame
    """Per ranker, ``by_i`` value, window and social ``group``: the group's exposure sums."""
    trend_cells: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Without ``--window``: per ranker and a fine time window (records without a timestamp:
    NaT) the sums of :attr:`cells`; the figures' windows are unions of these."""
    trend_groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Without ``--window``: :attr:`groups` per ranker and fine time window."""
    files: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per file, in order: the reading table's counts, ``audited_at`` and :data:`NOTE_COUNTS`."""
    left_out: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per file, the first :data:`MAX_LISTED` lines left out: file, line, kind, reason."""


TABLES = ("cells", "groups", "trend_cells", "trend_groups", "files", "left_out")


def settings_of(options: AuditOptions) -> dict[str, Any]:
    """The :data:`SETTINGS` of ``options`` as JSON values."""
    return {
        "by": list(options.by),
        "window": None if options.window is None else options.window.total_seconds(),
        "since": None if options.since is None else options.since.isoformat(),
        "protected": options.protected,
        "target_share": options.target_share,
        "exposure": options.exposure,
    }


def load_included(con: duckdb.DuckDBPyConnection, options: AuditOptions) -> dict[str, list[Any]]:
    """Read the logs into ``records`` (:func:`load_records`, whose counts it returns) and
    define the view ``included``: the usable records, keyed and with the measures."""
    counts = load_records(con, options)
    con.execute(f"CREATE OR REPLACE TEMP VIEW included AS {_included_sql(options)}")
    return counts


def _refuse_changed(options: AuditOptions, fingerprints: Sequence[str]) -> None:
    """A ``ValueError`` naming the first log whose first record is not the one it had before
    the audit read it (a file rotated or rewritten while read; a folder of Parquet files grows
    as files land, and its files are each read as they are when read)."""
    for path, before in zip(options.paths, fingerprints, strict=True):
        if not path.is_dir() and log_fingerprint(path) != before:
            raise ValueError(
                f"log {str(path)!r} changed while the audit read it (its first record is "
                "another: a rotation, or the file rewritten): the partials would count one "
                "log's lines under another's name; run the audit again"
            )


def _since_sql(options: AuditOptions) -> str:
    return "NULL" if options.since is None else f"TIMESTAMPTZ '{options.since.isoformat()}'"


def _bucket(micros: int, origin: str) -> str:
    return f"time_bucket(INTERVAL ({micros}) MICROSECOND, ts::TIMESTAMP, TIMESTAMP '{origin}')"


def _included_sql(options: AuditOptions) -> str:
    by = "".join(f", COALESCE(by_{i}, '{MISSING_VALUE}') AS by_{i}" for i in range(len(options.by)))
    if options.window is None:
        window = "NULL::TIMESTAMP"
    else:
        # one origin whatever --since: each run's windows line up (docs/SPEC.md)
        window = _bucket(int(options.window.total_seconds() * 1_000_000), WINDOW_ORIGIN)
    since = "" if options.since is None else f" AND ts >= {_since_sql(options)}"
    return f"""
        SELECT rid, file_index, line_index, ts,
            COALESCE(ranker, '{NO_RANKER}') AS ranker {by},
            {window} AS window_start, w, groups, weights, by_group, has_error,
            CASE WHEN w > 0 THEN protected_share END AS p,
            -- a target of several groups has no protected deviation to amortize (its stream's
            -- disparity is half the L1 distance of its shares: not computed here)
            CASE WHEN w > 0 AND (several_target IS NULL OR two_groups)
                THEN protected_share - target_share END AS d,
            CASE WHEN w > 0 THEN CASE WHEN several_target IS NULL
                THEN abs(protected_share - target_share) ELSE {_SEVERAL_DISPARITY} END
            END AS exposure_disparity
            {"".join(f", {m}" for m in METRIC_FIELDS)},
            answered, follows, has_attribution, styles, n_attribution_bullets,
            n_attributed_bullets
        FROM records WHERE usable{since}
    """


_NAMED = f"list_filter(map_keys(several_target), lambda g: g <> '{OTHERS}')"
"""The groups a target of several groups names (its ``OTHERS`` bucket apart)."""
_SHARE = (
    "(CASE WHEN by_group IS NOT NULL THEN COALESCE(by_group[g], 0.0) ELSE list_sum("
    "list_transform(list_zip(groups, weights), lambda x: CASE WHEN x[1] = g THEN x[2] "
    "ELSE 0.0 END)) / w END)"
)
"""The exposure share of group ``g`` in a record (its ``exposure_by_group``, else its list)."""
_SEVERAL_DISPARITY = f"""(CASE WHEN list_count(map_values(several_target))
        = cardinality(several_target) THEN 0.5 * (
    list_sum(list_transform({_NAMED}, lambda g: abs({_SHARE} - several_target[g])))
    + abs(1 - COALESCE(list_sum(list_transform({_NAMED}, lambda g: {_SHARE})), 0.0)
        - COALESCE(several_target['{OTHERS}'], 0.0))) END)"""
"""A record's exposure disparity against a target of several groups (docs/SPEC.md
"Metrics"): half the L1 distance between its shares and the target, every label the target does
not name in its ``OTHERS`` bucket (target 0 when it has none); NULL when a share of the target
is not a JSON number."""


def _cells_sql(keys: Sequence[str], view: str) -> str:
    """Per cell of ``keys``: records, errors, the ratio sums of :data:`RATIO_FIELDS`, ``n``,
    ``Σ x``, ``Σ x²`` of ``p`` and :data:`MEAN_FIELDS`, the exposure cell (``e__``) and what
    the answers cited."""
    ratio = "".join(
        f", count({x}) AS {x}__n, sum(w) FILTER ({x} IS NOT NULL) AS {x}__sw, "
        f"sum(w * w) FILTER ({x} IS NOT NULL) AS {x}__sw2, sum(w * {x}) AS {x}__a, "
        f"sum(w * w * {x}) AS {x}__b, sum(w * w * {x} * {x}) AS {x}__c"
        for x in RATIO_FIELDS
    )
    plain = ", sum(p) AS p__sum, sum(p * p) AS p__sumsq" + "".join(
        f", count({m}) AS {m}__n, sum({m}) AS {m}__sum, sum({m} * {m}) AS {m}__sumsq"
        for m in MEAN_FIELDS
    )
    listed = "w > 0 AND (by_group IS NOT NULL OR groups IS NOT NULL)"
    exposure = (
        f", count_if({listed}) AS e__n, sum(w) FILTER ({listed}) AS e__sw, "
        f"sum(w * w) FILTER ({listed}) AS e__sw2"
    )
    styles = "".join(
        f", count_if(list_contains(styles, '{style}')) AS style_{style}" for style in KNOWN_STYLES
    )
    # a record without follows_citation_format followed it when its parity has a value
    generation = f"""
        , count_if(answered) AS answers,
        count_if(answered AND COALESCE(follows, generation_parity IS NOT NULL)) AS follows_format,
        count_if(answered AND generation_parity IS NOT NULL) AS paper_measured,
        count_if(answered AND attributed_generation_parity IS NOT NULL) AS attributed_measured,
        count_if(answered AND NOT has_attribution) AS without_attribution,
        count_if(answered AND has_attribution AND n_attributed_bullets = 0) AS attributed_nothing,
        sum(n_attribution_bullets) FILTER (answered) AS bullets,
        sum(n_attributed_bullets) FILTER (answered) AS attributed_bullets
        {styles}, count_if(answered AND len(styles) = 0) AS style_none
    """
    key_sql = ", ".join(keys)
    return (
        f"SELECT {key_sql}, count(*) AS records, count_if(has_error) AS errors {ratio} {plain} "
        f"{exposure} {generation} FROM {view} GROUP BY {key_sql} ORDER BY {key_sql}"
    )


def _groups_sql(keys: Sequence[str], view: str) -> str:
    """Per cell of ``keys`` and social group: ``a = Σ W ES_g``, ``b = Σ W² ES_g``, ``c = Σ W²
    ES_g²`` over the records that list groups (``ES_g`` from ``exposure_by_group`` when the
    record has it, else from ``groups`` and the exposure model's weights)."""
    key_sql = ", ".join(keys)
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
    return f"""
        SELECT {key_sql}, g AS "group", sum(w * s) AS a, sum(w * w * s) AS b,
            sum(w * w * s * s) AS c
        FROM ({per_group}) WHERE s IS NOT NULL GROUP BY {key_sql}, g
        ORDER BY {key_sql}, g
    """


def _sums(con: duckdb.DuckDBPyConnection, sql: str, keys: Sequence[str]) -> pd.DataFrame:
    frame = con.execute(sql).df()
    sums = [c for c in frame.columns if c not in (*keys, "group")]
    frame[sums] = frame[sums].fillna(0).astype(float)  # a sum over no value is NULL in SQL
    return frame


def figure_window_seconds(span: dict[str, Any]) -> int:
    """The figures' window length without ``--window``: the shortest of :data:`NICE_SECONDS`
    giving at most :data:`FIGURE_WINDOWS` windows over the dated records' span."""
    if span.get("first") is None:
        return NICE_SECONDS[0]
    seconds = (_moment(span["last"]) - _moment(span["first"])).total_seconds()
    return next((x for x in NICE_SECONDS if seconds / x <= FIGURE_WINDOWS), NICE_SECONDS[-1])


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _trend_grain(span: dict[str, Any]) -> int:
    """A window length dividing every length the figures of a superset of these records can
    choose (those at least this set's own choice, :func:`figure_window_seconds`): the trend
    partials are kept at this grain, and merged windows are unions of its windows."""
    own = figure_window_seconds(span)
    grain = 0
    for seconds in NICE_SECONDS:
        if seconds >= own:
            grain = math.gcd(grain, seconds)
    return grain


def compute_partials(
    options: AuditOptions,
    con: duckdb.DuckDBPyConnection | None = None,
    answered_lines: dict[int, set[int]] | None = None,
) -> Partials:
    """The partial aggregates of ``options.paths``, read and checked exactly as
    :func:`fairrag_audit.audit` reads them. ``answered_lines``, when given, is filled with
    the 1-based line numbers of the records audited, per file index (``--fit-exposure`` fits
    their answers: the records the audit counted, nothing it left out)."""
    if con is None:
        with file_connection() as own:
            return compute_partials(options, own, answered_lines)
    fingerprints = [log_fingerprint(path) for path in options.paths]
    repeated = repeated_log([str(path) for path in options.paths], fingerprints)
    if repeated:  # before any is read
        raise ValueError(
            f"log {repeated[0]!r} holds the same log as {repeated[1]!r} (the same first "
            "record: one file named twice, a copy, a gzip rotation or a Parquet conversion of "
            "it, or a folder and one of its files): give each log once"
        )
    try:
        counts = load_included(con, options)
    except duckdb.IOException:
        # a file rewritten in place while DuckDB read it ("Could not read enough bytes"):
        # refused as a changed log, exit 2, when it changed (an operator's trial found the raw
        # IO error, exit 1); any other IO error as it is
        _refuse_changed(options, fingerprints)
        raise
    _refuse_changed(options, fingerprints)
    if answered_lines is not None:
        wanted: dict[int, list[int]] = {}
        for file_index, line_index in con.execute(
            "SELECT file_index, line_index FROM included"
        ).fetchall():
            wanted.setdefault(int(file_index), []).append(int(line_index))
        for index, lines in wanted.items():
            numbers = line_numbers(options.paths[index], lines, counts["blank_lines"][index])
            answered_lines[index] = set(numbers.values())
    fine = ["ranker", *(f"by_{i}" for i in range(len(options.by))), "window_start"]
    n, dated, first, last = con.execute(
        "SELECT count(*), count(ts), min(ts), max(ts) FROM included"
    ).fetchone() or (0, 0, None, None)
    span = {
        "records": int(n),
        "dated": int(dated),
        "first": None if first is None else first.isoformat(),
        "last": None if last is None else last.isoformat(),
    }
    partials = Partials(
        settings=settings_of(options),
        span=span,
        cells=_sums(con, _cells_sql(fine, "included"), fine),
        groups=_sums(con, _groups_sql(fine, "included"), fine),
        files=_files(con, options, counts, fingerprints),
        left_out=_left_out(con, options, counts["blank_lines"]),
    )
    if options.window is None:
        micros = _trend_grain(span) * 1_000_000
        con.execute(
            "CREATE OR REPLACE TEMP VIEW trend AS SELECT * REPLACE "
            f"({_bucket(micros, WINDOW_ORIGIN)} AS window_start) FROM included"
        )
        trend = ["ranker", "window_start"]
        partials.trend_cells = _sums(con, _cells_sql(trend, "trend"), trend)
        partials.trend_groups = _sums(con, _groups_sql(trend, "trend"), trend)
    return partials


def _files(
    con: duckdb.DuckDBPyConnection,
    options: AuditOptions,
    counts: dict[str, list[Any]],
    fingerprints: Sequence[str],
) -> pd.DataFrame:
    """Per file: the reading table's counts and :data:`NOTE_COUNTS` (of the records audited)."""
    since = _since_sql(options)
    audited = f"usable AND ({since} IS NULL OR COALESCE(ts >= {since}, false))"
    notes = {
        "no_protected": "protected IS NULL",
        "several_groups": "several_target IS NOT NULL AND NOT two_groups",
        "no_target": "protected IS NOT NULL AND target_share IS NULL",
        "bad_model": "NOT model_ok",
        "no_list": "model_ok AND w IS NULL",
        "empty_list": "w = 0",
        # no list length (neither groups nor k): W_t = 1; a record with k weighs by k (a user
        # trial found records with k counted here, the note saying they weighed equally)
        "equal_weight": "weights IS NULL AND w IS NOT NULL",
        # the share read from exposure_share (no groups nor exposure_by_group), missing: given
        # as no JSON number, or not given although the record has a list (k)
        "share_mistyped": "protected IS NOT NULL AND model_ok AND groups IS NULL "
        "AND by_group IS NULL AND share_mistyped",
        "share_missing": "protected IS NOT NULL AND model_ok AND groups IS NULL "
        "AND by_group IS NULL AND w > 0 AND logged_share IS NULL AND NOT share_mistyped",
        "errors": "has_error",
        "no_timestamp": "ts IS NULL",
        "no_answer": "NOT answered",
        "before_attribution": "answered AND NOT has_attribution",
        **{f"{m}__present": f"{m} IS NOT NULL" for m in METRIC_FIELDS},
        # an attributed metric in a record without the attribution's fields is counted as
        # written before it ("before_attribution"), never twice
        **{
            f"{m}__mistyped": f"answered AND (mistyped & {1 << i}) <> 0"
            + (" AND has_attribution" if m in ATTRIBUTED_FIELDS else "")
            for i, m in enumerate(METRIC_FIELDS)
        },
        **{f"by_{i}__missing": f"by_{i} IS NULL" for i in range(len(options.by))},
    }
    rows = con.execute(f"""
        SELECT file_index, count_if(usable) AS records,
            count_if(kind = 'not_record') AS not_records,
            count_if(kind = 'refused') AS refused,
            count_if(kind = 'future') AS future,
            count_if(usable AND ts IS NULL AND {since} IS NOT NULL) AS no_timestamp_excluded,
            count_if(usable AND COALESCE(ts < {since}, false)) AS before_since,
            count_if(usable AND ts IS NULL) AS undated,
            COALESCE(array_to_string(list_sort(list(DISTINCT source) FILTER (usable)), ', '), '')
                AS sources
            {"".join(f", count_if({audited} AND {sql}) AS {name}" for name, sql in notes.items())}
        FROM records GROUP BY file_index ORDER BY file_index
    """).df()
    by_file = rows.set_index("file_index")
    table = []
    for index, path in enumerate(options.paths):
        row = by_file.loc[index] if index in by_file.index else None
        number = {
            name: 0 if row is None or pd.isna(row[name]) else int(row[name])
            for name in rows.columns
            if name not in ("file_index", "sources")
        }
        excluded = number.pop("before_since") + number["no_timestamp_excluded"]
        records = number.pop("records")
        table.append(
            {
                "file": str(path),
                "fingerprint": fingerprints[index],
                "lines": int(counts["lines"][index]),
                "damaged": int(counts["damaged"][index]),
                "not_records": number.pop("not_records"),
                "refused": number.pop("refused"),
                "future": number.pop("future"),
                "records": records,
                "excluded_by_since": excluded,
                "used": records - excluded,
                "sources": "" if row is None else str(row["sources"]),
                "audited_at": options.now.isoformat(),
                **number,
            }
        )
    return pd.DataFrame(table)


FINGERPRINT_BYTES = MAX_LINE_BYTES
"""Longest line :func:`log_fingerprint` reads as a record (the audit's own bound: a longer line
is refused by the audit, so it is no first record in JSON lines nor in Parquet)."""
FINGERPRINT_LINES = 1_000
"""Most lines (or Parquet rows) :func:`log_fingerprint` looks through for a first record."""
FINGERPRINT_SCAN = 4 * MAX_LINE_BYTES
"""Most decompressed bytes :func:`log_fingerprint` reads of a JSON-lines log."""
SEPARATOR = ";"
"""Between the fingerprints of a folder's files."""


FINGERPRINT_FORM = "r3:"
"""What starts a fingerprint of this form (a log told by its first record's fields, its
timestamp as the instant the audit's scan reads). The forms before (``r2:``, which read the
timestamp as written, so not as a typed Parquet export writes it; ``r1:``, which told a first
record without ``run_id`` or ``timestamp`` by its bytes, so not as its Parquet conversion; a
bare SHA-256 of the first line) are told by their path."""

IDENTITY_FIELDS = tuple(dict.fromkeys([*KNOWN_FIELDS, "metadata", "run_id"]))
"""The fields that tell a first record without both ``run_id`` and ``timestamp``: those every
``--to-parquet`` conversion keeps (:func:`fairrag_audit.scan.to_parquet`)."""


def _identity(record: dict[str, Any]) -> str:
    """The fingerprint of a log whose first record is ``record``: a SHA-256 of its ``run_id``
    and ``timestamp`` when it has both, else of its :data:`IDENTITY_FIELDS` that are not null
    (as JSON values, keys sorted): the same for its JSON line and its Parquet row. The JSON is
    ASCII (a lone surrogate a record holds, as the handlers write one, is hashed as its escape:
    a review found it raised ``UnicodeEncodeError``)."""
    run_id, timestamp = record.get("run_id"), _instant(record.get("timestamp"))
    if timestamp is not None:
        record = {**record, "timestamp": timestamp}
    if run_id is not None and timestamp is not None:
        values = [json.dumps(v, separators=(",", ":")) for v in (run_id, timestamp)]
        text = "\0".join(["record", *values])
    else:
        kept = {k: record[k] for k in IDENTITY_FIELDS if record.get(k) is not None}
        text = "fields\0" + json.dumps(kept, separators=(",", ":"), sort_keys=True)
    return FINGERPRINT_FORM + hashlib.sha256(text.encode()).hexdigest()


def _instant(timestamp: Any) -> Any:
    """A timestamp as the instant the audit reads it (its DuckDB scan's ``TRY_CAST(... AS
    TIMESTAMPTZ)`` in UTC, in microseconds: a review found Python's reading differ from it on
    ``24:00:00`` and ``... UTC``), so its JSON line (``2026-12-01T00:00:00Z``) and a typed
    Parquet export (``2026-12-01 00:00:00+00``) tell one log (an operator's trial: counted
    twice); else as it is (not text, or no date and time the audit reads)."""
    if not isinstance(timestamp, str) or len(timestamp) > 64:
        return timestamp
    with _INSTANT_LOCK:
        con = _instant_connection()
        row = con.execute("SELECT epoch_us(TRY_CAST(? AS TIMESTAMPTZ))", [timestamp]).fetchone()
    micros = None if row is None else row[0]
    return timestamp if micros is None else f"{micros}us"


_INSTANT_LOCK = threading.Lock()
_INSTANT: list[tuple[int, duckdb.DuckDBPyConnection]] = []
"""One in-memory DuckDB connection per process (a forked worker makes its own)."""


def _instant_connection() -> duckdb.DuckDBPyConnection:
    if not _INSTANT or _INSTANT[0][0] != os.getpid():
        con = duckdb.connect(":memory:")
        con.execute("SET TimeZone = 'UTC'")
        _INSTANT[:] = [(os.getpid(), con)]
    return _INSTANT[0][1]


NO_RECORD = FINGERPRINT_FORM + "n"
"""What starts the fingerprint of a log read whole without a record (its first line's bytes):
never a repeat. Such a log adds no record to count twice, and two of them often share their
first line (each day's conversion of a log of torn lines to Parquet, whose rows are all null;
a log opening ``{"event": "logger started"}``): an operator's trial found a folder of daily
logs refused as one log counted twice. A log whose first record lies past the lines the
fingerprint reads is told by its first line as before (:func:`_bytes_identity`), so a copy of
it is still refused (a review)."""


def _bytes_identity(head: bytes) -> str:
    return FINGERPRINT_FORM + hashlib.sha256(b"bytes\0" + head).hexdigest()


def _no_record_identity(head: bytes) -> str:
    return NO_RECORD + hashlib.sha256(b"bytes\0" + head).hexdigest()


EMPTY = _bytes_identity(b"")
"""The fingerprint of a log with nothing in it: never a repeat."""


def log_fingerprint(path: Path) -> str:
    """What tells one log from another, whatever path names it and however it is stored
    (docs/SPEC.md, "Partial aggregates"): its first record, :func:`_identity`. Of JSON lines
    (plain or gzip), the first line that is a JSON object with a record field
    (:data:`IDENTITY_FIELDS`) not null (blank lines, lines that are not one, and lines the
    audit refuses, longer than :data:`FINGERPRINT_BYTES` or nested deeper than its cap, before
    it skipped, within :data:`FINGERPRINT_LINES` lines
    and :data:`FINGERPRINT_SCAN` decompressed bytes); no record, of the first non-blank line's
    first bytes (:data:`EMPTY` for a log with none). A Parquet file: its first row that is a
    record as the audit reads it (not damaged nor refused, a field not null) among its first
    :data:`FINGERPRINT_LINES`, else its first row's JSON; a folder of Parquet files: each
    file's, joined by :data:`SEPARATOR` (a file DuckDB cannot read: :data:`EMPTY`, the others
    read as they are). One file named two ways, a copy, its gzip rotation, its Parquet
    conversion, and the same log grown since have one fingerprint; a log rotated under the
    same name has another."""
    if path.is_dir():
        members = sorted(p for p in path.rglob("*.parquet") if p.is_file())
        return SEPARATOR.join(_parquet_fingerprints(members)) or EMPTY
    if is_parquet(path):
        return _parquet_fingerprints([path])[0]
    first_line = None
    read = 0
    whole = False  # the log read to its end (else the scan's bounds stopped it)
    try:
        with open_log(path) as handle:
            for _ in range(FINGERPRINT_LINES):
                piece = handle.readline(FINGERPRINT_BYTES)
                if not piece:
                    whole = True
                    break
                if read >= FINGERPRINT_SCAN:
                    break
                read += len(piece)
                if len(piece) == FINGERPRINT_BYTES and not piece.endswith(b"\n"):
                    # a line past the audit's bound, refused by the audit: read past it
                    first_line = first_line or piece[: 2**16]
                    while piece and not piece.endswith(b"\n") and read < FINGERPRINT_SCAN:
                        piece = handle.readline(FINGERPRINT_BYTES)
                        read += len(piece)
                    continue
                text = piece.strip()
                if not text:
                    continue  # a blank line
                record = _record(text) if nesting_depth(text) <= MAX_DEPTH else None
                if record is None or all(record.get(k) is None for k in IDENTITY_FIELDS):
                    first_line = first_line or text[: 2**16]  # no record: the next may be
                    continue
                return _identity(record)
    except BROKEN_GZIP:  # a gzip cut short or corrupt: what was read, all there is
        whole = True
    if first_line is None:
        return EMPTY
    return _no_record_identity(first_line) if whole else _bytes_identity(first_line)


def _record(line: bytes) -> dict[str, Any] | None:
    """The JSON object a line holds, else None (also for a string holding a lone surrogate,
    ``"\\udcff"``: DuckDB reads that line as damaged, so the audit never counts it)."""
    try:
        value = json.loads(line)
        json.dumps(value, ensure_ascii=False).encode()
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    return value if isinstance(value, dict) else None


def _parquet_fingerprints(paths: Sequence[Path]) -> list[str]:
    """:func:`log_fingerprint` of each Parquet file, read in one query (a folder of thousands
    of files is one scan); when one file cannot be read (cut short by a copy still running),
    each file alone, so the others keep their fingerprints (a user trial: every file of the
    folder fell back to its first row's JSON, and the folder's logs were counted twice)."""
    if not paths:
        return []
    con = connect()
    try:
        try:
            found = _first_records(con, paths)
        except duckdb.Error:
            found = {}
            for path in paths:
                try:
                    found.update(_first_records(con, [path]))
                except duckdb.Error:  # this file cannot be read: the audit says so
                    found[str(path)] = EMPTY
        return [found.get(str(path)) or _first_row(con, path) for path in paths]
    finally:
        con.close()


def _first_records(con: duckdb.DuckDBPyConnection, paths: Sequence[Path]) -> dict[str, str]:
    """``{file: fingerprint}`` of the files among ``paths`` with a record in their first
    :data:`FINGERPRINT_LINES` rows (:func:`log_fingerprint`); a ``duckdb.Error`` when one
    cannot be read."""
    files = "[" + ", ".join(sql_literal(str(path)) for path in paths) + "]"
    source = f"read_parquet({files}, filename = true, file_row_number = true, union_by_name = true)"
    names = {str(row[0]) for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    fields = [name for name in IDENTITY_FIELDS if name in names]
    if not fields:
        return {}
    quoted = [f'"{name}"' for name in fields]
    keep = ["true"]
    if "__damaged" in names:
        keep.append('NOT COALESCE("__damaged", false)')
    if REFUSED_FIELD in names:
        keep.append(f'"{REFUSED_FIELD}" IS NULL')
    present = " OR ".join(
        f"COALESCE(CAST(to_json({q}) AS VARCHAR), 'null') <> 'null'" for q in quoted
    )
    packed = ", ".join(f"{q} := {q}" for q in quoted)
    rows = con.execute(f"""
        SELECT filename, arg_min(CAST(to_json(struct_pack({packed})) AS VARCHAR), file_row_number)
        FROM {source}
        WHERE {" AND ".join(keep)} AND ({present}) AND file_row_number < {FINGERPRINT_LINES}
        GROUP BY filename
    """).fetchall()
    found = {}
    for filename, packed_row in rows:
        try:
            record = json.loads(packed_row)
        except (ValueError, RecursionError):  # not values a record holds: not told by them
            continue
        if isinstance(record, dict):
            found[str(filename)] = _identity(record)
    return found


def _first_row(con: duckdb.DuckDBPyConnection, path: Path) -> str:
    """The fingerprint of a Parquet file without a record to tell it: its first row's JSON."""
    source = f"read_parquet({sql_literal(str(path))})"
    try:
        first = con.execute(
            f"SELECT CAST(to_json(t) AS VARCHAR) FROM {source} t LIMIT 1"
        ).fetchone()
        rows = con.execute(f"SELECT count(*) FROM {source}").fetchone()
    except duckdb.Error:
        return EMPTY
    if first is None:
        return EMPTY
    head = str(first[0]).encode()[: 2**16]
    whole = rows is not None and int(rows[0]) <= FINGERPRINT_LINES  # every row read for a record
    return _no_record_identity(head) if whole else _bytes_identity(head)


def repeated_log(files: Sequence[str], fingerprints: Sequence[Any]) -> tuple[str, str] | None:
    """The first log (and the one before it) that holds a log another one does, by
    :func:`log_fingerprint` (a fingerprint None or NaN, or of an earlier form: saved by an
    earlier release, told by its path); logs with nothing in them or no record never repeat."""
    rows = repeated_rows(files, fingerprints)
    return None if rows is None else (files[rows[0]], files[rows[1]])


def repeated_rows(files: Sequence[str], fingerprints: Sequence[Any]) -> tuple[int, int] | None:
    """:func:`repeated_log` as the indices of the two logs in ``files`` (the later first)."""
    seen: dict[str, int] = {}
    paths: dict[str, int] = {}
    by_path: dict[str, int] = {}  # the logs told by their path only
    for index, (file, fingerprint) in enumerate(zip(files, fingerprints, strict=True)):
        missing = fingerprint is None or (
            isinstance(fingerprint, float) and math.isnan(fingerprint)
        )
        # an earlier form of fingerprint (the first line's bytes) cannot be compared with this
        # one: such a log is told by its path, against every log, as one without fingerprint
        parts = [] if missing else str(fingerprint).split(SEPARATOR)
        ours = bool(parts) and all(part.startswith(FINGERPRINT_FORM) for part in parts)
        earlier = (by_path if ours else paths).get(file)
        if earlier is not None:
            return index, earlier
        paths.setdefault(file, index)
        if not ours:
            by_path.setdefault(file, index)
            continue
        for key in parts:
            if key == EMPTY or key.startswith(NO_RECORD):
                continue  # no record to count twice (a log with nothing in it, or no record)
            if key in seen:
                return index, seen[key]
            seen[key] = index
    return None


def _left_out(
    con: duckdb.DuckDBPyConnection,
    options: AuditOptions,
    blank_lines: list[tuple[int, ...] | None],
) -> pd.DataFrame:
    """The first :data:`MAX_LISTED` lines of each file that are not records audited, with
    their line numbers (from the blank lines the sieve noted; one more streaming pass over a
    file the sieve read line by line)."""
    rows = con.execute(f"""
        SELECT file_index, line_index, kind, refusal FROM records WHERE NOT usable
        QUALIFY row_number() OVER (PARTITION BY file_index ORDER BY line_index) <= {MAX_LISTED}
        ORDER BY file_index, line_index
    """).fetchall()
    wanted: dict[int, list[int]] = {}
    for file_index, line_index, _, _ in rows:
        wanted.setdefault(int(file_index), []).append(int(line_index))
    numbers = {
        i: line_numbers(options.paths[i], lines, blank_lines[i]) for i, lines in wanted.items()
    }
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


def _add(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Frames of sums added cell by cell: grouped by their text and time columns."""
    frames = [f for f in frames if len(f.columns)]
    if not frames:
        return pd.DataFrame()
    whole = pd.concat(frames, ignore_index=True)
    keys = [c for c in whole.columns if not pd.api.types.is_float_dtype(whole[c])]
    if whole.empty:
        return whole
    return whole.groupby(keys, dropna=False, sort=True).sum().reset_index()


def merge_partials(parts: Iterable[Partials], names: Sequence[str] | None = None) -> Partials:
    """Partials of disjoint sets of records (files), merged: sums added cell by cell, the
    per-file tables concatenated in the order given. They must share :data:`SETTINGS`.
    ``names``: where each part came from (its folder), named when a log is counted twice."""
    parts = list(parts)
    if not parts:
        raise ValueError("merge_partials needs at least one set of partials, got none")
    first = parts[0]
    for other in parts[1:]:
        for name in SETTINGS:
            if other.settings.get(name) != first.settings.get(name):
                flag = "--" + name.replace("_", "-")
                raise ValueError(
                    f"partials computed with different {flag} ({first.settings.get(name)!r} "
                    f"and {other.settings.get(name)!r}) cannot be merged: audit every window "
                    f"with the same {', '.join('--' + s.replace('_', '-') for s in SETTINGS)}"
                )
    files = pd.concat([p.files for p in parts], ignore_index=True)
    # a log is its first record (log_fingerprint), not the path it was given by: a file
    # rotated under one name is several logs; one file named two ways, copied, or grown since
    # is one. Partials saved before fingerprints existed are told by their path.
    counted = files[files["lines"] > 0]  # empty logs add nothing, however many are merged
    if "records" in counted:  # nor do logs without a record (saved by any release: a review)
        counted = counted[counted["records"] > 0]
    fingerprints = counted["fingerprint"] if "fingerprint" in counted else [None] * len(counted)
    names_of = counted["file"].tolist()
    rows = repeated_rows(names_of, list(fingerprints))
    if rows is not None:
        repeated = (names_of[rows[0]], names_of[rows[1]])
        where = ""
        if names is not None:  # which partials hold the two (an operator's trial: unnamed)
            origin = [names[i] for i, p in enumerate(parts) for _ in range(len(p.files))]
            held = [counted.index[row] for row in rows]  # those two rows, not their paths
            where = f", in the partials {sorted({origin[k] for k in held})}"
        raise ValueError(
            f"the partials count the log {repeated[0]!r} more than once (the same first "
            f"record as {repeated[1]!r}{where}, whatever path named it: a copy, a gzip rotation "
            "or Parquet conversion of it, or a log that grew since its partials were saved); "
            "merge the partials of disjoint sets of logs (each window's new files once; a log "
            "still written to belongs to one window only)"
        )
    files, left_out = _told_apart(parts)
    dated = [p.span for p in parts if p.span.get("first") is not None]
    span = {
        "records": sum(int(p.span["records"]) for p in parts),
        "dated": sum(int(p.span["dated"]) for p in parts),
        "first": min((s["first"] for s in dated), key=_moment, default=None),
        "last": max((s["last"] for s in dated), key=_moment, default=None),
    }
    return replace(
        first,
        span=span,
        cells=_add([p.cells for p in parts]),
        groups=_add([p.groups for p in parts]),
        trend_cells=_add([p.trend_cells for p in parts]),
        trend_groups=_add([p.trend_groups for p in parts]),
        files=files,
        left_out=left_out,
    )


def _told_apart(parts: Sequence[Partials]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-file tables of ``parts`` concatenated; a path several parts read (a log rotated
    under one name each day) is named with the time each was audited, ``logs/fairness.jsonl
    (audited 2026-12-02T01:00:00+00:00)``, so its rows and the lines it left out tell which day's
    log they are (a user trial found two identical rows)."""
    counts = Counter(str(path) for part in parts for path in part.files["file"])
    if all(count == 1 for count in counts.values()):
        return (
            pd.concat([p.files for p in parts], ignore_index=True),
            pd.concat([p.left_out for p in parts], ignore_index=True),
        )
    files, left_out = [], []
    labels: set[str] = set()
    for part in parts:
        names: dict[str, str] = {}
        for path, audited in zip(part.files["file"], part.files["audited_at"], strict=True):
            if counts[str(path)] > 1:
                label = f"{path} (audited {audited})"
                number = 2
                while label in labels:  # two runs in the same second
                    label = f"{path} (audited {audited}) #{number}"
                    number += 1
                labels.add(label)
                names[str(path)] = label
        files.append(part.files.assign(file=part.files["file"].astype(str).replace(names)))
        if len(part.left_out):
            left_out.append(
                part.left_out.assign(file=part.left_out["file"].astype(str).replace(names))
            )
        else:
            left_out.append(part.left_out)
    return pd.concat(files, ignore_index=True), pd.concat(left_out, ignore_index=True)


def check_partials_out(folder: Path) -> None:
    """Refuse a ``--partials-out`` folder that is a file or already holds partials: each
    window's partials are kept in their own folder, never replaced (another window's sums
    would be lost without a word)."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--partials-out {str(folder)!r} is a file; give a folder")
    if (folder / "partials.json").exists():
        raise ValueError(
            f"--partials-out {str(folder)!r} already holds partials; give each window its own "
            "folder (remove this one first to compute it again)"
        )


def write_partials(partials: Partials, folder: str | Path) -> Path:
    """Save ``partials`` into ``folder`` (created): ``partials.json`` (settings and span) and
    one Parquet file per table, written by DuckDB. Read them back with :func:`read_partials`.
    A folder that already holds partials is refused (:func:`check_partials_out`)."""
    folder = Path(folder)
    check_partials_out(folder)
    folder.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(":memory:")
    written = []
    columns: dict[str, list[str]] = {}
    try:
        con.execute("SET TimeZone = 'UTC'")
        for name in TABLES:
            frame = getattr(partials, name)
            if len(frame.columns):
                con.from_df(frame).write_parquet(str(folder / f"{name}.parquet"))
                written.append(name)
                columns[name] = [str(column) for column in frame.columns]
    finally:
        con.close()
    meta = {
        "version": PARTIALS_VERSION,
        "settings": partials.settings,
        "span": partials.span,
        "tables": written,  # each one must be there when read back
        "columns": columns,  # and hold these (partials saved before this list: not checked)
    }
    (folder / "partials.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return folder


def _read_one(folder: Path, con: duckdb.DuckDBPyConnection) -> Partials:
    meta_path = folder / "partials.json"
    if not meta_path.is_file():
        why = (
            "does not exist"
            if not folder.exists()
            else "is a file, not a folder of partials"
            if folder.is_file()
            else "holds no partials.json"
        )
        raise ValueError(
            f"--from-partials {str(folder)!r} {why}; give folders written by "
            "`fairrag audit LOG... --partials-out DIR`"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        version, settings, span = meta["version"], meta["settings"], meta["span"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"--from-partials {str(folder)!r}: partials.json is not the audit's ({exc})"
        ) from None
    if version != PARTIALS_VERSION:
        raise ValueError(
            f"--from-partials {str(folder)!r}: partials of layout {version!r}, this audit "
            f"reads layout {PARTIALS_VERSION}; audit those logs again with this release"
        )
    missing = [
        f"{name}.parquet"
        for name in meta.get("tables", ())
        if not (folder / f"{name}.parquet").is_file()
    ]
    if missing:  # its records would be counted as read but be in no table
        raise ValueError(
            f"--from-partials {str(folder)!r}: {', '.join(missing)} missing (partials.json "
            "lists it); audit that window's logs again with --partials-out"
        )
    tables = {}
    for name in TABLES:
        path = folder / f"{name}.parquet"
        try:
            tables[name] = con.read_parquet(str(path)).df() if path.is_file() else pd.DataFrame()
        except duckdb.Error as exc:  # cut short, or not Parquet: said as the other damage is
            raise ValueError(
                f"--from-partials {str(folder)!r}: {name}.parquet cannot be read ("
                f"{str(exc).splitlines()[0]}); audit that window's logs again with --partials-out"
            ) from None
    if tables["files"].empty:
        raise ValueError(f"--from-partials {str(folder)!r}: files.parquet is missing")
    columns = meta.get("columns") or {}
    if not isinstance(columns, dict) or not all(
        isinstance(listed, list) and all(isinstance(c, str) for c in listed)
        for listed in columns.values()
    ):
        raise ValueError(
            f"--from-partials {str(folder)!r}: partials.json is not the audit's (its 'columns' "
            "is not an object of column-name lists); audit that window's logs again"
        )
    for name, listed in columns.items():
        lost = [c for c in listed if name in tables and c not in tables[name].columns]
        if lost:  # a table rewritten by another tool: its sums would be read as missing
            raise ValueError(
                f"--from-partials {str(folder)!r}: {name}.parquet lacks the column(s) "
                f"{', '.join(lost)} that partials.json lists; audit that window's logs again "
                "with --partials-out"
            )
    tables["left_out"]["line"] = tables["left_out"]["line"].astype("Int64")
    return Partials(settings=settings, span=span, **tables)


def read_partials(folders: Iterable[str | Path]) -> Partials:
    """Read the partials :func:`write_partials` saved in each of ``folders`` and merge them."""
    paths = [Path(f) for f in folders]
    seen: dict[Path, Path] = {}
    for folder in paths:
        earlier = seen.setdefault(folder.resolve(), folder)
        if earlier is not folder:  # before: read as a log counted twice, the folder unnamed
            raise ValueError(
                f"--from-partials names the folder {str(folder)!r} twice (as "
                f"{str(earlier)!r}): give each window's partials once"
            )
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        parts = [_read_one(folder, con) for folder in paths]
        return merge_partials(parts, [str(folder) for folder in paths])
    finally:
        con.close()


def options_of(partials: Partials, **levels: float | None) -> AuditOptions:
    """The options a report of (merged) ``partials`` states: their settings, their files, the
    latest start of the runs that computed them, and the report's band and levels
    (``max_disparity``, ``confidence``, ``alpha``)."""
    settings = partials.settings
    window = settings["window"]
    return AuditOptions.from_partials(
        paths=tuple(Path(f) for f in partials.files["file"]),
        by=tuple(settings["by"]),
        since=None if settings["since"] is None else _moment(settings["since"]),
        window=None if window is None else timedelta(seconds=window),
        protected=settings["protected"],
        target_share=settings["target_share"],
        exposure=settings["exposure"],
        **levels,
        now=max(_moment(t) for t in partials.files["audited_at"]),
    )
