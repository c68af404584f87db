"""Cases an operator's trial of `fairrag audit` found, each counted twice, refused wrongly,
read wrongly or crashed before: one log counted once however it is named or stored (a log is
told by its first record, in JSON lines, gzip and Parquet: docs/SPEC.md "Partial
aggregates"); logs that cannot be read whole say so, naming the file; a share is read only
from a JSON number; windows line up from run to run."""

from __future__ import annotations

import bz2
import gzip
import lzma
import math
import shutil
from pathlib import Path

import duckdb
import pytest

from fairrag_audit import audit
from fairrag_audit.partials import EMPTY, FINGERPRINT_FORM, log_fingerprint, read_partials
from fairrag_study.cli import main
from tests.audit.analysis_test import metric
from tests.audit.conftest import deployment_records
from tests.audit.logs import record, write_log
from tests.audit.partials_test import OPTIONS, saved


def _records(day: int, n: int = 30) -> list[dict[str, object]]:
    records = deployment_records(hours=2, seed=day, day=f"2026-12-0{day}")[:n]
    for index, item in enumerate(records):
        item["run_id"] = f"run-{day}-{index}"
    return records


def _told_as_one_log(one: Path, other: Path, partials: Path) -> None:
    """Refused as one log counted twice: in one audit, and when their partials merge."""
    with pytest.raises(ValueError, match="holds the same log as"):
        audit([one, other], **OPTIONS)
    pair = saved([one, other], [[one], [other]], partials, **OPTIONS)
    with pytest.raises(ValueError, match="more than once"):
        read_partials(pair)


def _gzip(source: Path, target: Path) -> Path:
    target.write_bytes(gzip.compress(source.read_bytes()))
    return target


def test_a_log_its_gzip_rotation_and_its_parquet_conversion_are_one_log(tmp_path: Path):
    log = write_log(tmp_path / "a.jsonl", _records(1))
    rotated = _gzip(log, tmp_path / "a.jsonl.1.gz")
    assert main(["audit", str(log), "--out", str(tmp_path / "pq"), "--to-parquet"]) == 0
    converted = tmp_path / "pq" / "a.parquet"
    assert log_fingerprint(log) == log_fingerprint(rotated) == log_fingerprint(converted)
    for twin in (rotated, converted, Path(str(log).replace("/a.jsonl", "/./a.jsonl"))):
        with pytest.raises(ValueError, match="holds the same log as"):
            audit([log, twin], **OPTIONS)  # one shot: refused before any is read
        pair = saved([log, twin], [[log], [twin]], tmp_path / f"p-{twin.name}", **OPTIONS)
        with pytest.raises(ValueError, match=r"more than once \(the same first record"):
            read_partials(pair)
    other = write_log(tmp_path / "b.jsonl", _records(2))
    assert len(audit([log, other], **OPTIONS).reading) == 2  # different logs: both read


@pytest.mark.parametrize(
    "first",
    [
        {"run_id": None},  # a Haystack record: no run id, a timestamp
        {"run_id": None, "timestamp": None},  # schema 1: neither
        {"run_id": None, "query": "q" * 80_000},  # a first record past 64 KiB
        {"run_id": None, "metadata": {"tenant": "a\udcff"}},  # a lone surrogate, escaped
    ],
    ids=["no run id", "no run id nor timestamp", "first record of 80 kB", "lone surrogate"],
)
def test_a_log_without_a_run_id_and_its_parquet_conversion_are_one_log(tmp_path: Path, first):
    """An operator's trial: told by the first line's bytes in JSON lines and by its first row
    with both fields (or the row's JSON) in Parquet, a log and its ``--to-parquet``
    conversion were two logs, counted twice (400 records of 200)."""
    records = _records(1, 10)
    records[0].update(first)
    log = write_log(tmp_path / "a.jsonl", records)
    assert main(["audit", str(log), "--out", str(tmp_path / "pq"), "--to-parquet"]) == 0
    converted = tmp_path / "pq" / "a.parquet"
    assert log_fingerprint(log) == log_fingerprint(converted) != EMPTY
    _told_as_one_log(log, converted, tmp_path / "p")


@pytest.mark.parametrize("run_id", [True, False], ids=["with run id", "no run id"])
def test_a_typed_parquet_export_of_a_log_is_the_same_log(tmp_path: Path, run_id: bool):
    """An operator's trial: a log exported to Parquet by DuckDB itself (timestamps typed,
    written back as ``2026-12-01 00:00:00+00``, not ``2026-12-01T00:00:00Z``) was told by its
    first record's timestamp as written, so another log: audited with the JSON lines, every
    ranker's n doubled, and the partials merged. A log's fingerprint reads the timestamp as the
    instant it names."""
    records = _records(1, 10)
    if not run_id:
        for item in records:
            item["run_id"] = None
    log = write_log(tmp_path / "a.jsonl", records)
    typed = tmp_path / "typed.parquet"
    duckdb.sql(
        f"COPY (SELECT * REPLACE (CAST(timestamp AS TIMESTAMPTZ) AS timestamp) FROM "
        f"read_json('{log}', format = 'newline_delimited')) TO '{typed}' (FORMAT parquet)"
    )
    [(written,)] = duckdb.sql(
        f"SELECT CAST(to_json(timestamp) AS VARCHAR) FROM '{typed}' LIMIT 1"
    ).fetchall()
    assert "T" not in written  # typed: not the text the JSON line holds
    assert log_fingerprint(log) == log_fingerprint(typed) != EMPTY
    _told_as_one_log(log, typed, tmp_path / "p")


def test_a_first_timestamp_is_read_as_the_instant_it_names(tmp_path: Path):
    """One instant written in any offset, or without one (UTC, as the audit reads it), tells
    one log; another instant, another log."""
    fingerprints = []
    for index, stamp in enumerate(
        [
            "2026-12-01T00:00:00Z",
            "2026-12-01T01:00:00+01:00",
            "2026-12-01 00:00:00",
            "2026-11-30T24:00:00Z",  # as the audit's scan reads them (a review)
            "2026-12-01 00:00:00 UTC",
            "x",
            "y",
        ]
    ):
        records = _records(1, 3)
        records[0]["timestamp"] = stamp
        fingerprints.append(log_fingerprint(write_log(tmp_path / f"{index}.jsonl", records)))
    assert len(set(fingerprints[:5])) == 1
    assert len({fingerprints[0], fingerprints[5], fingerprints[6]}) == 3
    assert all(f.startswith(FINGERPRINT_FORM) for f in fingerprints)


def test_a_parquet_file_cut_short_leaves_its_folders_other_files_told_as_before(tmp_path: Path):
    """An operator's trial: one file of a folder DuckDB could not read (a copy still
    running) made every file's fingerprint fall back to its first row's JSON, so the folder
    audited before and again was two logs (4,000 records of 2,000), and the folder and one of
    its files were not seen to overlap."""
    folder = tmp_path / "hive"
    folder.mkdir()
    for day in (1, 2):
        log = write_log(tmp_path / f"d{day}.jsonl", _records(day))
        assert main(["audit", str(log), "--out", str(folder), "--to-parquet"]) == 0
    before = log_fingerprint(folder)
    whole = (folder / "d2.parquet").read_bytes()
    (folder / "d3.parquet").write_bytes(whole[: len(whole) * 2 // 5])  # cut: no footer
    after = log_fingerprint(folder)
    assert after.split(";")[:2] == before.split(";")
    assert after.split(";")[2] == EMPTY
    with pytest.raises(ValueError, match="holds the same log as"):
        audit([folder, folder / "d1.parquet"], **OPTIONS)


def test_a_folder_of_parquet_files_and_one_of_its_files_overlap(tmp_path: Path):
    logs = [write_log(tmp_path / f"d{day}.jsonl", _records(day)) for day in (1, 2)]
    folder = tmp_path / "hive"
    for log in logs:
        assert main(["audit", str(log), "--out", str(folder), "--to-parquet"]) == 0
    _told_as_one_log(folder, folder / "d2.parquet", tmp_path / "p")


def test_different_logs_that_start_alike_are_two_logs(tmp_path: Path):
    """Parquet files of equal row counts began with the same bytes, and JSON-lines logs with
    the same blank or torn first line had one fingerprint: refused as one log counted twice."""
    first = write_log(tmp_path / "x.jsonl", _records(1, 20))
    second = write_log(tmp_path / "y.jsonl", _records(2, 20))
    for log in (first, second):
        assert main(["audit", str(log), "--out", str(tmp_path / "pq"), "--to-parquet"]) == 0
    parquets = [tmp_path / "pq" / "x.parquet", tmp_path / "pq" / "y.parquet"]
    assert log_fingerprint(parquets[0]) != log_fingerprint(parquets[1])
    torn = []
    for name, day in (("t1", 3), ("t2", 4)):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b"\n" + b'{"torn\n' + b"".join(_line(r) for r in _records(day, 5)))
        torn.append(path)
    assert log_fingerprint(torn[0]) != log_fingerprint(torn[1])
    assert len(audit([*parquets, *torn], **OPTIONS).reading) == 4
    # records without a run id are told by their first record's fields (the record schema's)
    plain = [
        write_log(tmp_path / f"plain{i}.jsonl", [record(["female"], ranker=f"r{i}")])
        for i in (1, 2)
    ]
    assert log_fingerprint(plain[0]) != log_fingerprint(plain[1])
    assert log_fingerprint(write_log(tmp_path / "empty.jsonl", [])) == EMPTY


def _line(item: dict[str, object]) -> bytes:
    from fairrag_core.jsonl import to_json_line

    return to_json_line(item)


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_gzip_log_cut_short_or_corrupt_is_read_to_the_break_and_the_break_listed(
    tmp_path: Path, damage: str
):
    """It raised EOFError from the sieve (a traceback, no report) or "CRC check failed",
    naming no file; a rotation copied while written is an everyday case."""
    good = write_log(tmp_path / "good.jsonl", _records(1))
    whole = gzip.compress(b"".join(_line(r) for r in _records(2)))
    broken = tmp_path / f"{damage}.jsonl.gz"
    if damage == "truncated":
        broken.write_bytes(whole[: len(whole) * 2 // 3])
    else:  # the stream whole, its CRC wrong
        broken.write_bytes(whole[:-8] + bytes(8))
    result = audit([good, broken], **OPTIONS)
    row = result.reading.set_index("file").loc[str(broken)]
    assert row["refused"] == 1 and 0 <= row["records"] <= len(_records(2))
    listed = result.left_out[result.left_out["file"] == str(broken)]
    assert listed["reason"].str.contains("gzip stream cut short or corrupt").tolist() == [True]
    assert listed["line"].tolist() == [row["records"] + 1]
    alone = audit([good], **OPTIONS).reading["records"].tolist()
    assert result.reading.set_index("file").loc[str(good), "records"] == alone[0] > 0


@pytest.mark.parametrize(("compress", "name"), [(bz2.compress, "bzip2"), (lzma.compress, "xz")])
def test_a_log_in_a_compression_the_audit_does_not_read_is_refused_by_name(
    tmp_path: Path, compress, name: str, capsys
):
    """Its lines were counted as torn writes and its records silently left unaudited."""
    log = write_log(tmp_path / "a.jsonl", _records(1))
    packed = tmp_path / "a.jsonl.packed"
    packed.write_bytes(compress(log.read_bytes()))
    assert main(["audit", str(log), str(packed), "--out", str(tmp_path / "out")]) == 2
    assert f"{packed}' is {name}-compressed" in capsys.readouterr().err


def test_a_conversion_never_overwrites_an_earlier_one(tmp_path: Path, capsys):
    """Each day's fairness.jsonl converted into one folder replaced the day before's."""
    out = tmp_path / "parquet"
    for day in (1, 2):
        folder = tmp_path / f"day{day}"
        folder.mkdir()
        log = write_log(folder / "fairness.jsonl", _records(day))
        code = main(["audit", str(log), "--out", str(out), "--to-parquet"])
        assert code == (0 if day == 1 else 2)
    assert "exists (an earlier conversion" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "day1")
    assert len(audit([out], **OPTIONS).reading) == 1


def test_a_target_share_written_as_text_is_no_target_share(tmp_path: Path):
    """``{"female": "0.3"}`` was read as the number 0.3 (a disparity against it), though a
    metric or a share is read only from a JSON number (docs/SPEC.md, "Auditing logs")."""
    rows = [record(["female", "male", "male"], ranker="amortized", tenant="t")] * 4
    numbers = [{**r, "target": {"female": 0.3, "OTHERS": 0.7}} for r in rows]
    texts = [{**r, "target": {"female": "0.3", "OTHERS": "0.7"}} for r in rows]

    def disparity(records: list[dict[str, object]], name: str) -> float:
        result = audit([write_log(tmp_path / name, records)], protected="female")
        table = result.rankers.set_index("metric")
        return float(table.loc["exposure_disparity", "value"])

    assert disparity(texts, "texts.jsonl") == pytest.approx(disparity(rows, "none.jsonl"))
    assert disparity(texts, "texts2.jsonl") != pytest.approx(disparity(numbers, "numbers.jsonl"))


def test_a_share_or_k_written_as_text_or_true_is_not_read_as_a_number(tmp_path: Path):
    """A user trial: ``exposure_by_group`` ``{"female": "0.9"}`` on a list of men was read as
    the share 0.9 and ``true`` as 1; ``"k": "5"`` weighed its record as five positions. A share
    that is no JSON number refuses its record (a share not a number in [0, 1]); a ``k`` that is
    none is a k missing (docs/SPEC.md, "Auditing logs")."""
    men = record(["male", "male"])
    texts = [
        {**men, "exposure_by_group": {"female": "0.9", "male": 0.1}},
        {**men, "exposure_by_group": {"female": True, "male": 0}},
    ]
    result = audit([write_log(tmp_path / "shares.jsonl", [men, *texts])], protected="female")
    reasons = result.left_out["reason"].tolist()
    assert len(reasons) == 2 and all("holds a share that is not a number" in r for r in reasons)
    assert metric(result.rankers, "exposure_share")["value"] == 0.0
    women = record(["female", "male", "male", "male", "male"])
    without_k = {key: value for key, value in women.items() if key != "k"}
    shares = {
        name: metric(
            audit([write_log(tmp_path / f"{name}.jsonl", rows)], protected="female").rankers,
            "exposure_share",
        )["value"]
        for name, rows in {
            "text_k": [{**without_k, "k": "5"}, men],
            "no_k": [without_k, men],
            "true_k": [{**without_k, "k": True}, men],
        }.items()
    }
    assert shares["text_k"] == pytest.approx(shares["no_k"]) == pytest.approx(shares["true_k"])


def test_a_null_share_is_no_share_so_a_typed_export_audits_as_its_log(tmp_path: Path):
    """``{"female": 1.0, "nonbinary": null}`` is the share of women alone (a ``null`` share is
    no entry), so a log exported typed by DuckDB (``COPY (SELECT * FROM read_json_auto(...))``:
    every group in every record, ``null`` where a record has none) audits as the log. A user
    trial found 138 of 400 records of such an export refused."""
    log = write_log(
        tmp_path / "a.jsonl",
        [{**record(["female"]), "exposure_by_group": {"female": 1.0, "nonbinary": None}}],
    )
    result = audit([log], protected="female")
    assert result.left_out.empty and metric(result.rankers, "exposure_share")["value"] == 1.0
    mixed = write_log(tmp_path / "mixed.jsonl", _records(1) + _records(2))
    typed = tmp_path / "typed.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * FROM read_json_auto('{mixed}')) TO '{typed}' (FORMAT parquet)")
    con.close()
    from_log, from_export = (audit([path], protected="female").rankers for path in (mixed, typed))
    assert from_export.equals(from_log)


def test_windows_line_up_from_run_to_run_whatever_since(tmp_path: Path):
    """``--since 9d --window 1d`` started each window at the audit's start less nine days
    (08:52:09.809568, another edge every run), so no two runs' windows lined up."""
    from datetime import datetime, timezone

    from fairrag_audit.options import AuditOptions
    from fairrag_audit.partials import compute_partials

    log = write_log(tmp_path / "a.jsonl", _records(1) + _records(2))
    starts = []
    for hour in (8, 17):
        now = datetime(2026, 12, 9, hour, 52, 9, 809568, tzinfo=timezone.utc)
        options = AuditOptions.create([log], protected="female", since="9d", window="1d", now=now)
        cells = compute_partials(options).cells
        starts.append(sorted({str(start) for start in cells["window_start"]}))
    assert starts[0] == starts[1] and len(starts[0]) == 2
    assert all(start.endswith("00:00:00") for start in starts[0]), starts[0]


def test_partials_of_the_release_before_are_told_by_their_path(tmp_path: Path):
    """Their fingerprint (a hash of the first line) cannot be compared with today's: the same
    log's old and new partials were merged, its first records counted twice."""
    import duckdb

    log = write_log(tmp_path / "app.jsonl", _records(1, 10))
    old = saved([log], [[log]], tmp_path / "old", **OPTIONS)[0]
    files = old / "files.parquet"
    duckdb.sql(
        f"COPY (SELECT * REPLACE ('4f344900dbc5777e' AS fingerprint) FROM read_parquet('{files}'))"
        f" TO '{old / 'kept.parquet'}' (FORMAT parquet)"
    )
    (old / "kept.parquet").replace(files)
    with open(log, "ab") as handle:  # the log grew since
        handle.write(b"".join(_line(r) for r in _records(2, 5)))
    new = saved([log], [[log]], tmp_path / "new", **OPTIONS)[0]
    with pytest.raises(ValueError, match="more than once"):
        read_partials([old, new])


def test_a_conversion_by_run_id_names_the_field_once(tmp_path: Path):
    log = write_log(tmp_path / "a.jsonl", _records(1, 5))
    out = tmp_path / "pq"
    assert main(["audit", str(log), "--out", str(out), "--to-parquet", "--by", "run_id"]) == 0
    assert len(audit([out / "a.parquet"], **OPTIONS).reading) == 1


def test_a_first_line_nested_past_the_parsers_depth_is_read_as_garbage(tmp_path: Path):
    """The fingerprint parses the first lines of any log: one nested 30,000 deep raised
    RecursionError before the audit could refuse the line as the sieve does."""
    log = tmp_path / "deep.jsonl"
    log.write_bytes(b"[" * 30_000 + b"\n" + b"".join(_line(r) for r in _records(1, 3)))
    assert log_fingerprint(log).startswith(FINGERPRINT_FORM)
    result = audit([log], **OPTIONS)
    assert result.reading["records"].tolist() == [3]


@pytest.mark.parametrize(
    "flags",
    [
        ["--partials-out", "P"],
        ["--fit-exposure", "fit.json"],
        ["--since", "2030-01-01"],
        ["--protected", "female"],
        ["--max-disparity", "0.1"],
    ],
    ids=["partials-out", "fit-exposure", "since", "protected", "max-disparity"],
)
def test_to_parquet_refuses_the_flags_it_would_ignore(tmp_path, flags, capsys):
    """A user trial: ``--to-parquet --partials-out P --fit-exposure f.json --since ...``
    exited 0 writing neither partials nor a fit, and saying nothing."""
    log = write_log(tmp_path / "a.jsonl", _records(1))
    given = [flag if not flag[0].isupper() else str(tmp_path / flag) for flag in flags]
    code = main(["audit", str(log), "--out", str(tmp_path / "pq"), "--to-parquet", *given])
    assert code == 2
    assert f"{flags[0]}: --to-parquet converts LOG files" in capsys.readouterr().err
    assert not (tmp_path / "pq").exists() and not (tmp_path / "P").exists()


def test_a_gzip_log_padded_with_zero_bytes_is_read_whole(tmp_path: Path, capsys):
    """An operator's trial: a gzip log with zero bytes after its end (a block device's padding,
    which ``gzip -d`` and Python read) stopped the whole audit, "Input is not a GZIP stream",
    naming no file, the good log beside it lost too; ``--to-parquet`` failed the same way."""

    def records(day: int) -> list[dict]:
        stamp = f"2026-11-{day:02d}T00:00:00Z"
        return [record(["female", "male"], ranker=f"r{i % 2}", timestamp=stamp) for i in range(40)]

    good = write_log(tmp_path / "good.jsonl", records(1))
    padded = write_log(tmp_path / "padded.jsonl.gz", records(2))
    with open(padded, "ab") as handle:
        handle.write(b"\0" * 4096)
    result = audit([good, padded], protected="female")
    assert list(result.reading["used"]) == [40, 40]
    assert main(["audit", str(padded), "--to-parquet", "--out", str(tmp_path / "pq")]) == 0
    assert audit(tmp_path / "pq", protected="female").reading["used"].sum() == 40


def test_empty_tables_are_written_with_their_header(tmp_path: Path):
    """An operator's trial: with one ranker (no t-test) and no ``--max-disparity``,
    pairwise.csv and drift.csv were a bare newline that ``pandas.read_csv`` refuses."""
    import pandas as pd

    from fairrag_audit.report import write_report

    path = write_log(tmp_path / "log.jsonl", [record(["female", "male"])] * 5)
    written = write_report(audit(path, by="tenant", protected="female"), tmp_path / "report")
    pairwise = pd.read_csv(written["pairwise.csv"])
    assert pairwise.empty and {"tenant", "metric", "a", "b", "p"} <= set(pairwise.columns)
    drift = pd.read_csv(written["drift.csv"])
    assert drift.empty and {"ranker", "tenant", "window", "value"} <= set(drift.columns)


def test_fit_exposure_refuses_parquet_logs_before_the_audit(tmp_path: Path, capsys):
    """An operator's trial: ``--fit-exposure`` over a Parquet folder ran the whole audit, then
    said "none of the 0 log(s) holds a record with an answer"."""
    log = write_log(tmp_path / "log.jsonl", [record(["female", "male"])] * 3)
    assert main(["audit", str(log), "--to-parquet", "--out", str(tmp_path / "pq")]) == 0
    out = tmp_path / "report"
    code = main(
        [
            "audit",
            str(tmp_path / "pq"),
            "--out",
            str(out),
            "--fit-exposure",
            str(tmp_path / "c.json"),
        ]
    )
    assert code == 2 and not out.exists()
    assert "reads JSON-lines logs" in capsys.readouterr().err


def test_a_log_rotated_while_the_audit_reads_it_is_refused(tmp_path: Path, monkeypatch, capsys):
    """An operator's trial: a log rotated (renamed, a new one created) after the audit took its
    fingerprint and before it read it: the partials counted the new file's records under the
    old file's identity, so the rotated file's own partials could never merge."""
    import fairrag_audit.partials as partials

    log = write_log(tmp_path / "app.jsonl", [record(["female", "male"])] * 30)
    fresh = [record(["male", "male"], timestamp="2026-12-02T00:00:00Z")] * 3
    real = partials.log_fingerprint

    def rotating(path):
        found = real(path)
        if not (tmp_path / "app.jsonl.1").exists():
            log.rename(tmp_path / "app.jsonl.1")
            write_log(log, fresh)
        return found

    monkeypatch.setattr(partials, "log_fingerprint", rotating)
    code = main(["audit", str(log), "--partials-out", str(tmp_path / "p"), "--window", "1d"])
    assert code == 2 and not (tmp_path / "p").exists()
    assert "changed while the audit read it" in capsys.readouterr().err


def test_a_log_rewritten_while_duckdb_reads_it_is_refused(tmp_path: Path, monkeypatch, capsys):
    """An operator's trial: a log rewritten in place while DuckDB read it failed the audit with
    DuckDB's "IO Error: Could not read enough bytes", exit 1; it is refused as a changed log,
    exit 2, as a rotation is."""
    import fairrag_audit.partials as partials

    log = write_log(tmp_path / "app.jsonl", [record(["female", "male"])] * 30)
    real = partials.load_included

    def rewritten(con, options):
        fresh = [record(["male", "male"], timestamp="2026-12-02T00:00:00Z")] * 3
        log.write_bytes(b"".join(_line(r) for r in fresh))  # in place: another first record
        real(con, options)
        raise duckdb.IOException("IO Error: Could not read enough bytes from file")

    def unchanged(con, options):
        raise duckdb.IOException("IO Error: the disk went away")

    monkeypatch.setattr(partials, "load_included", rewritten)
    code = main(["audit", str(log), "--out", str(tmp_path / "out")])
    assert code == 2 and "changed while the audit read it" in capsys.readouterr().err
    monkeypatch.setattr(partials, "load_included", unchanged)  # any other IO error: as it is
    code = main(["audit", str(log), "--out", str(tmp_path / "out2")])
    assert code == 1 and "the disk went away" in capsys.readouterr().err


def test_a_parquet_file_cut_short_is_listed_and_the_others_audited(tmp_path: Path):
    """An operator's trial: one Parquet file of a hive folder cut short (a copy still running)
    stopped the audit of every other day ("No magic bytes found at end of file")."""
    folder = tmp_path / "logs"
    for day in (1, 2, 3):
        stamp = f"2026-12-0{day}T00:00:00Z"
        log = write_log(tmp_path / f"d{day}.jsonl", [record(["female"], timestamp=stamp)] * 7)
        out = folder / f"day=2026-12-0{day}"
        assert main(["audit", str(log), "--to-parquet", "--out", str(out)]) == 0
    (cut,) = (folder / "day=2026-12-02").glob("*.parquet")
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    result = audit(folder, protected="female")
    assert int(result.reading["used"].iloc[0]) == 14
    (reason,) = result.left_out["reason"]
    assert "cannot be read" in reason and cut.name in reason
    # its row is numbered in name order, after the first day's 7 (it was numbered last, 15)
    assert result.left_out["line"].tolist() == [8]
    # the note counting it names the reason too (a review found it read "a value out of range")
    assert any("1 records refused" in n and "Parquet file that cannot" in n for n in result.notes)


def test_a_parquet_folder_a_file_lands_in_while_audited_is_audited(tmp_path: Path, monkeypatch):
    """A review: the rotation check refused a plain audit of a hive folder when the next
    day's file landed while it ran ("changed while the audit read it"): a folder grows, and
    each of its files is read as it is when read."""
    import fairrag_audit.partials as partials

    folder = tmp_path / "logs"
    for day in (1, 2):
        log = write_log(
            tmp_path / f"d{day}.jsonl",
            [record(["female"], timestamp=f"2026-12-0{day}T00:00:00Z")] * 4,
        )
        out = folder / f"day=2026-12-0{day}" if day == 1 else tmp_path / "later"
        assert main(["audit", str(log), "--to-parquet", "--out", str(out)]) == 0
    real = partials.log_fingerprint

    def landing(path):
        found = real(path)
        if not (folder / "day=2026-12-02").exists():  # the next day's export lands now
            shutil.copytree(tmp_path / "later", folder / "day=2026-12-02")
        return found

    monkeypatch.setattr(partials, "log_fingerprint", landing)
    assert int(audit(folder, protected="female").reading["used"].iloc[0]) == 8


def test_the_flags_target_share_is_for_the_flags_protected_group_only(tmp_path: Path):
    """A user trial: a record protecting ``male`` whose target names no share for men was
    audited, with ``--protected female --target-share 0.3``, against 0.3 (the share given for
    women): a disparity for a share nobody gave. Without a share for its group it has none."""
    men = {
        **record(["female", "male"]),
        "protected": "male",
        "target": {"female": 0.2, "OTHERS": 0.8},
    }
    women = record(["female", "male"])  # protects no group of its own: the flags' group
    log = write_log(tmp_path / "a.jsonl", [men])
    result = audit([log], protected="female", target_share=0.3)
    assert math.isnan(metric(result.rankers, "exposure_disparity")["value"])
    assert any("no target share for it" in note for note in result.notes)
    both = audit(
        [write_log(tmp_path / "b.jsonl", [men, women])], protected="female", target_share=0.3
    )
    share = metric(both.rankers, "exposure_share")
    disparity = metric(both.rankers, "exposure_disparity")
    assert disparity["n"] == 1
    assert disparity["value"] == pytest.approx(abs(women["exposure_share"] - 0.3))
    assert share["n"] == 2


def test_a_schema_no_release_wrote_is_refused_naming_it(tmp_path: Path):
    """A user trial: ``"schema"`` 0, -1, 1.5, ``"2"`` and ``true`` were audited as a known
    schema (only a higher number was refused); 1 and 2, and a record without one, are read."""
    base = record(["female", "male"])
    schemas: list[object] = [0, -1, 1.5, "2", True, 3, 1, 2, None]
    rows = [{**base, "schema": s} if s is not None else base for s in schemas]
    result = audit([write_log(tmp_path / "a.jsonl", rows)], protected="female")
    reasons = result.left_out["reason"].tolist()
    assert [r.split(" is ")[0] for r in reasons] == [
        "schema 0",
        "schema -1",
        "schema 1.5",
        'schema "2"',
        "schema true",
        "schema 3",
    ]
    assert all("not a record schema (the whole numbers 1 to 2)" in r for r in reasons[:5])
    assert metric(result.rankers, "exposure_share")["n"] == 3


def test_a_label_the_audit_gives_records_without_one_is_refused_not_merged(tmp_path: Path):
    """An operator's trial: a ranker named ``(none)`` was one row with the records without a
    ranker (a real ranker's share 0 blended with share 1), a ``--by`` value ``(missing)`` one
    group with the records without the field (the note counted 10 of its 15), a group label
    ``(unknown)`` one row with the null labels. Each such record is left out with its reason;
    the records without one keep their names."""
    from tests.audit.logs import record

    records = [
        record(["female", "male"], ranker="(none)", tenant="a"),
        record(["female", "male"], tenant="(missing)"),
        record(["(unknown)", "male"], tenant="a"),
        record(["None", None], tenant="a"),
        record(["female", "male"], tenant=True),  # a value (the handlers write booleans)
        record(["male", "male"], ranker="(none)x", tenant="b", follows_citation_format=True),
    ]
    missing = record(["female", None], tenant="a")
    del missing["ranker"]
    absent = record(["female", "male"])  # no tenant: the group (missing)
    log = write_log(tmp_path / "log.jsonl", [*records, missing, absent])
    result = audit(log, by=("tenant",), protected="female")
    assert result.left_out["reason"].tolist() == [
        "ranker (none) is the name the audit gives records without a ranker; rename it to audit "
        "these records apart",
        "--by tenant (missing) is the name the audit gives records without the field; rename it "
        "to audit these records apart",
        "groups holds the label (unknown), the name the audit gives a document without a group "
        "label (null); rename it to audit that group apart",
        "groups holds both the label None and a null label, which exposure_by_group names alike",
    ]
    assert result.reading["refused"].tolist() == [4]
    shares = result.rankers[result.rankers["metric"] == "exposure_share"].set_index("ranker")
    assert sorted(shares.index) == ["(none)", "(none)x", "standard"]
    assert shares.loc["(none)", "n"] == 1  # the record without a ranker alone
    assert sorted(result.metrics["tenant"].unique()) == ["(missing)", "a", "b", "true"]
    # a boolean field the handlers write is a --by value (a review: refusing it dropped every
    # record of a log grouped by follows_citation_format)
    grouped = audit(log, by=("tenant", "follows_citation_format"), protected="female")
    assert grouped.reading["refused"].tolist() == [4]  # the four above, no more


def test_a_log_counted_twice_names_the_two_partials_that_hold_it(tmp_path: Path):
    """A review: with one log in p1 and p3 and another log rotated in under its name in p2,
    the error named all three folders (the rows were matched by path)."""
    log = write_log(tmp_path / "app.jsonl", _records(1, 5))
    [first] = saved([log], [[log]], tmp_path / "a", **OPTIONS)
    rotated = log.rename(tmp_path / "app.jsonl.1")
    write_log(tmp_path / "app.jsonl", _records(2, 5))  # another log, the same name
    [second] = saved([log], [[log]], tmp_path / "b", **OPTIONS)
    [third] = saved([rotated], [[rotated]], tmp_path / "c", **OPTIONS)
    with pytest.raises(ValueError, match="more than once") as error:
        read_partials([first, second, third])
    assert f"in the partials {sorted([str(first), str(third)])}" in str(error.value)


def test_logs_holding_no_record_never_count_as_one_log(tmp_path: Path):
    """An operator's trial: the ``--to-parquet`` conversions of two days whose logs hold no
    record (a torn write; a line of garbage), whose rows are all null, were told as one log
    and refused, and with them a folder of daily conversions; two days opening with the same
    non-record line too. Such logs add no record: never refused, in one audit or merged."""
    torn = tmp_path / "src" / "a.jsonl"
    torn.parent.mkdir()
    torn.write_text('{"schema": 2, "timestamp": "2026-12-0')
    garbage = tmp_path / "src" / "b.jsonl"
    garbage.write_text("garbage line\n")
    real = write_log(tmp_path / "src" / "c.jsonl", _records(1, 20))
    folder = tmp_path / "pq"
    for log in (torn, garbage, real):
        assert main(["audit", str(log), "--out", str(folder), "--to-parquet"]) == 0
    converted = [folder / f"{name}.parquet" for name in "abc"]
    assert log_fingerprint(converted[0]) == log_fingerprint(converted[1])  # all-null rows
    for given in (converted, [folder]):
        result = audit(given, **OPTIONS)
        assert int(result.reading["records"].sum()) == 20
        assert int(result.reading["damaged"].sum()) == 2
    pair = saved(converted[:2], [[converted[0]], [converted[1]]], tmp_path / "p", **OPTIONS)
    read_partials(pair)  # merged: no refusal
    started = [tmp_path / f"day{n}.jsonl" for n in (1, 2)]
    for log in started:
        log.write_text('{"event": "logger started"}\n')
    assert audit(started, **OPTIONS) is not None
    # a log of records given twice is still refused (the rule this leaves as it was)
    with pytest.raises(ValueError, match="holds the same log as"):
        audit([real, converted[2]], **OPTIONS)


def test_a_log_whose_first_record_lies_past_the_fingerprints_lines_is_still_refused_twice(
    tmp_path: Path,
):
    """A review of the rule above: a log opening with 1,001 lines of another logger's events,
    records after them, was told as holding no record, so it and its copy were audited
    together (every record counted twice)."""
    events = [{"event": f"started {n}"} for n in range(1001)]
    log = write_log(tmp_path / "a.jsonl", [*events, *_records(1, 20)])
    copy = tmp_path / "copy.jsonl"
    shutil.copy(log, copy)
    with pytest.raises(ValueError, match="holds the same log as"):
        audit([log, copy], **OPTIONS)


def test_partials_of_logs_without_a_record_merge_whatever_release_saved_them(tmp_path: Path):
    """A review: partials saved by the release before, whose no-record logs shared one
    fingerprint (two days' Parquet conversions of torn lines), were still refused when merged.
    A log without a record adds none to count twice: merged whatever its fingerprint."""
    days = []
    for day in (1, 2):
        torn = tmp_path / f"day{day}.jsonl"
        torn.write_text('{"schema": 2, "timestamp": "2026-12-0')
        days.append(torn)
    pair = saved(days, [[days[0]], [days[1]]], tmp_path / "p", **OPTIONS)
    for folder in pair:  # as the release before wrote them: one fingerprint, no "n" form
        files = duckdb.sql(f"SELECT * FROM '{folder / 'files.parquet'}'").df()
        files["fingerprint"] = FINGERPRINT_FORM + "0" * 64
        (folder / "files.parquet").unlink()
        duckdb.from_df(files).write_parquet(str(folder / "files.parquet"))
    merged = read_partials(pair)
    assert int(merged.files["damaged"].sum()) == 2
