"""Reading fairness logs into DuckDB: one compact row per JSON line, streamed, never held as
Python objects.

Each file is scanned once by DuckDB's ``read_json`` (newline-delimited; gzip read the same way,
detected by its magic bytes), each line as one struct of the record fields: a line that is not
JSON (torn write, garbage) becomes a row marked ``damaged``; JSON that is not a record (not an
object, or an object with none of the fields) is marked not ``usable``. Both are counted,
never dropped silently. Blank lines are not records and are not counted. Every field is
optional and read with ``TRY_CAST``: a field of the wrong type counts as missing for that field
only.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb

from .options import AuditOptions

__all__ = ["METRIC_FIELDS", "connect", "load_records"]

METRIC_FIELDS = (
    "generation_parity",
    "grounded_generation_parity",
    "groundedness",
    "fairness_gap",
    "fairness_gap_magnitude",
)
"""Per-record metrics taken from the records as written (docs/SPEC.md "Metrics")."""

MAX_LINE_BYTES = 16 * 2**20
"""Longest line read (a 1 MB answer fits 16 times); a longer one is counted damaged."""


def connect(memory_limit: str = "1GB", threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with bounded memory (it spills to a temporary folder past it)."""
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET memory_limit = '{memory_limit}'")
    # spill files go to the system's temporary folder, not to ./.tmp in the caller's folder
    spill = Path(tempfile.gettempdir()) / "fairrag-audit-duckdb"
    con.execute(f"SET temp_directory = {_literal(str(spill))}")
    con.execute("SET preserve_insertion_order = false")
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    return con


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


KNOWN_FIELDS = (
    "timestamp",
    "source",
    "ranker",
    "trial",
    "retriever_run_id",
    "query_id",
    "groups",
    "k",
    "exposure_model",
    "protected",
    "target",
    "exposure_by_group",
    "exposure_share",
    *METRIC_FIELDS,
    "error",
)
"""The fields read from every record (each as JSON, then cast: a wrong type is missing)."""


def _text(column: str) -> str:
    return f"json_extract_string({column}, '$')"


def _number(column: str) -> str:
    return f"TRY_CAST({column} AS DOUBLE)"


def load_records(con: duckdb.DuckDBPyConnection, options: AuditOptions) -> dict[str, list[int]]:
    """Create the table ``records``: one row per non-blank line of every file.

    Columns: ``file_index``, ``usable`` (the line is a JSON object with at least one of the
    fields read), ``ts`` (UTC), ``source``, ``ranker``, ``by_0 ..`` (each ``--by`` field, top
    level else in ``metadata``), ``groups``, ``weights`` (``v_i`` of the shown list), ``w``
    (``W_t = Σ v_i``), ``protected``, ``target_share``, ``protected_share`` (``ES_protected``),
    ``by_group`` (the record's ``exposure_by_group``), ``logged_share``, the
    :data:`METRIC_FIELDS`, ``has_error``, ``model_ok``.

    One streaming pass per file (each field typed JSON, then cast: a field of the wrong type
    never spoils the rest of its record), into a columnar table; the derived columns are
    computed on that table. Returns ``{"lines": [...], "damaged": [...]}``, one entry per file.
    """
    # metadata (where --by fields may live) is read only when fields are asked for
    extra = [f for f in options.by if f not in KNOWN_FIELDS]
    if options.by and "metadata" not in extra:
        extra.append("metadata")
    # One struct per line: NULL for a line that is not JSON (damaged), all fields NULL for JSON
    # that is not a record (not an object, or none of these fields).
    struct = "STRUCT(" + ", ".join(f"{_quoted(f)} JSON" for f in (*KNOWN_FIELDS, *extra)) + ")"
    # docs/SPEC.md names the source; older records are recognised by their adapter's fields.
    # A record with the study's `trial` is the study's, whatever `source` it copied from the
    # handler record it was built from.
    source = f"""CASE WHEN trial IS NOT NULL THEN 'study' ELSE COALESCE({_text("source")}, CASE
                    WHEN retriever_run_id IS NOT NULL THEN 'langchain'
                    WHEN query_id IS NOT NULL THEN 'llamaindex'
                    ELSE 'unknown' END) END"""
    by_columns = "".join(
        f", {source} AS by_{i}"
        if field == "source"
        else f", COALESCE({_text(_quoted(field))}, "
        f"json_extract_string(metadata, {_literal(f'$.{chr(34)}{field}{chr(34)}')})) AS by_{i}"
        for i, field in enumerate(options.by)
    )
    any_field = " OR ".join(f"{_quoted(f)} IS NOT NULL" for f in (*KNOWN_FIELDS, *extra))
    protected = "NULL" if options.protected is None else _literal(options.protected)
    target = "NULL" if options.target_share is None else repr(float(options.target_share))
    if options.protected is not None and options.target_share is None:
        target = "0.5"  # docs/SPEC.md: the binary target defaults to parity
    metrics = "".join(f", {_number(m)} AS {m}" for m in METRIC_FIELDS)
    default_model = _literal(options.exposure)
    keep = ", ".join(
        ["file_index", "usable", "ts", "source", "ranker"]
        + [f"by_{i}" for i in range(len(options.by))]
        + ["groups", "weights", "w", "protected", "target_share", "by_group", "logged_share"]
        + list(METRIC_FIELDS)
        + ["has_error", "model_ok"]
    )
    counts: dict[str, list[int]] = {"lines": [], "damaged": []}
    con.execute("DROP TABLE IF EXISTS records")
    con.execute("DROP TABLE IF EXISTS raw_records")
    for index, path in enumerate(options.paths):
        common = (
            f"{_literal(str(path))}, format = 'newline_delimited', ignore_errors = true, "
            f"compression = '{'gzip' if _is_gzip(path) else 'none'}', "
            f"maximum_object_size = {MAX_LINE_BYTES}"
        )
        fields = f"""
            SELECT
                {index} AS file_index,
                "__damaged" AS damaged,
                NOT "__damaged" AND ({any_field}) AS usable,
                TRY_CAST({_text('"timestamp"')} AS TIMESTAMPTZ) AS ts,
                {source} AS source,
                {_text("ranker")} AS ranker
                {by_columns},
                TRY_CAST(groups AS VARCHAR[]) AS groups,
                TRY_CAST(k AS INTEGER) AS k,
                COALESCE({_text("exposure_model")}, {default_model}) AS exposure_model,
                COALESCE({_text('"protected"')}, {protected}) AS protected,
                target AS target_json,
                TRY_CAST(exposure_by_group AS MAP(VARCHAR, DOUBLE)) AS by_group,
                {_number("exposure_share")} AS logged_share
                {metrics},
                error IS NOT NULL AND json_type(error) <> 'NULL' AS has_error
            FROM (SELECT r IS NULL AS "__damaged", r.* FROM read_json({common}, records = false,
                columns = {{'r': {_literal(struct)}}}))
        """
        verb = "CREATE TEMP TABLE raw_records AS" if index == 0 else "INSERT INTO raw_records"
        con.execute(f"{verb} {fields}")
    derived = f"""
        SELECT {keep},
            CASE WHEN protected IS NULL OR NOT model_ok THEN NULL
                WHEN by_group IS NOT NULL THEN COALESCE(by_group[protected], 0.0)
                WHEN groups IS NOT NULL AND w > 0 THEN list_sum(list_transform(
                    list_zip(groups, weights),
                    lambda x: CASE WHEN x[1] = protected THEN x[2] ELSE 0.0 END)) / w
                WHEN groups IS NULL THEN logged_share
                END AS protected_share
        FROM (
            SELECT *, CASE
                WHEN weights IS NULL THEN CASE
                    WHEN model_ok AND (by_group IS NOT NULL OR logged_share IS NOT NULL)
                    THEN 1.0 END  -- no list length: such records weigh equally
                WHEN len(weights) = 0 THEN 0.0
                ELSE list_sum(weights) END AS w FROM (
                SELECT *,
                    CASE WHEN model_ok AND COALESCE(len(groups), k) >= 0 THEN list_transform(
                        range(1, COALESCE(len(groups), k) + 1),
                        lambda i: CASE model_name
                            WHEN 'dcg' THEN 1.0 / log2(i + 1)
                            WHEN 'uniform' THEN 1.0
                            ELSE pow(patience, i - 1) END)
                    END AS weights
                FROM (
                    SELECT *,
                        regexp_extract(exposure_model, '^(dcg|uniform|rbp)', 1) AS model_name,
                        COALESCE(TRY_CAST(regexp_extract(
                            exposure_model, '^rbp\\(([0-9.eE+-]+)\\)$', 1) AS DOUBLE), 0.8)
                            AS patience,
                        (exposure_model IN ('dcg', 'uniform', 'rbp') OR (
                            regexp_matches(exposure_model, '^rbp\\([0-9.eE+-]+\\)$')
                            AND TRY_CAST(regexp_extract(
                                exposure_model, '^rbp\\(([0-9.eE+-]+)\\)$', 1) AS DOUBLE)
                                BETWEEN 1e-12 AND 1.0)) AS model_ok,
                        COALESCE(
                            TRY_CAST(json_extract(
                                target_json, '$."' || replace(protected, '"', '') || '"')
                                AS DOUBLE),
                            {target}) AS target_share
                    FROM raw_records
                )
            )
        )
    """
    per_file = {
        index: (int(lines), int(damaged))
        for index, lines, damaged in con.execute(
            "SELECT file_index, count(*), count_if(damaged) FROM raw_records GROUP BY file_index"
        ).fetchall()
    }
    for index in range(len(options.paths)):  # an empty file has no row
        lines, damaged = per_file.get(index, (0, 0))
        counts["lines"].append(lines)
        counts["damaged"].append(damaged)
    # Derived columns are computed on the columnar table, not during the JSON scan: faster.
    con.execute(f"CREATE TEMP TABLE records AS {derived}")
    con.execute("DROP TABLE raw_records")
    return counts
