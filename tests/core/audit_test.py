"""The shared fairness auditor and the JSON-lines log."""

from __future__ import annotations

import json
import math
import threading

import pytest

from fairrag_core import FairnessAuditor, JsonLinesLog, summarize_records
from fairrag_core.citations import ContextDocument

CONTEXT = [
    ContextDocument("Ada Lovelace", "female"),
    ContextDocument("Alan Turing", "male"),
    ContextDocument("Grace Hopper", "female"),
]


def test_retrieval_record_binary():
    record = FairnessAuditor.create(protected="female").retrieval(["male", "female", None])
    weights = [1.0, 1 / math.log2(3), 0.5]
    assert record["exposure_share"] == pytest.approx(weights[1] / sum(weights))
    assert record["exposure_disparity"] == pytest.approx(abs(record["exposure_share"] - 0.5))
    assert record["groups"] == ["male", "female", None]


def test_generation_record_counts_valid_citations_and_gaps():
    auditor = FairnessAuditor.create(protected="female")
    answer = (
        "- Ada Lovelace (DocTitle: Ada Lovelace)\n"
        "- Alan Turing (DocTitle: Alan Turing)\n"
        "- Invented Person (DocTitle: Not In Context)\n"
        "- this line is not a citation"
    )
    record = auditor.generation(answer, CONTEXT, retrieval_share=0.4)
    assert record["n_bullets"] == 4
    assert record["n_valid_citations"] == 2
    assert record["generation_parity"] == pytest.approx(0.5)
    assert record["fairness_gap"] == pytest.approx(0.1)
    assert record["fairness_gap_magnitude"] == pytest.approx(0.0 - 0.1)
    assert record["groundedness"] == pytest.approx(2 / 4)
    assert record["follows_citation_format"] is True


def test_answer_without_bullets_nan_parity_or_no_metrics_when_format_required():
    auditor = FairnessAuditor.create(protected="female")
    record = auditor.generation("I cannot answer that.", CONTEXT, 0.5)
    assert math.isnan(record["generation_parity"])
    assert record["groundedness"] == 0.0
    assert record["follows_citation_format"] is False
    strict = auditor.generation("I cannot answer that.", CONTEXT, 0.5, require_format=True)
    assert strict == {"follows_citation_format": False, "unparsed_lines": []}


def test_summary_counts_nan_instead_of_dropping():
    records = [
        {"ranker": "a", "exposure_share": 0.2, "generation_parity": math.nan},
        {"ranker": "a", "exposure_share": 0.4, "generation_parity": 1.0},
    ]
    summary = summarize_records(records)["a"]
    assert summary["runs"] == 2
    assert summary["exposure_share"]["mean"] == pytest.approx(0.3)
    assert summary["generation_parity"] == {"mean": 1.0, "n": 1, "n_nan": 1}


def test_jsonl_log_strict_json_and_concurrent_appends(tmp_path):
    log = JsonLinesLog(tmp_path / "log.jsonl")
    threads = [
        threading.Thread(
            target=lambda i=i: [
                log.append({"i": i, "j": j, "x": math.nan, "pad": "y" * 5000}) for j in range(50)
            ]
        )
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert len(lines) == 400
    records = [json.loads(line) for line in lines]  # strict: NaN became null
    assert all(r["x"] is None for r in records)
    assert sorted((r["i"], r["j"]) for r in records) == [
        (i, j) for i in range(8) for j in range(50)
    ]
    assert len(log.read()) == 400


def test_jsonl_log_bad_paths_are_clear(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        JsonLinesLog(tmp_path / "missing" / "log.jsonl")
    with pytest.raises(ValueError, match="is a folder"):
        JsonLinesLog(tmp_path)


def test_jsonl_read_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\n{"a": 2')
    assert JsonLinesLog(path).read() == [{"a": 1}]


def test_a_boolean_metric_value_is_counted_missing_not_averaged_as_one():
    """A core trial: ``summarize_records`` averaged ``exposure_share: True`` as 1.0."""
    summary = summarize_records(
        [{"ranker": "a", "exposure_share": True}, {"ranker": "a", "exposure_share": 0.25}]
    )
    assert summary["a"]["exposure_share"] == {"mean": 0.25, "n": 1, "n_nan": 1}
