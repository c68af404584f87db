"""The study on a user's own labelled CSV: three groups and a full target, through the CLI."""

from __future__ import annotations

import csv
import json
import math

import pytest

from fairrag_study.cli import main
from fairrag_study.dataset import TREC_GENDER, StudyDataset, custom_dataset
from fairrag_study.report import METRICS, PAPER, metric_specs
from tests.three_groups import TARGET, write_three_group_csv

RANKERS = ("standard", "representative_stochastic")


@pytest.fixture(scope="module")
def three_group_run(tmp_path_factory):
    """The TREC rows of three topics, relabelled by ``region`` a/b/c, gender column dropped."""
    root = tmp_path_factory.mktemp("regions")
    mine = write_three_group_csv(root / "mine.csv")
    out = root / "out"
    args = [
        "study", "--data", str(mine), "--group-key", "region", "--target", json.dumps(TARGET),
        "--per-group", "8", "--trials", "8", "--rankers", ",".join(RANKERS), "--llm", "none",
        "--out", str(out), "--cache-dir", str(root / "cache"), "--no-progress",
    ]  # fmt: skip
    assert main(args) == 0
    _RUNS[out] = args
    return out


_RUNS: dict = {}


def test_records_carry_the_three_groups_and_the_target(three_group_run):
    records = [json.loads(line) for line in (three_group_run / "records.jsonl").open()]
    assert len(records) == 8 * len(RANKERS)
    for record in records:
        assert {group: share for group, share in record["target"].items() if share} == TARGET
        assert set(record["groups"]) <= set(TARGET)
        assert set(record["exposure_by_group"]) <= set(TARGET)
        shares = [record["exposure_by_group"].get(g, 0.0) for g in TARGET]
        half_l1 = sum(abs(share - TARGET[g]) for share, g in zip(shares, TARGET, strict=True)) / 2
        assert record["exposure_disparity"] == pytest.approx(half_l1)
        assert record["exposure_share"] is None  # no protected group named: null
    # The balanced corpus holds every group equally: 3 topics x 8 per group.
    report = (three_group_run / "report.md").read_text()
    assert "72 documents, 24 a, 24 b, 24 c" in report


def test_a_second_run_replaces_the_first_one_per_group_tables_included(three_group_run):
    """The manifest accounts for the data set's own files (one exposure-share table per group),
    so the same command again replaces them instead of refusing the folder as foreign."""
    manifest = json.loads((three_group_run / ".fairrag-study.json").read_text())
    per_group = {f"table_exposure_share_{group}.md" for group in TARGET}
    assert per_group <= set(manifest["written"])
    assert main(_RUNS[three_group_run]) == 0
    assert all((three_group_run / name).is_file() for name in per_group)


def test_tables_and_report_name_the_groups_and_no_paper(three_group_run):
    for group in TARGET:
        table = (three_group_run / f"table_exposure_share_{group}.md").read_text()
        assert f"Exposure share of {group} ES_{group} (target {TARGET[group]:g})" in table
    table1 = (three_group_run / "table1_exposure_disparity.md").read_text()
    assert "1/2 sum_g |ES_g - target_g| (a 0.4, b 0.3, c 0.3)" in table1
    assert not (three_group_run / "table2_exposure_share.md").exists()
    summary = list(csv.DictReader((three_group_run / "summary.csv").open()))
    metrics = {row["metric"] for row in summary}
    assert {"exposure_share_a", "exposure_share_b", "exposure_share_c"} <= metrics
    assert {row["ranker"] for row in summary} == set(RANKERS)
    report = (three_group_run / "report.md").read_text()
    assert "# FairRAG study: custom (groups by `region`)" in report
    assert "| metric | ranker | this run | sd | n |\n" in report  # no paper column
    assert "paper" not in report.lower() and "female" not in report
    assert "target: `a 0.4, b 0.3, c 0.3`" in report
    assert "exposure share per group: a " in report
    assert (three_group_run / "figures" / "retrieval.png").stat().st_size > 0


def test_metrics_over_many_rankings_and_no_differences_section_without_a_paper(three_group_run):
    """The metrics over many rankings take the full target; only the paper's data set has a
    paper to differ from."""
    report = (three_group_run / "report.md").read_text()
    assert "## Over many rankings" in report
    assert "Differences from the paper" not in report
    assert "| ranker | EE-L |" in report and "stream share c |" in report
    records = [json.loads(line) for line in (three_group_run / "records.jsonl").open()]
    summary = {
        (row["metric"], row["ranker"]): row
        for row in csv.DictReader((three_group_run / "summary.csv").open())
    }
    weights = [1 / math.log2(i + 2) for i in range(5)]
    for ranker in RANKERS:
        stream = sorted((r for r in records if r["ranker"] == ranker), key=lambda r: r["trial"])
        exposure = {group: 0.0 for group in TARGET}
        for record in stream:
            for i, group in enumerate(record["groups"]):
                exposure[group] += weights[i]
        total = sum(exposure.values())
        half_l1 = sum(abs(exposure[g] / total - TARGET[g]) for g in TARGET) / 2
        row = summary[("amortized_disparity", ranker)]
        assert (row["aggregate"], int(row["n"])) == ("stream", len(stream))
        assert float(row["mean"]) == pytest.approx(half_l1, abs=1e-12)
        assert float(summary[("ee_loss", ranker)]["mean"]) >= 0.0
        assert 0.0 <= float(summary[("awrf", ranker)]["mean"]) <= 1.0


def test_the_paper_data_set_is_todays_constants():
    """TREC_GENDER reproduces the study's former constants: the default output is unchanged."""
    assert (TREC_GENDER.group_key, TREC_GENDER.protected, TREC_GENDER.target_share) == (
        "gender",
        "female",
        0.5,
    )
    assert TREC_GENDER.groups == ("female", "male") and TREC_GENDER.per_group == 50
    assert TREC_GENDER.paper is PAPER and metric_specs(TREC_GENDER) == METRICS
    assert TREC_GENDER.index_kind("balanced", [("1", "female")]) == "balanced"
    assert METRICS[0].title == "Table 1: exposure disparity |ES_female - 0.5|"


def test_every_generation_metric_a_record_holds_has_a_table():
    """study.md: the summary holds "every per-trial metric"; a user trial found
    ``attributed_fairness_gap_explicit`` in the records and the audit, but in no table."""
    from fairrag_core.audit import GENERATION_FIELDS

    assert set(GENERATION_FIELDS) <= {spec.key for spec in METRICS}


def test_a_data_set_refuses_what_the_study_could_not_run():
    with pytest.raises(ValueError, match="not one of the groups"):
        custom_dataset(TARGET, protected="z")
    with pytest.raises(ValueError, match="no \\{topic\\} placeholder"):
        StudyDataset(name="x", groups=("a", "b"), target={"a": 0.5, "b": 0.5},
                     question_templates=("Who?",))  # fmt: skip
    with pytest.raises(ValueError):
        custom_dataset({"a": 0.7, "b": 0.7})
    relabelled = custom_dataset(TARGET, group_key="region")
    assert relabelled.index_kind("balanced", [("1", "a")]) != relabelled.index_kind(
        "balanced", [("1", "b")]
    )


def _rows_of(topics: tuple[str, ...]) -> tuple[list[str], list[dict[str, str]]]:
    from tests.chroma_pool import data_path_or_skip

    with open(data_path_or_skip(), newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or ()), [r for r in reader if r["q_text"] in topics]


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("one group", "column 'region' holds only ['a'] among the rows with text, none of ['b']"),
        ("empty texts", "has empty text in column 'first sentence'"),
        ("header only", "it holds no rows, only its header"),
        ("groups apart", "no topic holds documents of every group ['a', 'b']"),
    ],
)
def test_a_data_file_the_study_cannot_use_is_refused_naming_why(case, words, tmp_path, capsys):
    """Issue 25: a --data file with one group, only empty texts, no rows, or groups that never
    share a topic fails naming that, not "2 trials need 1 topics but the corpus has 0"."""
    columns, rows = _rows_of(("Tennis", "Medicine"))
    columns = [*columns, "region"]
    rows = [{**r, "region": "a" if r["gender"] == "female" else "b"} for r in rows]
    if case == "one group":
        rows = [r for r in rows if r["region"] == "a"]
    elif case == "empty texts":
        rows = [{**r, "first sentence": " "} for r in rows]
    elif case == "header only":
        rows = []
    else:  # a only under Tennis, b only under Medicine
        rows = [r for r in rows if (r["q_text"] == "Tennis") == (r["region"] == "a")]
    mine = tmp_path / "mine.csv"
    with open(mine, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
    args = [
        "study", "--data", str(mine), "--target", '{"a": 0.5, "b": 0.5}', "--group-key",
        "region", "--trials", "2", "--llm", "none", "--no-progress",
        "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
    ]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "trials need" not in err and "Traceback" not in err
    if case != "groups apart":
        assert str(mine) in err
    assert not (tmp_path / "cache" / "index").exists()  # refused before any embedding
