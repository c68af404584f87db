"""Partial aggregates: each window's logs read once into partials; the report of the merged
partials equals the one-shot audit of all the logs, table by table and figure data too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from fairrag_audit import audit
from fairrag_audit.analysis import AuditResult, audit_partials
from fairrag_audit.options import AuditOptions
from fairrag_audit.partials import (
    compute_partials,
    merge_partials,
    read_partials,
    write_partials,
)
from fairrag_study.cli import main
from tests.audit.conftest import deployment_records
from tests.audit.logs import record, write_log

OPTIONS = {"by": ("tenant",), "window": "1h", "protected": "female", "max_disparity": 0.05}


def assert_same_table(merged: pd.DataFrame, one_shot: pd.DataFrame, name: str = "") -> None:
    """Same cells and counts, values and intervals equal up to float summation order."""
    pd.testing.assert_frame_equal(
        merged.reset_index(drop=True),
        one_shot.reset_index(drop=True),
        check_exact=False,
        rtol=1e-9,
        atol=1e-12,
        check_dtype=False,
        obj=name,
    )


def assert_same_report(merged: AuditResult, one_shot: AuditResult) -> None:
    """Every table of the report (the figures' data among them), its notes and settings."""
    for item in dataclasses.fields(AuditResult):
        mine, theirs = getattr(merged, item.name), getattr(one_shot, item.name)
        if isinstance(theirs, pd.DataFrame):
            assert not theirs.empty or item.name in ("drift", "left_out"), item.name
            assert_same_table(mine, theirs, item.name)
        elif item.name == "options":  # the start of the audit differs from run to run
            assert _settings(mine) == _settings(theirs)
        else:
            assert mine == theirs, item.name


def _settings(options: AuditOptions) -> dict[str, object]:
    names = ("paths", "by", "since", "window", "max_disparity", "protected", "target_share")
    return {name: getattr(options, name) for name in (*names, "exposure", "confidence", "alpha")}


def days(folder: Path, undated: bool = False) -> list[Path]:
    """Three daily logs (the second with a torn line; ``undated``: the third's first records
    without a timestamp), as a daily run would find them."""
    logs = []
    for index in range(3):
        records = deployment_records(hours=3, seed=index, day=f"2026-12-0{index + 1}")
        if undated and index == 2:
            for item in records[:5]:
                item.pop("timestamp")
        damaged = [b'{"torn\n'] if index == 1 else []
        logs.append(write_log(folder / f"day{index}.jsonl", records, damaged))
    return logs


def saved(logs: list[Path], windows: list[list[Path]], folder: Path, **options: object) -> list:
    """Each window's logs audited once into a folder of partials."""
    return [
        write_partials(compute_partials(AuditOptions.create(w, **options)), folder / f"p{i}")
        for i, w in enumerate(windows)
    ]


@pytest.mark.parametrize(
    "options",
    [OPTIONS, {"protected": "female"}],  # --window given; automatic figure windows
    ids=["window", "automatic-windows"],
)
def test_merged_partials_report_equals_the_one_shot_report(
    tmp_path: Path, options: dict[str, object]
) -> None:
    logs = days(tmp_path, undated="window" not in options)
    one_shot = audit(logs, **options)
    for windows in ([[logs[0]], [logs[1]], [logs[2]]], [[logs[0], logs[1]], [logs[2]]]):
        folders = saved(logs, windows, tmp_path / f"{len(windows)}", **options)
        band = options.get("max_disparity")  # a setting of the report, not of the sums
        merged = audit_partials(folders, max_disparity=band)  # type: ignore[arg-type]
        assert_same_report(merged, one_shot)
    assert len(one_shot.trend_exposure["window"].unique()) > 3
    assert one_shot.pairwise["metric"].nunique() > 2


def test_merge_is_a_sum_in_any_grouping(tmp_path: Path) -> None:
    logs = days(tmp_path)
    parts = [compute_partials(AuditOptions.create([log], **OPTIONS)) for log in logs]
    both = merge_partials([parts[0], merge_partials(parts[1:])])
    flat = merge_partials(parts)
    assert_same_table(both.cells, flat.cells)
    assert_same_table(both.groups, flat.groups)


def test_bad_partials_are_refused_naming_what_is_wrong(tmp_path: Path) -> None:
    logs = days(tmp_path)
    tenant = saved(logs, [[logs[0]]], tmp_path / "tenant", **OPTIONS)[0]
    plain = write_partials(compute_partials(AuditOptions.create([logs[1]])), tmp_path / "plain")
    with pytest.raises(ValueError, match=r"different --by \(\['tenant'\] and \[\]\)"):
        read_partials([tenant, plain])
    # an operator's trial: the same folder twice was read as a log counted twice, unnamed
    with pytest.raises(ValueError, match=r"--from-partials names the folder .*p0.* twice"):
        read_partials([tenant, tenant])
    again = saved(logs, [[logs[0]]], tmp_path / "again", **OPTIONS)[0]
    with pytest.raises(ValueError, match=r"count the log .*day0.jsonl.* more than once") as got:
        read_partials([tenant, again])
    assert f"in the partials {sorted([str(again), str(tenant)])}" in str(got.value)
    with pytest.raises(ValueError, match=r"--from-partials .*nowhere.* does not exist"):
        read_partials([tmp_path / "nowhere"])
    # a table lost (a user trial: a traceback alone, or beside a good folder exit 0 with the
    # window's records counted as read and in no table)
    for name in ("cells", "groups"):
        (tenant / f"{name}.parquet").rename(tmp_path / "aside.parquet")
        with pytest.raises(ValueError, match=rf"{name}.parquet missing \(partials.json lists"):
            read_partials([tenant, plain])
        (tmp_path / "aside.parquet").rename(tenant / f"{name}.parquet")
    # a table rewritten without one of its columns (a user trial: a pandas KeyError traceback)
    cells = tenant / "cells.parquet"
    duckdb.execute(
        f"COPY (SELECT * EXCLUDE (style_none) FROM '{cells}') TO '{tmp_path}/c.parquet' "
        "(FORMAT parquet)"
    )
    cells.rename(tmp_path / "aside.parquet")
    (tmp_path / "c.parquet").rename(cells)
    with pytest.raises(ValueError, match=r"cells.parquet lacks the column\(s\) style_none"):
        read_partials([tenant, plain])
    (tmp_path / "aside.parquet").replace(cells)
    meta = json.loads((plain / "partials.json").read_text())
    (plain / "partials.json").write_text(json.dumps({**meta, "columns": ["cells"]}))
    with pytest.raises(ValueError, match="its 'columns' is not an object of column-name lists"):
        read_partials([plain])
    # layout 1 (before the several-group counts and the table list): its records would merge
    # under other definitions (a review found a traceback alone, and mixed numbers merged)
    (plain / "partials.json").write_text(json.dumps({**meta, "version": 1}))
    with pytest.raises(ValueError, match="partials of layout 1, this audit reads layout 2"):
        read_partials([plain])
    (plain / "partials.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(ValueError, match="partials of layout 99, this audit reads layout 2"):
        read_partials([plain])


def test_the_cli_saves_a_window_and_reports_the_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = days(tmp_path)
    flags = ["--by", "tenant", "--window", "1h", "--protected", "female"]
    for i, log in enumerate(logs):
        assert main(["audit", str(log), "--partials-out", str(tmp_path / f"p{i}"), *flags]) == 0
    assert "partials:" in capsys.readouterr().out
    folders = [str(tmp_path / f"p{i}") for i in range(3)]
    assert main(["audit", "--from-partials", *folders, "--out", str(tmp_path / "merged")]) == 0
    assert main(["audit", *map(str, logs), "--out", str(tmp_path / "once"), *flags]) == 0
    for name in ("metrics.csv", "rankers.csv", "exposure.csv", "reading.csv"):
        merged = pd.read_csv(tmp_path / "merged" / name)
        once = pd.read_csv(tmp_path / "once" / name)
        assert_same_table(merged, once, name)
    capsys.readouterr()
    # bad input: logs and --from-partials together, a settings flag with --from-partials
    assert main(["audit", str(logs[0]), "--from-partials", folders[0], "--out", "x"]) == 2
    assert "give LOG files or --from-partials, not both" in capsys.readouterr().err
    assert main(["audit", "--from-partials", folders[0], "--by", "topic", "--out", "x"]) == 2
    assert "--by: the partials were computed with their own" in capsys.readouterr().err
    assert main(["audit", "--out", "x"]) == 2
    assert "give LOG files to audit, or --from-partials" in capsys.readouterr().err
    # a duration counts back from each run's start: two runs' partials could never merge
    # (a user trial followed the guide's "the same --since" with --since 7d)
    assert main(["audit", str(logs[0]), "--partials-out", "P", "--since", "7d"]) == 2
    assert "--since '7d' with --partials-out: a duration" in capsys.readouterr().err


def test_a_partials_only_run_replaces_nothing_and_refuses_what_it_cannot_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user trial: a second window saved into the first's folder replaced its partials (a
    day lost, exit 0); report flags on a partials-only run were ignored without a word; a log
    with no record exited 0 (a report exits 2); a table cut short gave DuckDB's raw error."""
    logs = days(tmp_path)
    first = tmp_path / "p0"
    assert main(["audit", str(logs[0]), "--partials-out", str(first)]) == 0
    before = {path.name: path.read_bytes() for path in first.iterdir()}
    capsys.readouterr()
    assert main(["audit", str(logs[1]), "--partials-out", str(first)]) == 2
    assert f"--partials-out {str(first)!r} already holds partials" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in first.iterdir()} == before
    with pytest.raises(ValueError, match="already holds partials"):
        write_partials(compute_partials(AuditOptions.create([logs[1]])), first)
    second = tmp_path / "p1"
    for flag, value in (("--max-disparity", "0.05"), ("--confidence", "0.9"), ("--alpha", "0.1")):
        assert main(["audit", str(logs[1]), "--partials-out", str(second), flag, value]) == 2
        assert f"{flag}: a run with --partials-out and no --out" in capsys.readouterr().err
    assert not second.exists()
    torn = tmp_path / "torn.jsonl"
    torn.write_text("torn{\n")
    assert main(["audit", str(torn), "--partials-out", str(tmp_path / "torn")]) == 2
    said = capsys.readouterr().err
    assert "error: no record to audit in 1 log(s): 1 lines, 1 not JSON, 0 not" in said
    cells = first / "cells.parquet"
    cells.write_bytes(cells.read_bytes()[:100])
    assert main(["audit", "--from-partials", str(first), "--out", str(tmp_path / "r")]) == 2
    assert "p0': cells.parquet cannot be read (" in capsys.readouterr().err


def test_an_empty_window_merges(tmp_path: Path) -> None:
    logs = days(tmp_path)
    empty = write_log(tmp_path / "empty.jsonl", [])
    other = write_log(tmp_path / "other.jsonl", [record(["female", "male"])])
    folders = saved(logs, [[logs[0]], [empty, other]], tmp_path, protected="female")
    merged = audit_partials(folders)
    assert merged.reading["file"].tolist() == [str(logs[0]), str(empty), str(other)]
    np.testing.assert_array_equal(merged.reading["lines"].to_numpy(), [36, 0, 1])


def test_a_log_is_told_by_its_content_not_by_the_path_it_was_given_as(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log rotated under one name each day is several logs (it was refused as one counted
    twice); one file named by a relative and an absolute path, or copied, is one log (it was
    merged twice: every record counted twice)."""
    logs = days(tmp_path)
    rotated = []
    for index in (0, 1):  # each day's log is fairness.jsonl in that day's folder
        folder = tmp_path / f"rotation{index}"
        folder.mkdir()
        (folder / "fairness.jsonl").write_bytes(logs[index].read_bytes())
        monkeypatch.chdir(folder)
        rotated += saved([Path("fairness.jsonl")], [[Path("fairness.jsonl")]], folder, **OPTIONS)
    monkeypatch.chdir(tmp_path)
    merged = audit_partials(rotated, max_disparity=0.05)
    one_shot = audit([str(log) for log in logs[:2]], **OPTIONS)  # type: ignore[arg-type]
    assert_same_table(merged.metrics, one_shot.metrics, "metrics")
    # each day's log told apart where it is listed (a user trial: two identical rows, the
    # torn line of day 2 listed twice under one name)
    named = merged.reading["file"].tolist()
    assert len(set(named)) == 2 and all(n.startswith("fairness.jsonl (audited ") for n in named)
    assert merged.left_out["file"].tolist() == [named[1]]  # day 2's torn line, its own name
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(logs[0].read_bytes())
    for twin in (Path("day0.jsonl"), copy):  # relative to tmp_path: the same file, and a copy
        pair = saved([logs[0], twin], [[logs[0]], [twin]], tmp_path / twin.stem, **OPTIONS)
        with pytest.raises(ValueError, match=r"more than once \(the same first record"):
            read_partials(pair)


def test_a_log_that_grew_since_its_partials_is_refused_and_old_partials_still_merge(
    tmp_path: Path,
) -> None:
    """A log still written to, audited yesterday and again today, holds yesterday's records
    twice: refused (its first record is the same). Partials saved without fingerprints (the
    release before) are told by their path: two such logs merge with a new one."""
    logs = days(tmp_path)
    growing = tmp_path / "growing.jsonl"
    growing.write_bytes(logs[0].read_bytes())
    first = saved([growing], [[growing]], tmp_path / "yesterday", **OPTIONS)
    growing.write_bytes(logs[0].read_bytes() + logs[1].read_bytes())
    second = saved([growing], [[growing]], tmp_path / "today", **OPTIONS)
    with pytest.raises(ValueError, match=r"a log that grew since its partials were saved"):
        read_partials([*first, *second])
    old = saved(logs, [[logs[0]], [logs[1]]], tmp_path / "old", **OPTIONS)
    for folder in old:  # as the release before wrote them: no fingerprint column
        files, kept = folder / "files.parquet", folder / "kept.parquet"
        duckdb.sql(
            f"COPY (SELECT * EXCLUDE (fingerprint) FROM read_parquet('{files}')) TO '{kept}' "
            "(FORMAT parquet)"
        )
        kept.replace(files)
        meta = json.loads((folder / "partials.json").read_text())
        del meta["columns"]  # nor the list of columns, which came later
        (folder / "partials.json").write_text(json.dumps(meta))
    new = saved(logs, [[logs[2]]], tmp_path / "new", **OPTIONS)
    merged = audit_partials([*old, *new], max_disparity=0.05)
    one_shot = audit([str(log) for log in logs], **OPTIONS)  # type: ignore[arg-type]
    assert_same_table(merged.metrics, one_shot.metrics, "metrics")


def test_a_fingerprint_reads_at_most_its_bound(tmp_path: Path) -> None:
    """A log whose first line is longer than the bound is told by its first 64 KiB: it is
    read no further (before this, a log without a newline in its first 64 KiB was read
    whole), and the same log grown has the same fingerprint."""
    from fairrag_audit.partials import FINGERPRINT_BYTES, log_fingerprint

    log = tmp_path / "long.jsonl"
    log.write_bytes(b"x" * (2 * FINGERPRINT_BYTES))
    before = log_fingerprint(log)
    with open(log, "ab") as handle:
        handle.write(b"y" * FINGERPRINT_BYTES + b"\n{}\n")
    assert log_fingerprint(log) == before
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"timestamp": "2026-12-05"}\n' + b"x" * FINGERPRINT_BYTES)
    assert log_fingerprint(other) != before


def test_partials_given_as_a_log_or_written_into_a_log_folder_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Saved partials given as a LOG (``--from-partials`` forgotten) were audited as a Parquet
    log: "126 records audited", exit 0, the aggregate rows counted as records; partials written
    into a folder of Parquet logs broke its next audit with DuckDB's error (a user trial)."""
    logs = days(tmp_path)
    folder = tmp_path / "p0"
    assert main(["audit", str(logs[0]), "--partials-out", str(folder)]) == 0
    capsys.readouterr()
    for given in (folder, folder / "cells.parquet"):
        assert main(["audit", str(given), "--out", str(tmp_path / "r")]) == 2
        error = capsys.readouterr().err
        assert "holds saved partials" in error and "--from-partials" in error
    assert not (tmp_path / "r").exists()
    lake = tmp_path / "lake"
    assert main(["audit", str(logs[1]), "--to-parquet", "--out", str(lake)]) == 0
    capsys.readouterr()
    (converted,) = lake.glob("*.parquet")
    partition = lake / "day=2026-12-02"
    partition.mkdir()
    in_partition = converted.rename(partition / converted.name)
    for given, inside in (
        (lake, lake),
        (lake, lake / "_partials"),
        (in_partition, partition / "p"),
        (in_partition, lake / "p"),  # the lake above the file's partition
    ):
        assert main(["audit", str(given), "--partials-out", str(inside)]) == 2
        assert "which holds Parquet logs" in capsys.readouterr().err
    assert not (lake / "_partials").exists() and not (lake / "partials.json").exists()
