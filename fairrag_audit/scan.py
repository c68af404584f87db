"""Reading fairness logs into DuckDB: one compact row per JSON line, streamed, never held as
Python objects.

Each file is first sieved (:mod:`fairrag_audit.lines`: a line longer than 16 MiB or nested
deeper than 64 is refused before DuckDB parses it), then scanned once by DuckDB's
``read_json`` (newline-delimited; gzip read the same way, detected by its magic bytes), each
line as one struct of the record fields: a line that is not JSON (torn write, garbage) becomes
a row marked ``damaged``; JSON that is not a record (not an object, or an object with none of
the fields) is marked ``not_record``; a record with a field outside its metric's range or over
a cap, or dated before 1970 (docs/SPEC.md "Auditing logs"), is ``refused`` with the reason, and
one dated after the audit started is ``future``. All are counted and listed by line, never
dropped silently. Blank lines are not records and are not counted. Every field is optional
and read with ``TRY_CAST``: a field of the wrong type counts as missing for that field only (a
metric or count must be a JSON number: ``"0.5"`` or ``true`` is missing).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb

from fairrag_core.attribution import STYLES
from fairrag_core.audit import GENERATION_FIELDS, MAX_RECORDED_LABEL_CHARS, MAX_RECORDED_LIST
from fairrag_core.kit.records import RECORD_SCHEMA
from fairrag_core.target import OTHERS

from .lines import MAX_DEPTH, MAX_LINE_BYTES, REFUSED_FIELD, Sieved, copy_log, sieve
from .options import AuditOptions

__all__ = [
    "ATTRIBUTED_FIELDS",
    "CLOCK_SKEW",
    "COUNT_FIELDS",
    "EARLIEST",
    "KNOWN_STYLES",
    "MAX_ATTRIBUTIONS",
    "MAX_BULLETS",
    "MAX_DEPTH",
    "MAX_GROUPS",
    "MAX_K",
    "MAX_LABEL_CHARS",
    "MAX_LINE_BYTES",
    "MAX_SOURCES_BYTES",
    "MAX_STYLES_BYTES",
    "METRIC_FIELDS",
    "METRIC_RANGES",
    "connect",
    "file_connection",
    "is_parquet",
    "load_records",
    "sql_literal",
    "to_parquet",
]

METRIC_FIELDS = GENERATION_FIELDS
"""Per-record metrics taken from the records as written (docs/SPEC.md "Metrics"): the
generation fields every record with an answer carries (``fairrag_core.audit``, the list the
handlers' summaries read), the paper's then the attributed ones."""

ATTRIBUTED_FIELDS = tuple(name for name in METRIC_FIELDS if name.startswith("attributed_"))
"""The metrics of the attributed source set (docs/SPEC.md "Attribution")."""

METRIC_RANGES = {
    "exposure_share": (0.0, 1.0),
    **{
        name: (-1.0, 1.0) if "fairness_gap" in name else (0.0, 1.0)
        for name in METRIC_FIELDS  # parities and groundedness in [0, 1], gaps in [-1, 1]
    },
}
"""The values each per-record field can take by its definition (docs/SPEC.md "Metrics"): a
record with a value outside (or NaN / infinite written as a number) is refused."""

KNOWN_STYLES = STYLES
"""The citation styles a record may name (``citation_styles``, each attribution's ``style``):
``fairrag_core.attribution.STYLES``; a record naming another is refused."""

COUNT_FIELDS = ("n_attribution_bullets", "n_attributed_bullets")
"""Counts of the attribution (docs/SPEC.md "Attribution"): whole numbers in [0, MAX_BULLETS]."""

MAX_BULLETS = 10_000
"""Most bullets one record's attribution may count (an answer capped by a token limit has
tens)."""

MAX_ATTRIBUTIONS = 10_000
"""Most attributions one record's ``attributed_sources`` may list."""

MAX_STYLES_BYTES = 1024
"""Longest ``citation_styles`` JSON text (the six known names take 80 bytes)."""

MAX_SOURCES_BYTES = 2**20
"""Longest ``attributed_sources`` JSON text, 1 MiB (an attribution takes about 150 bytes)."""

MAX_K = MAX_RECORDED_LIST
"""Longest shown list a record may claim (``k``, ``groups``, ``exposure_by_group``): a
record's work is its list's length, so this bounds it (the record schema's lists hold tens)."""

MAX_GROUPS = MAX_K
"""Most groups one record's ``exposure_by_group`` may name."""

MAX_LABEL_CHARS = MAX_RECORDED_LABEL_CHARS
"""Longest ranker name, group label, protected group or ``--by`` value."""

CLOCK_SKEW = timedelta(minutes=5)
"""A record dated more than this after the audit started is ``future``: refused and counted."""

EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
"""A record dated before this is refused (no log of a RAG system is older; DuckDB reads dates
back to 290,000 BC, which no window label or figure can show)."""

SHARES_SUM_TOLERANCE = 1e-6
"""How far the shares of a record's ``exposure_by_group`` may sum from 1 (rounding)."""


def connect(
    memory_limit: str = "1GB", threads: int | None = None, database: str = ":memory:"
) -> duckdb.DuckDBPyConnection:
    """A DuckDB with bounded memory (it spills to a temporary folder past it): in memory, or
    in ``database``, a file whose tables DuckDB pages in and out within the limit."""
    con = duckdb.connect(database)
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET memory_limit = '{memory_limit}'")
    # spill files go to the system's temporary folder, not to ./.tmp in the caller's folder
    spill = Path(tempfile.gettempdir()) / "fairrag-audit-duckdb"
    con.execute(f"SET temp_directory = {sql_literal(str(spill))}")
    con.execute("SET preserve_insertion_order = false")
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    return con


@contextmanager
def file_connection() -> Iterator[duckdb.DuckDBPyConnection]:
    """:func:`connect` to a DuckDB file in a temporary folder, removed after: its tables are
    paged in and out within the memory limit (an in-memory database's, temporary tables' too,
    stay in memory), so the audit's memory does not grow with the number of records."""
    with tempfile.TemporaryDirectory(prefix="fairrag-audit-db-") as folder:
        con = connect(database=str(Path(folder) / "audit.duckdb"))
        try:
            yield con
        finally:
            con.close()


def _drop(con: Any, name: str) -> None:
    """Drop the audit's own object ``name`` on ``con``, a table or a view (a connection an
    earlier release's audit wrote holds ``records`` as a table; ``DROP VIEW`` refuses a table)."""
    kind = con.execute(
        "SELECT 'TABLE' FROM duckdb_tables() WHERE table_name = ? "
        "AND schema_name = current_schema() UNION ALL SELECT 'VIEW' FROM duckdb_views() "
        "WHERE view_name = ? AND schema_name = current_schema() AND NOT internal",
        [name, name],
    ).fetchone()
    if kind:
        con.execute(f"DROP {kind[0]} {name}")


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> Any:
    """The single value ``sql`` selects."""
    row = con.execute(sql).fetchone()
    assert row is not None
    return row[0]


def sql_literal(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


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
    "follows_citation_format",
    "citation_styles",
    "attributed_sources",
    *COUNT_FIELDS,
    "error",
    "schema",
)
"""The fields read from every record (each as JSON, then cast: a wrong type is missing)."""


def _text(column: str) -> str:
    return f"json_extract_string({column}, '$')"


def _number(column: str) -> str:
    """The JSON value as a number when it is one (``NaN`` and ``1e400`` too); a string,
    boolean, list or object is missing (``"0.5"`` and ``true`` are not read as numbers). The
    type is read from the first character of the JSON text: no parse."""
    return (
        f"CASE WHEN {_first(column)} NOT IN ({_QUOTE}, {_FALSE}, {_TRUE}) "
        f"THEN TRY_CAST({column} AS DOUBLE) END"
    )


_QUOTE, _FALSE, _TRUE, _BRACKET = (ord(c) for c in '"ft[')
"""First characters of a JSON string, false, true and array (DuckDB writes JSON minified)."""


def _first(column: str) -> str:
    """The code of the first character of a JSON value's text (NULL for a missing one)."""
    return f"ascii(CAST({column} AS VARCHAR))"


def _json_text(column: str, chars: int = 40) -> str:
    """The JSON value as written, cut to ``chars`` characters, for a refusal's reason."""
    return f"left(CAST({column} AS VARCHAR), {chars})"


NUMBERED = tuple(dict.fromkeys(("exposure_share", *METRIC_FIELDS, *COUNT_FIELDS)))
"""The fields read as numbers (:func:`_number`): each once per line, into :func:`_n`."""


def _n(name: str) -> str:
    """The column holding field ``name`` read as a number (:func:`_number`), computed once."""
    return _quoted(f"__n_{name}")


NO_RANKER = "(none)"
"""The audit's name for the records without a ranker."""
MISSING_VALUE = "(missing)"
"""The audit's name for the records without a ``--by`` field."""
UNKNOWN_GROUP = "(unknown)"
"""The audit's name for a shown document without a group label (null)."""
RESERVED = ((NO_RANKER, "records without a ranker"), (MISSING_VALUE, "records without the field"))
"""The names a ranker and a ``--by`` value must not have (refused: merged with the records
the audit names so, they would be counted as one; an operator's trial)."""


def _label_columns(by_json: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``(name, JSON column, helper suffix)`` of the fields read as names: ranker, protected
    and each ``--by`` field."""
    fields = [("ranker", "ranker"), ("protected", '"protected"'), *by_json]
    return [(name, column, column.strip('"')) for name, column in fields]


def _parsed_first() -> str:
    """The first layer of values read once from a line's JSON fields (the checks and the
    columns kept read these, never the JSON again): each number (:func:`_n`), the first
    character and length of the attribution's lists, the types and labels of ``groups`` and
    ``exposure_by_group``."""
    columns = [f"{_number(_quoted(name))} AS {_n(name)}" for name in NUMBERED]
    for field, alias in (("citation_styles", "styles"), ("attributed_sources", "sources")):
        columns.append(f"{_first(field)} AS __{alias}_first")
        columns.append(f"strlen(CAST({field} AS VARCHAR)) AS __{alias}_bytes")
    columns += [
        f"{_first('follows_citation_format')} AS __follows_first",
        "json_type(groups) AS __groups_type",
        "TRY_CAST(groups AS VARCHAR[]) AS __groups_list",
        "json_type(exposure_by_group) AS __by_group_type",
        "json_keys(exposure_by_group) AS __by_group_keys",
        "json_type(target) AS __target_type",
    ]
    return ", ".join(columns)


def _parsed_second(by_json: list[tuple[str, str]]) -> str:
    """The second layer (on :func:`_parsed_first`'s): the lists each parsed once, and only
    when within their cap (the checks measure a list by its JSON text's length first, so no
    value costs more than a few times its own size), and the name fields' types and texts."""
    styles_ok = f"__styles_bytes <= {MAX_STYLES_BYTES} AND __styles_first = {_BRACKET}"
    sources_ok = f"__sources_bytes <= {MAX_SOURCES_BYTES} AND __sources_first = {_BRACKET}"
    columns = [
        "CASE WHEN __groups_type = 'ARRAY' THEN json_type(groups, '$[*]') END AS __groups_types",
        f"CASE WHEN {styles_ok} THEN json_type(citation_styles, '$[*]') END AS __styles_types",
        f"CASE WHEN {styles_ok} THEN TRY_CAST(citation_styles AS VARCHAR[]) END AS __styles",
        f"CASE WHEN {sources_ok} THEN json_array_length(attributed_sources) END AS __sources_len",
    ]
    for _, column, suffix in _label_columns(by_json):
        columns.append(f"json_type({column}) AS __type_{suffix}")
        columns.append(f"{_text(column)} AS __text_{suffix}")
    return ", ".join(columns)


def _range_checks(options: AuditOptions, by_json: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(condition, reason)`` pairs, checked in order on a record: the first true condition
    refuses it with its reason (a SQL expression). The conditions read the values parsed
    once (:func:`_parsed_first`, :func:`_parsed_second`); a reason reads the JSON again, only
    for a record refused."""
    checks: list[tuple[str, str]] = []
    # A record schema newer than this library's may define its fields otherwise: refused and
    # listed, never read as the known one (issue 36).
    schema = _number(_quoted("schema"))
    checks.append(
        (
            f"{schema} > {RECORD_SCHEMA}",
            f"'schema ' || {_json_text(_quoted('schema'))} || ' is newer than the record "
            f"schemas this audit knows (1 to {RECORD_SCHEMA}); upgrade fairrag to audit it'",
        )
    )
    # a schema no release wrote (0, -1, 1.5, "2", true) is no schema this audit knows: its
    # fields may mean anything (a user trial found them audited as known)
    checks.append(
        (
            f"{_first(_quoted('schema'))} <> {_NULL} AND ({schema} IS NULL OR NOT ({schema} "
            f"BETWEEN 1 AND {RECORD_SCHEMA} AND {schema} = floor({schema})))",
            f"'schema ' || {_json_text(_quoted('schema'))} || ' is not a record schema (the "
            f"whole numbers 1 to {RECORD_SCHEMA})'",
        )
    )
    k = _number("k")  # "5" and true are a k missing, not 5 and 1
    checks.append(
        (
            f"{k} IS NOT NULL AND NOT ({k} BETWEEN 0 AND {MAX_K} AND {k} = floor({k}))",
            f"'k ' || {_json_text('k')} || ' is not a whole number in [0, {MAX_K:,}]'",
        )
    )
    checks += [
        (
            f"len(__groups_types) > {MAX_K}",
            f"'groups holds ' || len(__groups_types) || ' labels, above the cap of {MAX_K:,}'",
        ),
        (
            "list_bool_or(list_transform(__groups_types, lambda x: x IN ('ARRAY', 'OBJECT')))",
            "'groups holds an array or object where a group label belongs'",
        ),
        (
            f"list_contains(__groups_list, {sql_literal(UNKNOWN_GROUP)})",
            f"'groups holds the label {UNKNOWN_GROUP}, the name the audit gives a document "
            "without a group label (null); rename it to audit that group apart'",
        ),
        (  # the core keys a null label "None" in exposure_by_group, as it keys the label "None"
            "list_contains(__groups_list, 'None') AND "
            "list_bool_or(list_transform(__groups_types, lambda x: x = 'NULL'))",
            "'groups holds both the label None and a null label, which exposure_by_group names "
            "alike'",
        ),
        (
            f"list_max(list_transform(__groups_list, lambda x: length(x))) > {MAX_LABEL_CHARS}",
            f"'a group label in groups is longer than {MAX_LABEL_CHARS} characters'",
        ),
    ]
    checks += _share_checks()
    for name, (low, high) in METRIC_RANGES.items():
        checks.append(
            (
                f"{_n(name)} IS NOT NULL AND NOT ({_n(name)} BETWEEN {low} AND {high})",
                f"'{name} ' || {_json_text(_quoted(name))} || ' is outside [{low:g}, {high:g}]'",
            )
        )
    checks += _attribution_checks()
    checks.append(
        (
            "__target_type = 'OBJECT' AND target_map IS NULL",
            "'target ' || "
            + _json_text("target", 80)
            + " || CASE WHEN len(json_keys(target)) > len(list_distinct(json_keys(target))) "
            "THEN ' names a group more than once' ELSE ' cannot be read as group shares' END",
        )
    )
    checks.append(  # a target of several groups is read group by group: bounded as shares are
        (
            f"__target_type = 'OBJECT' AND cardinality(target_map) > {MAX_GROUPS}",
            f"'target names ' || cardinality(target_map) || ' groups, above the cap of "
            f"{MAX_GROUPS:,}'",
        )
    )
    checks.append(
        (
            "target_value IS NOT NULL AND NOT (target_value BETWEEN 0 AND 1)",
            "'target share ' || CAST(target_value AS VARCHAR) || ' is outside [0, 1]'",
        )
    )
    for name, _, suffix in _label_columns(by_json):
        checks.append(
            (
                f"__type_{suffix} IN ('ARRAY', 'OBJECT')",
                f"'{name} is an array or object, not a name'",
            )
        )
        if name != "protected":  # a ranker or a --by value
            reserved, meaning = RESERVED[0] if name == "ranker" else RESERVED[1]
            checks.append(
                (
                    f"__text_{suffix} = {sql_literal(reserved)}",
                    f"'{name} {reserved} is the name the audit gives {meaning}; rename it to "
                    "audit these records apart'",
                )
            )
        checks.append(
            (
                f"length(__text_{suffix}) > {MAX_LABEL_CHARS}",
                f"'{name} is longer than {MAX_LABEL_CHARS} characters'",
            )
        )
    return checks


def _share_checks() -> list[tuple[str, str]]:
    """The checks of ``exposure_by_group``: at most :data:`MAX_GROUPS` groups of short names,
    each share in [0, 1], the shares summing to 1."""
    shares = "map_values(by_group_raw)"
    return [
        (
            f"__by_group_type = 'OBJECT' AND len(__by_group_keys) > {MAX_GROUPS}",
            "'exposure_by_group names ' || len(__by_group_keys) || ' groups, "
            f"above the cap of {MAX_GROUPS:,}'",
        ),
        (
            f"list_max(list_transform(__by_group_keys, lambda x: length(x))) > {MAX_LABEL_CHARS}",
            f"'a group in exposure_by_group is longer than {MAX_LABEL_CHARS} characters'",
        ),
        (
            f"list_bool_or(list_transform({shares}, "
            "lambda x: x IS NULL OR NOT isfinite(x) OR x < 0 OR x > 1))",
            "'exposure_by_group ' || "
            + _json_text("exposure_by_group", 80)
            + " || ' holds a share that is not a number in [0, 1]'",
        ),
        (
            f"len({shares}) > 0 AND abs(list_sum({shares}) - 1) > {SHARES_SUM_TOLERANCE}",
            "'exposure_by_group shares sum to ' || round(list_sum(" + shares + "), 6) || ', not 1'",
        ),
    ]


def _attribution_checks() -> list[tuple[str, str]]:
    """The checks of the attribution's fields (docs/SPEC.md "Attribution", "Auditing logs"):
    ``citation_styles`` a list of at most one of each known style, ``attributed_sources`` a
    list of at most :data:`MAX_ATTRIBUTIONS` objects of known styles, the counts whole numbers
    in [0, :data:`MAX_BULLETS`], and the counts and metrics consistent with each other.

    The checks run in order, the first that holds refuses the record: each list is first
    measured by its JSON text's length (constant time), and read (once, in
    :func:`_parsed_second`) only when within its cap."""
    known = "[" + ", ".join(sql_literal(style) for style in KNOWN_STYLES) + "]"
    names = ", ".join(KNOWN_STYLES)
    unknown = f"list_filter(__styles, lambda x: NOT list_contains({known}, x))"
    checks = [
        (
            f"__styles_bytes > {MAX_STYLES_BYTES}",
            "'citation_styles is ' || __styles_bytes || ' bytes of "
            f"JSON, above the cap of {MAX_STYLES_BYTES:,}'",
        ),
        (
            f"__styles_first <> {_BRACKET}",
            "'citation_styles ' || " + _json_text("citation_styles") + " || ' is not a list of "
            "style names'",
        ),
        (
            f"len(__styles_types) > {len(KNOWN_STYLES)}",
            "'citation_styles lists ' || len(__styles_types) || ' styles, above "
            f"the {len(KNOWN_STYLES)} known'",
        ),
        (
            "len(list_filter(__styles_types, lambda x: x <> 'VARCHAR')) > 0",
            "'citation_styles ' || " + _json_text("citation_styles", 80) + " || ' holds a value "
            "that is not a style name'",
        ),
        (
            f"len({unknown}) > 0",
            f"'citation_styles names an unknown style: ' || left(array_to_string({unknown}, "
            f"', '), 80) || ' (known: {names})'",
        ),
        (
            "len(list_distinct(__styles)) < len(__styles)",
            "'citation_styles ' || " + _json_text("citation_styles", 80) + " || ' names a style "
            "twice'",
        ),
        (
            f"__sources_bytes > {MAX_SOURCES_BYTES}",
            "'attributed_sources is ' || __sources_bytes || ' bytes "
            f"of JSON, above the cap of {MAX_SOURCES_BYTES:,}'",
        ),
        (
            f"__sources_first <> {_BRACKET}",
            "'attributed_sources ' || " + _json_text("attributed_sources") + " || ' is not a "
            "list of attributions'",
        ),
        (
            f"__sources_len > {MAX_ATTRIBUTIONS}",
            "'attributed_sources lists ' || __sources_len || ' "
            f"attributions, above the cap of {MAX_ATTRIBUTIONS:,}'",
        ),
    ]
    return checks + _count_checks()


def _count_checks() -> list[tuple[str, str]]:
    """The attribution's counts: whole numbers in [0, :data:`MAX_BULLETS`], consistent with
    ``attributed_sources`` and the attributed metrics."""
    checks = []
    for name in COUNT_FIELDS:
        value = _n(name)
        checks.append(
            (
                f"{value} IS NOT NULL AND NOT ({value} BETWEEN 0 AND {MAX_BULLETS} "
                f"AND {value} = floor({value}))",
                f"'{name} ' || {_json_text(name)} || ' is not a whole number in "
                f"[0, {MAX_BULLETS:,}]'",
            )
        )
    bullets, attributed = (_n(name) for name in COUNT_FIELDS)
    grounded = _n("attributed_groundedness")
    parity = _n("attributed_generation_parity")
    counts = f"{_json_text(COUNT_FIELDS[1])} || ' / ' || {_json_text(COUNT_FIELDS[0])}"
    checks += [
        (
            f"{attributed} > {bullets}",
            f"'n_attributed_bullets ' || {_json_text(COUNT_FIELDS[1])} || ' is more than "
            f"n_attribution_bullets ' || {_json_text(COUNT_FIELDS[0])}",
        ),
        (
            f"__sources_len < {attributed}",
            "'attributed_sources lists ' || __sources_len || ' "
            f"attributions, fewer than the ' || {_json_text(COUNT_FIELDS[1])} || ' attributed "
            "bullets'",
        ),
        (
            # docs/SPEC.md: AU counts attributed bullets over all bullets (0 without a bullet)
            f"{grounded} * {bullets} > {attributed} + 1e-6 OR ({bullets} = 0 AND {grounded} > 0)",
            f"'attributed_groundedness ' || {_json_text('attributed_groundedness')} || ' is "
            f"above n_attributed_bullets / n_attribution_bullets (' || {counts} || ')'",
        ),
        (
            f"{parity} IS NOT NULL AND {attributed} = 0",
            f"'attributed_generation_parity ' || {_json_text('attributed_generation_parity')} "
            "|| ' of an answer with no attributed bullet (it is null then)'",
        ),
    ]
    return checks


@dataclass(frozen=True)
class _ScanSql:
    """The SQL pieces of one audit's scan, the same for every file (:func:`_scan_file`)."""

    fields: tuple[str, ...]
    """The fields read from every line (:data:`KNOWN_FIELDS`, ``--by`` fields, ``metadata``
    when a ``--by`` field may be in it, the sieve's :data:`REFUSED_FIELD`)."""
    struct: str
    source: str
    by_raw: str
    by_columns: str
    labels: str
    any_field: str
    protected: str
    target: str
    default_model: str
    metrics: str
    refusal: str

    @classmethod
    def of(cls, options: AuditOptions) -> _ScanSql:
        """The pieces for ``options``."""
        # metadata (where --by fields may live) is read only when fields are asked for
        extra = [f for f in options.by if f not in KNOWN_FIELDS]
        if options.by and "metadata" not in extra:
            extra.append("metadata")
        # One struct per line: NULL for a line that is not JSON (damaged), all fields NULL for
        # JSON that is not a record (not an object, or none of these fields).
        fields = (*KNOWN_FIELDS, *extra, REFUSED_FIELD)
        struct = "STRUCT(" + ", ".join(f"{_quoted(f)} JSON" for f in fields) + ")"
        # docs/SPEC.md names the source; older records are recognised by their adapter's
        # fields. A record with the study's `trial` is the study's, whatever `source` it copied
        # from the handler record it was built from.
        source = f"""CASE WHEN trial IS NOT NULL THEN 'study'
                    ELSE COALESCE({_text("source")}, CASE
                        WHEN retriever_run_id IS NOT NULL THEN 'langchain'
                        WHEN query_id IS NOT NULL THEN 'llamaindex'
                        ELSE 'unknown' END) END"""
        by_json = [
            (f"--by {field}", f"by_json_{i}")
            for i, field in enumerate(options.by)
            if field != "source"
        ]
        by_raw = "".join(
            f", COALESCE({_quoted(field)}, json_extract(metadata, "
            f"{sql_literal(f'$.{chr(34)}{field}{chr(34)}')})) AS by_json_{i}"
            for i, field in enumerate(options.by)
            if field != "source"
        )
        by_columns = "".join(
            f", {source} AS by_{i}" if field == "source" else f", {_by_value(i)} AS by_{i}"
            for i, field in enumerate(options.by)
        )
        any_field = " OR ".join(f"{_quoted(f)} IS NOT NULL" for f in (*KNOWN_FIELDS, *extra))
        protected = "NULL" if options.protected is None else sql_literal(options.protected)
        target = "NULL" if options.target_share is None else repr(float(options.target_share))
        if options.protected is not None and options.target_share is None:
            target = "0.5"  # docs/SPEC.md: the binary target defaults to parity
        if options.protected is not None:  # the flag's share is --protected's group's only:
            # a record protecting another group without a share for it has none (a user trial
            # found male's disparity read against the share given for female)
            target = f"CASE WHEN protected = {protected} THEN {target} END"
        metrics = "".join(f", {_n(m)} AS {m}" for m in METRIC_FIELDS)
        default_model = sql_literal(options.exposure)
        return cls(
            fields=fields,
            struct=struct,
            source=source,
            by_raw=by_raw,
            by_columns=by_columns,
            labels=_parsed_second(by_json),
            any_field=any_field,
            protected=protected,
            target=target,
            default_model=default_model,
            metrics=metrics,
            refusal=_refusal_sql(options, by_json),
        )


def _refusal_sql(options: AuditOptions, by_json: list[tuple[str, str]]) -> str:
    """The reason a record is refused (NULL when kept): the first of :func:`_range_checks`
    that holds, else its timestamp before :data:`EARLIEST` or after the audit started."""
    latest = options.now + CLOCK_SKEW
    return (
        "CASE "
        + " ".join(f"WHEN {when} THEN {reason}" for when, reason in _range_checks(options, by_json))
        + f" WHEN ts < TIMESTAMPTZ {sql_literal(EARLIEST.isoformat())} THEN 'timestamp ' || "
        + _json_text('"timestamp"')
        + f" || ' is before {EARLIEST:%Y-%m-%d}'"
        + f" WHEN ts > TIMESTAMPTZ {sql_literal(latest.isoformat())} THEN 'timestamp ' || "
        + _json_text('"timestamp"')
        + " || ' is after the audit started'"
        + " END"
    )


def load_records(con: duckdb.DuckDBPyConnection, options: AuditOptions) -> dict[str, list[Any]]:
    """Create the view ``records`` (on the table ``raw_records``, written once by the scan):
    one row per non-blank line of every file.

    Columns: ``rid`` (the row's number among all files' rows), ``file_index``, ``line_index`` (the
    row's place among the file's non-blank lines, from 0), ``kind`` (``record``, ``damaged``,
    ``not_record``, ``refused``, ``future``), ``refusal`` (why a row that is not a record was left
    out), ``usable`` (kind is ``record``), ``ts`` (UTC), ``source``, ``ranker``, ``by_0 ..`` (each
    ``--by`` field, top level else in ``metadata``), ``groups``, ``weights`` (``v_i`` of the shown
    list), ``w`` (``W_t = Σ v_i``), ``protected``, ``target_share``, ``protected_share``
    (``ES_protected``), ``by_group`` (the record's ``exposure_by_group``), ``logged_share``, the
    :data:`METRIC_FIELDS`, ``answered`` (the record is of an answer), ``follows`` (its
    ``follows_citation_format``), ``has_attribution`` (it carries the attribution's fields),
    ``styles`` (its ``citation_styles``), ``mistyped`` (bit ``i``: the ``i``-th metric field
    holds a value that is not a number), the :data:`COUNT_FIELDS`, ``has_error``, ``model_ok``.

    Each file is sieved (lines too long or too deep replaced), then read in one streaming pass (each
    field typed JSON and parsed once, :func:`_checked_sql`, then cast: a field of the wrong type
    never spoils the rest of its record) into a columnar table, in file order; the derived columns
    are computed as the view is read (never written). Returns ``{"lines": [...], "damaged": [...],
    "blank_lines": [...]}``, one entry per file (``blank_lines``: :attr:`Sieved.blank_lines`, for
    :func:`line_numbers`).
    """
    scan = _ScanSql.of(options)
    counts: dict[str, list[Any]] = {"lines": [], "damaged": [], "blank_lines": []}
    for name in ("records", "raw_records"):  # a view now, a table in releases before
        _drop(con, name)
    # rows in file order: a row's place is its line's place among the non-blank lines
    con.execute("SET preserve_insertion_order = true")
    first_rows: list[int] = []
    with tempfile.TemporaryDirectory(prefix="fairrag-audit-") as folder:
        for index, path in enumerate(options.paths):
            # each file's first rowid: its rows' line_index without a window over all rows
            # (a window partition holds every column of every row in memory)
            first_rows.append(
                0 if index == 0 else int(_one(con, "SELECT count(*) FROM raw_records"))
            )
            if is_parquet(path):
                counts["blank_lines"].append(())  # a row's number is its line's
                source_sql = _parquet_rows(con, path, scan.fields)
            else:
                sieved = sieve(path, Path(folder))
                counts["blank_lines"].append(sieved.blank_lines)
                source_sql = _json_rows(sieved, scan.struct)
                if sieved.gzip and sieved.path == path:
                    try:
                        _scan_file(con, index, source_sql, scan)
                        continue
                    except duckdb.IOException:
                        # a gzip stream Python reads and DuckDB does not (zero bytes padding
                        # its end): read from the sieve's copy, the same lines (the failed
                        # statement appended none)
                        source_sql = _json_rows(copy_log(path, Path(folder)), scan.struct)
            _scan_file(con, index, source_sql, scan)
    con.execute("SET preserve_insertion_order = false")
    per_file = {
        index: (int(lines), int(damaged))
        for index, lines, damaged in con.execute(
            "SELECT file_index, count(*), count_if(kind = 'damaged') FROM raw_records "
            "GROUP BY file_index"
        ).fetchall()
    }
    for index in range(len(options.paths)):  # an empty file has no row
        lines, damaged = per_file.get(index, (0, 0))
        counts["lines"].append(lines)
        counts["damaged"].append(damaged)
    # The derived columns are a view on the columnar table (computed as read, not written
    # a second time), not computed during the JSON scan: faster.
    con.execute(f"CREATE VIEW records AS {_derived_sql(options, scan, first_rows)}")
    return counts


def _derived_sql(options: AuditOptions, scan: _ScanSql, first_rows: list[int]) -> str:
    """The view ``records`` on ``raw_records``: the columns :func:`load_records` names,
    with the derived ones (exposure weights, ``w``, ``protected_share``, ``line_index``)."""
    keep = ", ".join(
        ["rid", "file_index", "line_index", "kind", "refusal", "kind = 'record' AS usable", "ts"]
        + ["source", "ranker"]
        + [f"by_{i}" for i in range(len(options.by))]
        + ["groups", "weights", "w", "protected", "target_share", "by_group", "logged_share"]
        + ["share_mistyped"]
        + ["several_target", "two_groups"]
        + list(METRIC_FIELDS)
        + ["answered", "follows", "has_attribution", "styles", "mistyped", *COUNT_FIELDS]
        + ["has_error", "model_ok"]
    )
    target = scan.target
    return f"""
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
                    -- k and len(groups) are at most MAX_K in a record kept (refused above)
                    CASE WHEN kind = 'record' AND model_ok
                        AND COALESCE(len(groups), k) BETWEEN 0 AND {MAX_K}
                    THEN list_transform(
                        range(1, COALESCE(len(groups), k) + 1),
                        lambda i: CASE model_name
                            WHEN 'dcg' THEN 1.0 / log2(i + 1)
                            WHEN 'uniform' THEN 1.0
                            WHEN 'fitted' THEN fitted_v[i] * COALESCE(
                                {_factor_of("groups[i]")}, 1.0)
                            ELSE pow(patience, i - 1) END)
                    END AS weights
                FROM ({_fitted_sql("raw_records", target, first_rows)})
            )
        )
    """


def _by_value(index: int) -> str:
    """A ``--by`` field's value as text (SQL): a JSON number holding a whole number as that
    integer (``7.0`` and ``7`` one value, as Python reads them; ``1e20`` and
    ``100000000000000000000`` too, up to 1e38: a user trial found them two groups past 9e15),
    an integer written in digits as its digits (exact, as Python reads it), others as JSON's
    text."""
    text, kind = f"__text_by_json_{index}", f"__type_by_json_{index}"
    whole = f"TRY_CAST({text} AS DOUBLE)"
    return (
        f"CASE WHEN {kind} = 'DOUBLE' AND NOT regexp_full_match({text}, '-?[0-9]+') "
        f"AND {whole} = floor({whole}) AND abs({whole}) <= 1.0e38 "
        f"THEN CAST(CAST({whole} AS HUGEINT) AS VARCHAR) ELSE {text} END"
    )


def _factor_of(label: str) -> str:
    """The factor of the shown ``label`` in a fitted model's ``fitted_map`` (SQL; NULL when it
    has none): the core names a label by ``str`` (``None``, ``True``), the list holds JSON's
    text (null, ``true``)."""
    return (
        f"COALESCE(fitted_map[COALESCE({label}, 'None')], fitted_map[CASE {label} "
        "WHEN 'true' THEN 'True' WHEN 'false' THEN 'False' END])"
    )


MAX_FITTED_CHARS = 512 * 1024
"""Longest fitted model name the audit reads (``fitted(v1,...,vK;g=λ;...)``: 10,000 weights
take about 200 KB); a longer one is a model it cannot read, never parsed."""
MAX_FITTED_GROUPS = 1_000
"""Most group factors of a fitted model the audit reads (a curve is fitted on a handful);
each shown entry looks its group up once (a map), so a record costs its list's length."""


_PROTECTED_KEY = (
    "CASE WHEN __type_protected = 'BOOLEAN' THEN CASE __text_protected WHEN 'true' THEN 'True' "
    "ELSE 'False' END ELSE __text_protected END"
)
"""A record's ``protected`` as its ``target`` and ``exposure_by_group`` key it (the core keys a
label by ``str``: the boolean ``true`` as ``"True"``; :func:`fairrag_core.target.record_key`)."""


def _fitted_sql(table: str, target: str, first_rows: list[int]) -> str:
    """``table``'s rows with the exposure model read: ``model_name`` (``dcg``, ``uniform``,
    ``rbp``, ``fitted``), ``patience``, a fitted model's weights ``fitted_v`` and group factors
    ``fitted_f`` (``{g, f}`` pairs, read from its name ``fitted(v1,...,vK;g1=f1;...)``, the form
    :func:`~fairrag_core.exposure.make_exposure_model` reads), and ``model_ok``: a model the
    audit computes weights for (a fitted one: weights > 0 summing to 1 within 1e-6, at least
    as many as the list shows, factors > 0 for every group it shows, ``None`` for a null
    label, as the core keys them)."""
    rbp = "'^rbp\\(([0-9.eE+-]+)\\)$'"
    return f"""
        SELECT *,
            exposure_model IN ('dcg', 'uniform', 'rbp') OR (
                regexp_matches(exposure_model, {rbp})
                AND TRY_CAST(regexp_extract(exposure_model, {rbp}, 1) AS DOUBLE)
                    BETWEEN 1e-12 AND 1.0)
            OR (model_name = 'fitted' AND len(fitted_v) >= COALESCE(len(groups), k, 0)
                AND list_bool_and(list_transform(fitted_v, lambda v: isfinite(v) AND v > 0))
                AND abs(list_sum(fitted_v) - 1.0) <= 1e-6
                AND COALESCE(list_bool_and(list_transform(
                    fitted_f, lambda f: f.g <> '' AND isfinite(f.f) AND f.f > 0)), true)
                -- a per-group model weighs each entry by its group: the list is needed, and
                -- a factor for each group it shows (its groups named once: the map)
                AND (len(fitted_f) = 0 OR (groups IS NOT NULL AND fitted_map IS NOT NULL
                    AND COALESCE(list_bool_and(list_transform(
                        groups, lambda g: {_factor_of("g")} IS NOT NULL)), true))))
            IS TRUE AS model_ok
        FROM (
            SELECT *,
                CASE WHEN len(list_distinct(list_transform(fitted_f, lambda f: f.g)))
                    = len(fitted_f) THEN map_from_entries(list_transform(
                        fitted_f, lambda f: struct_pack(key := f.g, value := f.f))) END
                    AS fitted_map
            FROM (
            SELECT *,
                CASE WHEN fitted_body IS NOT NULL THEN list_transform(
                    string_split(split_part(fitted_body, ';', 1), ','),
                    lambda v: COALESCE(TRY_CAST(trim(v) AS DOUBLE), 'nan'::DOUBLE)) END
                    AS fitted_v,
                CASE WHEN fitted_body IS NOT NULL THEN list_transform(
                    string_split(fitted_body, ';')[2:],
                    lambda p: {{'g': regexp_extract(p, '^(.*)=[^=]*$', 1),
                        'f': COALESCE(TRY_CAST(regexp_extract(p, '=([^=]*)$', 1) AS DOUBLE),
                            'nan'::DOUBLE)}}) END AS fitted_f
            FROM (
                SELECT *,
                    regexp_extract(exposure_model, '^(dcg|uniform|rbp|fitted)', 1) AS model_name,
                    COALESCE(TRY_CAST(regexp_extract(exposure_model, {rbp}, 1) AS DOUBLE), 0.8)
                        AS patience,
                    -- read only within its bounds: a longer name is a model not read
                    CASE WHEN starts_with(exposure_model, 'fitted(')
                        AND strlen(exposure_model) <= {MAX_FITTED_CHARS}
                        AND strlen(exposure_model) - strlen(replace(exposure_model, ';', ''))
                            <= {MAX_FITTED_GROUPS}
                    THEN regexp_extract(exposure_model, '^fitted\\((.*)\\)$', 1) END
                        AS fitted_body,
                    COALESCE(target_value, {target}) AS target_share,
                    rowid AS rid, rowid - {first_rows}[file_index + 1] AS line_index
                FROM {table}
            )
            )
        )
    """


def is_parquet(path: Path) -> bool:
    """Whether ``path`` is a folder (of Parquet files) or starts with Parquet's magic bytes."""
    if path.is_dir():
        return True
    with open(path, "rb") as handle:
        return handle.read(4) == b"PAR1"


def _json_rows(sieved: Sieved, struct: str) -> str:
    """The rows of a (sieved) JSON-lines file: ``__damaged``, then one JSON column per field
    of ``struct`` (all NULL for a line that is not JSON)."""
    common = (
        f"{sql_literal(str(sieved.path))}, format = 'newline_delimited', ignore_errors = true, "
        f"compression = '{'gzip' if sieved.gzip else 'none'}', "
        # the sieve refused longer lines; the placeholders and the newline fit in the margin
        f"maximum_object_size = {MAX_LINE_BYTES + 4096}"
    )
    return (
        f'SELECT r IS NULL AS "__damaged", r.* FROM read_json({common}, records = false, '
        f"columns = {{'r': {sql_literal(struct)}}})"
    )


_CONTAINERS = ("STRUCT", "MAP", "UNION")


def _type_depth(text: str, at: int = 0, level: int = 0) -> tuple[int, int]:
    """``(nesting depth, end)`` of the DuckDB type written at ``text[at:]`` (as DESCRIBE gives
    it): each STRUCT, MAP, UNION and list (``[]``, ``[N]``) is one level, as a JSON object or
    array is; ``DECIMAL(18,3)`` and the like none. Past :data:`MAX_DEPTH` enclosing members
    (``level``) the rest is not parsed: the depth returned then only passes the cap."""
    if level > MAX_DEPTH:
        return 0, len(text)
    end = at
    while end < len(text) and text[end] not in "([,)":
        end += 1
    depth = 0
    if end < len(text) and text[end] == "(":
        kind = text[at:end].strip().upper()
        end += 1
        if kind not in _CONTAINERS:  # DECIMAL(18,3) and the like
            end = text.index(")", end) + 1
        else:
            while end < len(text) and text[end] != ")":
                while text[end] in " ,":
                    end += 1
                if kind != "MAP":  # a STRUCT's or UNION's member: skip its name
                    if text[end] == '"':  # quoted, "" within
                        end += 1
                        while not (text[end] == '"' and text[end + 1 : end + 2] != '"'):
                            end += 2 if text[end] == '"' else 1
                        end += 1
                    else:
                        end = text.index(" ", end)
                    end += 1
                child, end = _type_depth(text, end, level + 1)
                depth = max(depth, child)
            end += 1
            depth += 1
    while end < len(text) and text[end] == "[":
        end = text.index("]", end) + 1
        depth += 1
    return depth, end


def _parquet_rows(con: duckdb.DuckDBPyConnection, path: Path, fields: Sequence[str]) -> str:
    """The rows of a Parquet file or a folder of them (hive partitions read as fields), as
    :func:`_json_rows` gives them: every field as JSON (``to_json`` of a typed column, so the
    checks are the same), NULL for a field no file has; ``__damaged`` as written by
    :func:`to_parquet` (false when absent). The sieve's caps hold as for JSON lines: a row
    whose fields' JSON text is longer than :data:`MAX_LINE_BYTES` in all is refused (its
    fields NULL, ``__refused`` naming the reason), and a file whose column types nest deeper
    than :data:`MAX_DEPTH` raises ``ValueError`` before a row is read."""
    members = sorted(p for p in path.rglob("*.parquet") if p.is_file()) if path.is_dir() else [path]
    for member in members if path.is_dir() else ():  # DuckDB's hive reading of a folder's
        # files fails the whole read on one such folder under it (above it, or for one file
        # given, DuckDB reads it)
        part = next((p for p in member.relative_to(path).parent.parts if p.count("=") > 1), None)
        if part is not None:
            raise ValueError(
                f"log {str(path)!r}: the hive folder {part!r} holds '=' in its value; a "
                "partition folder is key=value with '=' in the value written %3D (as DuckDB "
                "writes it)"
            )
    # (what reads a file: its typing and hive keys, or the reason it cannot be read) per file
    readers: list[tuple[object, Path]] = []
    for member in members:
        try:
            con.execute(f"SELECT count(*) FROM parquet_metadata({sql_literal(str(member))})")
            readers.append(((), member))
        except duckdb.Error as exc:  # a file cut short (a copy still running): listed, not fatal
            reason = " ".join(str(exc).split())[:200]
            readers.append((f"Parquet file {str(member)!r} cannot be read ({reason})", member))
    readable = [member for reader, member in readers if reader == ()]
    if path.is_dir() and readable:
        # files of one column typing read together (hive partitions as fields); a folder that
        # mixes typings (--to-parquet's JSON text beside a typed export) is read a typing at a
        # time, each column made JSON on its own: one read failed casting text to JSON
        typings = iter(_file_typings(con, readable))
        readers = [
            (
                # hive partition keys too: files under other keys (or none) are read apart
                (_hive_keys(path, member), next(typings)) if reader == () else reader,
                member,
            )
            for reader, member in readers
        ]
    # rows are numbered across the folder's files in name order: consecutive files read alike
    # are one read, and a file that cannot be read is one refused row in its place
    segments: list[tuple[object, list[Path]]] = []
    for reader, member in readers:
        if segments and segments[-1][0] == reader and not isinstance(reader, str):
            segments[-1][1].append(member)
        else:
            segments.append((reader, [member]))
    return " UNION ALL ".join(
        _refused_row(reader, fields)
        if isinstance(reader, str)
        else _rows_of(con, path, _hive_source(con, files), fields)  # a file's own hive folders too
        for reader, files in segments
    )


def _hive_keys(folder: Path, member: Path) -> tuple[str, ...]:
    """The hive partition keys (``key=value`` folders) between ``folder`` and ``member``."""
    return tuple(
        part.split("=", 1)[0] for part in member.relative_to(folder).parent.parts if "=" in part
    )


def _hive_source(con: duckdb.DuckDBPyConnection, members: Sequence[Path]) -> str:
    """``read_parquet`` of ``members`` (files of one typing under the same hive keys) with
    their hive partitions read as fields, except a key the files hold as a column: there the
    record's own value is read (DuckDB's hive reading puts the folder's value in every row: a
    user trial found every record of ``ranker=standard/`` audited as ``standard``, and
    ``timestamp=2026-12-01/`` putting three days in one window). A key the files do not hold
    (``COPY ... PARTITION_BY``'s layout) is the field, as DuckDB reads it."""
    # DuckDB reads a key=value folder anywhere in the path, the folder given and above too
    keys = tuple(part.split("=", 1)[0] for part in members[0].parent.parts if "=" in part)
    if not keys:
        return _hive(*members, union=True)
    files = "[" + ", ".join(sql_literal(str(member)) for member in members) + "]"
    plain = f"read_parquet({files}, hive_partitioning = false, union_by_name = true)"
    columns = {name for name, _ in _typing(con, plain)}
    if not any(key in columns for key in keys):
        return _hive(*members, union=True)
    separator = r"[/\\]"  # a path separator, either
    patterns = {
        key: "^.*" + separator + re.escape(key) + r"=([^/\\]*)" + separator  # the last one
        for key in dict.fromkeys(keys)
        if key not in columns
    }
    added = [
        f"url_decode(regexp_extract({_FILE_COLUMN}, {sql_literal(pattern)}, 1)) AS {_quoted(key)}"
        for key, pattern in patterns.items()
    ]
    read = (
        f"read_parquet({files}, hive_partitioning = false, union_by_name = true, "
        f"filename = {sql_literal(_FILE_COLUMN)})"
    )
    return f"(SELECT {', '.join(['*', *added])} FROM {read})"


_FILE_COLUMN = "__fairrag_file"
"""The column a Parquet read names each row's file in (:func:`_hive_source`)."""


def _refused_row(reason: str, fields: Sequence[str]) -> str:
    """One row refused for ``reason``, every field NULL (a Parquet file that cannot be read)."""
    return (
        'SELECT false AS "__damaged", '
        + ", ".join(f"NULL::JSON AS {_quoted(f)}" for f in fields if f != REFUSED_FIELD)
        + f", to_json({sql_literal(reason)}) AS {_quoted(REFUSED_FIELD)}"
    )


def _hive(*members: Path, union: bool = False) -> str:
    """``read_parquet`` of ``members`` with their hive partitions read as fields."""
    files = "[" + ", ".join(sql_literal(str(member)) for member in members) + "]"
    return f"read_parquet({files}, hive_partitioning = true{', union_by_name = true' * union})"


def _file_typings(con: duckdb.DuckDBPyConnection, members: Sequence[Path]) -> list[object]:
    """Each Parquet file's column typing, read from the files' schemas in one query (a
    ``DESCRIBE`` per file cost 20% more on a folder of 2,000 files)."""
    listed = "[" + ", ".join(sql_literal(str(member)) for member in members) + "]"
    schema: dict[str, list[tuple[str, ...]]] = {str(member): [] for member in members}
    for file, *column in con.execute(
        "SELECT file_name, name, type, converted_type, CAST(logical_type AS VARCHAR), "
        f"repetition_type, num_children FROM parquet_schema({listed})"
    ).fetchall():
        schema[str(file)].append(tuple(str(part) for part in column))
    return [tuple(schema[str(member)]) for member in members]


def _typing(con: duckdb.DuckDBPyConnection, source: str) -> frozenset[tuple[str, str]]:
    """The columns of ``source`` with their types."""
    described = con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
    return frozenset((str(name), str(kind)) for name, kind, *_ in described)


def _rows_of(con: duckdb.DuckDBPyConnection, path: Path, source: str, fields: Sequence[str]) -> str:
    """:func:`_parquet_rows` of one ``source`` (a file, or files of one typing) of ``path``."""
    types = dict(_typing(con, source))
    for name, kind in types.items():
        depth = _type_depth(kind)[0]
        if depth > MAX_DEPTH:
            raise ValueError(
                f"log {str(path)!r}: column {name!r} is nested deeper than the cap of "
                f"{MAX_DEPTH} (lists, structs, maps); the audit reads no row of it"
            )
    present = [f for f in fields if f in types and f != REFUSED_FIELD]
    texts = [f"CAST(to_json({_quoted(f)}) AS VARCHAR) AS {_quoted(f)}" for f in present]
    size = " + ".join(["0", *(f"COALESCE(strlen({_quoted(f)}), 0)" for f in present)])
    damaged = 'COALESCE("__damaged", false)' if "__damaged" in types else "false"
    refused = (
        f"CAST(to_json({_quoted(REFUSED_FIELD)}) AS VARCHAR)"
        if REFUSED_FIELD in types
        else "NULL::VARCHAR"
    )
    columns = [
        f"CASE WHEN __size <= {MAX_LINE_BYTES} THEN CAST({_quoted(f)} AS JSON) END AS {_quoted(f)}"
        if f in present
        else f"NULL::JSON AS {_quoted(f)}"
        for f in fields
        if f != REFUSED_FIELD
    ]
    columns.append(
        f"CASE WHEN __size > {MAX_LINE_BYTES} THEN to_json('row of ' || format('{{:,}}', "
        f"__size) || ' bytes of JSON, longer than the {MAX_LINE_BYTES // 2**20} MiB cap') "
        f"ELSE CAST(__refused_text AS JSON) END AS {_quoted(REFUSED_FIELD)}"
    )
    inner = ", ".join([f"{damaged} AS __damaged_flag", *texts, f"{refused} AS __refused_text"])
    return (
        f'SELECT __damaged_flag AS "__damaged", {", ".join(columns)} FROM ('
        f"SELECT *, {size} AS __size FROM (SELECT {inner} FROM {source}))"
    )


def to_parquet(source: Path, target: Path, fields: Sequence[str] = ("metadata", "run_id")) -> int:
    """Convert a JSON-lines log (plain or gzip) to Parquet once, with the record schema: one
    column per record field (:data:`KNOWN_FIELDS` and ``fields``), each kept as the JSON the
    line held, so an audit of the Parquet file checks and counts exactly what it would in the
    log (damaged lines kept as rows marked ``__damaged``, refused ones as the sieve's
    placeholder; ``run_id`` kept by default, with ``timestamp`` what tells the log from another:
    :func:`fairrag_audit.partials.log_fingerprint`). Returns the rows written."""
    names = (*dict.fromkeys([*KNOWN_FIELDS, *fields]), REFUSED_FIELD)  # each field once
    struct = "STRUCT(" + ", ".join(f"{_quoted(f)} JSON" for f in names) + ")"
    con = connect()
    try:
        with tempfile.TemporaryDirectory(prefix="fairrag-audit-") as folder:
            sieved = sieve(source, Path(folder))
            con.execute("SET preserve_insertion_order = true")  # rows in line order
            copy = f"TO {sql_literal(str(target))} (FORMAT parquet, COMPRESSION zstd)"
            try:
                con.execute(f"COPY ({_json_rows(sieved, struct)}) {copy}")
            except duckdb.IOException:
                if not (sieved.gzip and sieved.path == source):
                    raise
                # a gzip stream DuckDB does not read (zero bytes after its end): the copy
                con.execute(f"COPY ({_json_rows(copy_log(source, Path(folder)), struct)}) {copy}")
        return int(
            con.execute(
                f"SELECT count(*) FROM read_parquet({sql_literal(str(target))})"
            ).fetchone()[0]  # type: ignore[index]
        )
    finally:
        con.close()


_BY_GROUP = """map_from_entries(list_transform(
    list_filter(map_entries(TRY_CAST(exposure_by_group AS MAP(VARCHAR, JSON))),
        lambda e: e.value IS NOT NULL),
    lambda e: struct_pack(key := e.key, value := CASE
        WHEN json_type(e.value) IN ('DOUBLE', 'BIGINT', 'UBIGINT') THEN e.value::DOUBLE END)))"""
"""``exposure_by_group``'s shares by group: a JSON number is a share; a string (``"0.9"``), a
boolean or a list is none (NULL: the record is refused, its share not a number in [0, 1]); a
``null`` share is no entry (a typed Parquet export writes every group of the log in every
record, ``null`` where the record has none). Before, a cast read ``"0.9"`` as 0.9 and ``true``
as 1 (a user trial)."""


def _checked_sql(rows: str, scan: _ScanSql) -> str:
    """The ``rows`` of one file with each field parsed once, in layers (a layer's columns are
    computed once per row and read by the next: the checks and the columns kept read these
    values), and the checks' verdict: ``sieve_reason``, ``is_record``, ``refusal``."""
    share = f"target_map[COALESCE({_PROTECTED_KEY}, {scan.protected})]"
    raw = f"""
        SELECT *, CASE WHEN json_type({share}) IN ('DOUBLE', 'BIGINT', 'UBIGINT')
                THEN TRY_CAST({share} AS DOUBLE) END AS target_value  -- JSON numbers only
        FROM (SELECT *, {scan.labels} FROM (
            SELECT *, TRY_CAST({_text('"timestamp"')} AS TIMESTAMPTZ) AS ts,
            -- the target's shares by group label, read as keys: a label is never part of a
            -- JSON path (any character, quotes and backslashes too, finds its own share)
            TRY_CAST(target AS MAP(VARCHAR, JSON)) AS target_map,
            {_BY_GROUP} AS by_group_raw,
            {_parsed_first()}
            {scan.by_raw}
        FROM ({rows})))
    """
    return f"""
        SELECT *, json_extract_string({_quoted(REFUSED_FIELD)}, '$') AS sieve_reason,
            NOT "__damaged" AND ({scan.any_field}) AS is_record, {scan.refusal} AS refusal
        FROM ({raw})
    """


_NULL = ord("n")
"""First character of JSON's null."""


def _mistyped_sql() -> str:
    """Bit ``i`` set when :data:`METRIC_FIELDS`'s ``i``-th field holds a value that is not a
    JSON number (a string such as ``"0.5"``, a boolean, a list: read as missing), so the report
    says why that metric has no value instead of the reason a missing one has."""
    bits = [
        f"CASE WHEN {_first(_quoted(m))} <> {_NULL} AND {_n(m)} IS NULL THEN {1 << i} ELSE 0 END"
        for i, m in enumerate(METRIC_FIELDS)
    ]
    return "(" + " + ".join(bits) + ")"


def _scan_file(con: duckdb.DuckDBPyConnection, index: int, rows: str, scan: _ScanSql) -> None:
    """Append the ``rows`` of one file (:func:`_json_rows`, :func:`_parquet_rows`) to
    ``raw_records``, in file order."""
    select = f"""
        SELECT
            {index} AS file_index,
            CASE
                WHEN "__damaged" THEN 'damaged'
                WHEN sieve_reason IS NOT NULL THEN 'refused'
                WHEN NOT is_record THEN 'not_record'
                WHEN refusal IS NULL THEN 'record'
                WHEN starts_with(refusal, 'timestamp ')
                    AND ends_with(refusal, ' is after the audit started') THEN 'future'
                ELSE 'refused' END AS kind,
            CASE
                WHEN "__damaged" THEN 'not JSON (a torn write or garbage)'
                WHEN sieve_reason IS NOT NULL THEN sieve_reason
                WHEN NOT is_record THEN 'JSON but not a record (not an object, or none of the '
                    || 'record fields)'
                ELSE refusal END AS refusal,
            ts,
            {scan.source} AS source,
            __text_ranker AS ranker
            {scan.by_columns},
            __groups_list AS groups,
            TRY_CAST({_number("k")} AS INTEGER) AS k,
            COALESCE({_text("exposure_model")}, {scan.default_model}) AS exposure_model,
            COALESCE({_PROTECTED_KEY}, {scan.protected}) AS protected,
            target_value,
            -- a target naming two groups or more (as the core: every record's disparity is
            -- half the L1 distance over its buckets): each share, a JSON number (else NULL)
            CASE WHEN len(list_filter(map_keys(target_map), lambda key: key <> '{OTHERS}')) >= 2
            THEN map_from_entries(list_transform(
                map_entries(target_map), lambda e: struct_pack(key := e.key, value := CASE
                    WHEN json_type(e.value) IN ('DOUBLE', 'BIGINT', 'UBIGINT')
                    THEN e.value::DOUBLE END))) END AS several_target,
            -- two groups and an OTHERS bucket owed nothing (the core writes a target of two
            -- groups so): its stream is the protected group's deviation, as amortized
            len(list_filter(map_entries(target_map), lambda e: e.key <> '{OTHERS}'
                OR TRY_CAST(e.value AS DOUBLE) > 0)) <= 2 AS two_groups,
            by_group_raw AS by_group,
            {_n("exposure_share")} AS logged_share,
            -- given, but not as a JSON number: the report says so when the share is read from it
            COALESCE({_first(_quoted("exposure_share"))} <> {_NULL}
                AND {_n("exposure_share")} IS NULL, false) AS share_mistyped
            {scan.metrics},
            -- what the answer cited (docs/SPEC.md "Attribution"): every record of an answer
            -- says whether it followed the paper's format; the attribution's fields are in
            -- records written since it was (schema 2 onward)
            COALESCE(__follows_first IN ({_FALSE}, {_TRUE}), false)
                OR COALESCE(__styles_first = {_BRACKET}, false)
                {"".join(f" OR {_n(m)} IS NOT NULL" for m in METRIC_FIELDS)} AS answered,
            CASE WHEN __follows_first IN ({_FALSE}, {_TRUE})
                THEN __follows_first = {_TRUE} END AS follows,
            COALESCE(__styles_first = {_BRACKET}, false)
                OR {_n("n_attribution_bullets")} IS NOT NULL AS has_attribution,
            -- a record kept passed the styles' checks: __styles holds them
            CASE WHEN refusal IS NULL AND __styles_first = {_BRACKET} THEN __styles END AS styles,
            TRY_CAST({_n("n_attribution_bullets")} AS INTEGER) AS n_attribution_bullets,
            TRY_CAST({_n("n_attributed_bullets")} AS INTEGER) AS n_attributed_bullets,
            error IS NOT NULL AND json_type(error) <> 'NULL' AS has_error,
            {_mistyped_sql()} AS mistyped
        FROM ({_checked_sql(rows, scan)})
    """
    verb = "CREATE TABLE raw_records AS" if index == 0 else "INSERT INTO raw_records"
    con.execute(f"{verb} {select}")
