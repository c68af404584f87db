"""Columnar logs: `fairrag audit --to-parquet` converts a log once; the audit of the Parquet file
(or of a hive-partitioned folder of them) equals the audit of the JSON lines."""

from __future__ import annotations

from pathlib import Path

from fairrag_audit import audit
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
