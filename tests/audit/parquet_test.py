"""Columnar logs: `fairrag audit --to-parquet` converts a log once; the audit of the Parquet file
(or of a hive-partitioned folder of them) equals the audit of the JSON lines."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from fairrag_audit import audit
from fairrag_audit.lines import MAX_DEPTH, MAX_LINE_BYTES
from fairrag_audit.scan import _type_depth, to_parquet
from fairrag_study.cli import main
from tests.audit.conftest import deployment_records
from tests.audit.logs import record, write_log
from tests.audit.partials_test import OPTIONS, assert_same_table


def test_a_converted_log_audits_as_its_json_lines(tmp_path: Path, capsys) -> None:
    refused = record(["female", "male"], timestamp="2026-12-01T01:00:00Z", exposure_share=2.0)
    log = write_log(
        tmp_path / "fairness.jsonl",
        [*deployment_records(), refused],
        [b'{"torn\n', b"[1, 2]\n"],
    )
    assert main(["audit", str(log), "--out", str(tmp_path / "pq"), "--to-parquet"]) == 0
    assert f"-> {tmp_path / 'pq' / 'fairness.parquet'}: 51 rows" in capsys.readouterr().out
    converted = audit([tmp_path / "pq" / "fairness.parquet"], **OPTIONS)
    original = audit([log], **OPTIONS)
    assert_same_table(converted.metrics, original.metrics)
    assert_same_table(converted.exposure, original.exposure)
    counts = ["lines", "damaged", "not_records", "refused", "records", "used"]
    assert converted.reading[counts].to_dict("records") == original.reading[counts].to_dict(
        "records"
    )
    assert converted.left_out[["line", "kind", "reason"]].equals(
        original.left_out[["line", "kind", "reason"]]
    )
    assert original.left_out["kind"].tolist() == ["refused", "damaged", "not_record"]


def test_a_hive_partitioned_folder_audits_as_its_logs_together(tmp_path: Path) -> None:
    logs = []
    for day in (1, 2):
        log = write_log(
            tmp_path / f"day{day}.jsonl",
            deployment_records(seed=day, day=f"2026-12-0{day}"),
        )
        logs.append(log)
        folder = tmp_path / "logs" / f"day=2026-12-0{day}"
        assert main(["audit", str(log), "--out", str(folder), "--to-parquet"]) == 0
    by_folder = audit([tmp_path / "logs"], **OPTIONS)
    by_files = audit(logs, **OPTIONS)
    assert_same_table(by_folder.metrics, by_files.metrics)
    assert_same_table(by_folder.rankers, by_files.rankers)
    assert int(by_folder.reading["records"].sum()) == int(by_files.reading["records"].sum())


def test_a_folder_mixing_converted_and_typed_parquet_audits_as_its_files(tmp_path: Path) -> None:
    """A folder holding a ``--to-parquet`` file (JSON text columns) beside a typed export of
    another day (DuckDB's ``COPY``: VARCHAR, DOUBLE, lists) stopped the whole audit on DuckDB's
    "failed to cast column ... to JSON", though each file audited alone (a user trial)."""
    logs = []
    for day in (1, 2):
        records = deployment_records(seed=day, day=f"2026-12-0{day}")
        logs.append(write_log(tmp_path / f"day{day}.jsonl", records))
    lake = tmp_path / "lake"
    assert main(["audit", str(logs[0]), "--out", str(lake / "day=1"), "--to-parquet"]) == 0
    typed = lake / "day=2" / "typed.parquet"
    typed.parent.mkdir(parents=True)
    duckdb.execute(
        f"COPY (SELECT * FROM read_json('{logs[1]}', format = 'newline_delimited')) "
        f"TO '{typed}' (FORMAT parquet)"
    )
    # and a file at the folder's top beside the partitions (a review: DuckDB refused the
    # read, "Hive partition mismatch", once typings were told by the files' schemas alone)
    top = lake / "top.parquet"
    (lake / "day=1" / "day1.parquet").rename(top)
    by_folder = audit([lake], **OPTIONS)
    by_files = audit([top, typed], **OPTIONS)
    assert_same_table(by_folder.metrics, by_files.metrics)
    assert_same_table(by_folder.rankers, by_files.rankers)
    assert int(by_folder.reading["records"].sum()) == int(by_files.reading["records"].sum()) > 0


def test_a_folder_whose_typings_interleave_numbers_its_rows_in_name_order(tmp_path: Path):
    """A folder's rows are numbered across its files in name order (docs/SPEC.md), also when
    a typed export sits between two converted days: the third day's left-out row was numbered
    right after the first day's rows (files of one typing were read, and numbered, together)."""
    lake = tmp_path / "lake"
    for day in (1, 3):
        records = [record(["female"], timestamp=f"2026-12-0{day}T00:00:00Z")] * 5
        if day == 3:
            records.append(record(["male"], timestamp="2026-12-03T01:00:00Z", exposure_share=2.0))
        log = write_log(tmp_path / f"day{day}.jsonl", records, [])
        assert main(["audit", str(log), "--out", str(lake / f"day={day}"), "--to-parquet"]) == 0
    typed_log = write_log(
        tmp_path / "day2.jsonl",
        [record(["male"], timestamp="2026-12-02T00:00:00Z")] * 4,
        [],
    )
    typed = lake / "day=2" / "typed.parquet"
    typed.parent.mkdir(parents=True)
    duckdb.execute(
        f"COPY (SELECT * FROM read_json('{typed_log}', format = 'newline_delimited')) "
        f"TO '{typed}' (FORMAT parquet)"
    )
    result = audit([lake], protected="female")
    assert int(result.reading["used"].iloc[0]) == 14
    assert result.left_out[["line", "kind"]].to_dict("records") == [
        {"line": 5 + 4 + 6, "kind": "refused"}
    ]


def test_two_logs_of_one_name_are_refused_before_anything_is_written(tmp_path: Path, capsys):
    """a/fairness.jsonl and b/fairness.jsonl.gz would both become OUT/fairness.parquet: the
    conversion refuses them (exit 2) instead of keeping only the last one."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    first = write_log(tmp_path / "a" / "fairness.jsonl", deployment_records()[:5], [])
    second = write_log(tmp_path / "b" / "fairness.jsonl", deployment_records()[5:10], [])
    out = tmp_path / "pq"
    assert main(["audit", str(first), str(second), "--out", str(out), "--to-parquet"]) == 2
    assert "would both be written to" in capsys.readouterr().err
    assert not out.exists() or not list(out.iterdir())


def test_a_parquet_row_longer_than_the_line_cap_is_left_out_and_the_others_audited(
    tmp_path: Path,
) -> None:
    """The sieve's length cap holds for Parquet rows as for JSON lines: DuckDB writes a file of
    good records plus one whose JSON text passes MAX_LINE_BYTES; the good ones audit as their
    log does, the long one is listed as refused with the reason."""
    log = write_log(tmp_path / "fairness.jsonl", deployment_records(), [])
    good = tmp_path / "good.parquet"
    to_parquet(log, good)
    mixed = tmp_path / "mixed.parquet"
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT * FROM read_parquet('{good}') UNION ALL (SELECT * REPLACE "
            f"(to_json(repeat('x', {MAX_LINE_BYTES})) AS \"source\") FROM read_parquet('{good}') "
            f"LIMIT 1)) TO '{mixed}' (FORMAT parquet)"
        )
    finally:
        con.close()
    result = audit([mixed], **OPTIONS)
    original = audit([log], **OPTIONS)
    assert_same_table(result.metrics, original.metrics)
    assert int(result.reading["refused"].sum()) == 1
    assert int(result.reading["records"].sum()) == int(original.reading["records"].sum())
    (row,) = result.left_out.to_dict("records")
    assert row["kind"] == "refused" and row["line"] == len(deployment_records()) + 1
    assert "bytes of JSON, longer than the 16 MiB cap" in row["reason"]


def test_a_parquet_file_nested_deeper_than_the_cap_is_refused_before_its_rows(
    tmp_path: Path,
) -> None:
    deep = tmp_path / "deep.parquet"
    value = "[" * (MAX_DEPTH + 1) + "1" + "]" * (MAX_DEPTH + 1)
    con = duckdb.connect()
    try:
        con.execute(f"COPY (SELECT {value} AS \"groups\") TO '{deep}' (FORMAT parquet)")
    finally:
        con.close()
    with pytest.raises(ValueError, match=r"column 'groups' is nested deeper than the cap of 64"):
        audit([deep], **OPTIONS)


@pytest.mark.parametrize(
    ("kind", "depth"),
    [
        ("VARCHAR", 0),
        ("JSON", 0),
        ("INTEGER[3]", 1),
        ('STRUCT(a DECIMAL(18,3), "b (c"")" MAP(VARCHAR, INTEGER[][]))[]', 5),
        ("UNION(a INTEGER, b STRUCT(x INTEGER))", 2),
        ("STRUCT(a " * 5000 + "INTEGER" + ")" * 5000, MAX_DEPTH + 1),  # parsing stops past the cap
    ],
)
def test_a_column_type_nests_as_its_lists_structs_maps_and_unions(kind: str, depth: int) -> None:
    assert _type_depth(kind)[0] == depth


def test_an_audit_runs_again_on_a_connection_an_earlier_release_left_a_records_table_in(
    tmp_path: Path,
) -> None:
    """Earlier releases wrote ``records`` as a table; the audit now reads it as a view over
    ``raw_records``: a connection holding the old table is audited as a fresh one is (review of
    issue 37: ``DROP VIEW`` refused the table)."""
    from fairrag_audit.analysis import run_audit
    from fairrag_audit.options import AuditOptions

    log = write_log(tmp_path / "fairness.jsonl", deployment_records(), [])
    options = AuditOptions.create([str(log)], **OPTIONS)
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    try:
        con.execute("CREATE TABLE records AS SELECT 1 AS x")
        again = run_audit(options, con)
        assert con.execute(
            "SELECT count(*) FROM duckdb_views() WHERE view_name = 'records'"
        ).fetchone() == (1,)
    finally:
        con.close()
    assert_same_table(again.metrics, audit([log], **OPTIONS).metrics)


def test_a_hive_key_the_records_hold_never_replaces_their_own_value(tmp_path: Path) -> None:
    """A user trial: a file of four rankers under ``ranker=standard/`` was audited as one
    ranker, ``standard``, and one under ``timestamp=2026-12-01/`` put its three days in one
    window: DuckDB's hive reading put the folder's value in every row. A key the files hold as
    a column is the records' own value; a key they do not hold is still a field (``tenant``,
    read before ``metadata``'s)."""
    records = deployment_records(hours=30, seed=4, day="2026-12-01")[:80]
    for index, item in enumerate(records):
        item["run_id"] = f"run-{index}"
    log = write_log(tmp_path / "log.jsonl", records)
    alone = tmp_path / "alone.parquet"
    to_parquet(log, alone)
    nested = tmp_path / "ranker=standard" / "timestamp=2026-12-01" / "tenant=acme"
    nested.mkdir(parents=True)
    to_parquet(log, nested / "log.parquet")
    options = {"protected": "female", "window": "1h"}
    expected = audit([alone], **options)
    found = audit([tmp_path / "ranker=standard"], **options)
    assert len(set(expected.rankers["ranker"])) > 1
    assert len(set(expected.metrics["window"])) > 1
    for name in ("rankers", "metrics"):
        assert_same_table(getattr(found, name), getattr(expected, name), name)
    by_tenant = audit([tmp_path / "ranker=standard"], **options, by=("tenant",))
    assert set(by_tenant.metrics["tenant"]) == {"acme"}
    # the file given by its own path (a review: DuckDB read its folders' keys there too)
    one = audit([nested / "log.parquet"], **options)
    for name in ("rankers", "metrics"):
        assert_same_table(getattr(one, name), getattr(expected, name), name)


def test_a_hive_folder_with_an_equals_sign_in_its_value_is_named(tmp_path: Path, capsys) -> None:
    """A user trial: ``tenant=a=b/`` beside ``tenant=acme/`` failed the audit with DuckDB's
    "Binder Error: Hive partition mismatch", naming no folder; now the error names it and the
    form accepted (``%3D``, as DuckDB writes it), and ``tenant=a%3Db/`` is read as ``a=b``."""
    for value in ("acme", "a=b"):  # two logs (one log in both would be counted twice)
        log = write_log(tmp_path / f"{value}.jsonl", [record(["female", "male"], ranker=value)] * 3)
        (tmp_path / "logs" / f"tenant={value}").mkdir(parents=True)
        to_parquet(log, tmp_path / "logs" / f"tenant={value}" / "part.parquet")
    code = main(["audit", str(tmp_path / "logs"), "--out", str(tmp_path / "out")])
    assert code == 2 and "the hive folder 'tenant=a=b' holds '='" in capsys.readouterr().err
    (tmp_path / "logs" / "tenant=a=b").rename(tmp_path / "logs" / "tenant=a%3Db")
    result = audit([tmp_path / "logs"], protected="female", by=("tenant",))
    assert set(result.metrics["tenant"]) == {"acme", "a=b"}
    # above the folder given, or a file given by its path, DuckDB reads it: no error (a
    # review found both refused by the first version of this check)
    above = tmp_path / "exp=lr=0.1" / "logs"
    above.mkdir(parents=True)
    to_parquet(log, above / "part.parquet")
    for given in (above, above / "part.parquet"):
        assert len(audit([given], protected="female").rankers) > 0
