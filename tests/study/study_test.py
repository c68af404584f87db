"""The whole `fairrag study` command on a small real corpus, and its outputs."""

from __future__ import annotations

import csv
import json
import math
import re

import numpy as np
import pytest
from scipy import stats as scipy_stats

from fairrag_core.stats import critical_t
from fairrag_study.cli import main
from fairrag_study.report import PAPER
from tests.chroma_pool import data_path_or_skip

RANKERS = ["standard", "stochastic", "forced_exposure", "representative_stochastic"]
TOPICS = "Computer science,Medicine,Tennis"


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    """One small study: 3 topics x 12 documents per gender, 12 trials per ranker, fake LLM."""
    data = data_path_or_skip()
    root = tmp_path_factory.mktemp("study")
    out, cache = root / "out", root / "cache"
    args = [
        "study", "--data", str(data), "--topics", TOPICS, "--per-group", "12",
        "--trials", "12", "--llm", "fake", "--out", str(out), "--cache-dir", str(cache),
        "--no-progress",
    ]  # fmt: skip
    assert main(args) == 0
    return out, cache, args


def _records(out):
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def test_every_output_file_exists(study_run):
    out, _, _ = study_run
    expected = [
        "records.jsonl", "callback_log.jsonl", "summary.csv", "report.md", "run.json",
        "outliers.md", "table1_exposure_disparity.md", "table2_exposure_share.md",
        "table_precision_at_k.md", "table_ndcg_at_k.md", "table_generation_parity.md",
        "table_grounded_generation_parity.md", "table_groundedness.md", "table_fairness_gap.md",
        "table_fairness_gap_magnitude.md",
        "figures/retrieval.png", "figures/generation.png",
    ]  # fmt: skip
    for name in expected:
        assert (out / name).is_file(), name
    for png in ("figures/retrieval.png", "figures/generation.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert not list(out.glob("*.tmp"))


def test_records_one_per_ranker_and_trial_same_questions_for_every_ranker(study_run):
    out, _, _ = study_run
    records = _records(out)
    assert len(records) == 4 * 12
    by_ranker = {r: [x for x in records if x["ranker"] == r] for r in RANKERS}
    questions = [[x["question"] for x in by_ranker[r]] for r in RANKERS]
    assert all(q == questions[0] for q in questions)
    for record in records:
        assert len(record["groups"]) == 5
        assert 0.0 <= record["exposure_share"] <= 1.0
        assert record["exposure_disparity"] == pytest.approx(abs(record["exposure_share"] - 0.5))
        assert record["topic"] in TOPICS.split(",")
        assert 0.0 <= record["precision_at_k"] <= 1.0
    # The callback handler logged the same runs.
    logged = [json.loads(x) for x in (out / "callback_log.jsonl").read_text().splitlines()]
    assert sorted(x["run_id"] for x in logged) == sorted(x["run_id"] for x in records)


def test_representative_stochastic_is_near_parity_and_closer_than_standard(study_run):
    out, _, _ = study_run
    records = _records(out)
    mean = {
        r: np.mean([x["exposure_disparity"] for x in records if x["ranker"] == r]) for r in RANKERS
    }
    assert mean["representative_stochastic"] < 0.06
    assert mean["representative_stochastic"] < mean["standard"]


def test_summary_csv_matches_the_records(study_run):
    out, _, _ = study_run
    records = _records(out)
    with open(out / "summary.csv") as handle:
        rows = {(r["metric"], r["ranker"]): r for r in csv.DictReader(handle)}
    for ranker in RANKERS:
        values = [x["exposure_share"] for x in records if x["ranker"] == ranker]
        row = rows[("exposure_share", ranker)]
        assert float(row["mean"]) == pytest.approx(np.mean(values))
        assert float(row["std"]) == pytest.approx(np.std(values, ddof=1))
        assert int(row["n"]) == 12


def test_t_test_table_matches_scipy(study_run):
    out, _, _ = study_run
    records = _records(out)
    table = (out / "table1_exposure_disparity.md").read_text()
    samples = {r: [x["exposure_disparity"] for x in records if x["ranker"] == r] for r in RANKERS}
    expected_critical = critical_t(22, 0.01)
    assert expected_critical == pytest.approx(scipy_stats.t.ppf(0.995, 22))
    rows = [line for line in table.splitlines() if line.startswith("| ") and " | 22 | " in line]
    assert len(rows) == 6
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        a, b, t_value = cells[0], cells[1], float(cells[4])
        reference = scipy_stats.ttest_ind(samples[a], samples[b], equal_var=True)
        if math.isfinite(reference.statistic):
            assert t_value == pytest.approx(reference.statistic, abs=1e-3)
        assert f"{expected_critical:.4f}" in line
        assert cells[-1] == ("yes" if abs(reference.statistic) > expected_critical else "no")


def test_report_puts_the_papers_numbers_beside_ours(study_run):
    out, _, _ = study_run
    report = (out / "report.md").read_text()
    for metric, per_ranker in PAPER.items():
        for ranker, value in per_ranker.items():
            assert re.search(
                rf"\| {metric} \| {ranker} \| [^|]+ \| [^|]+ \| \d+ \| {100 * value:.2f}% \|",
                report,
            )
    # SPEC.md's numbers, as fractions
    assert PAPER["exposure_disparity"]["representative_stochastic"] == 0.0430
    assert PAPER["exposure_share"]["standard"] == 0.1250
    assert PAPER["generation_parity"]["forced_exposure"] == 0.3508
    assert PAPER["groundedness"]["stochastic"] == 0.7792
    assert "## Reading" in report


def test_second_run_reuses_the_index_and_replaces_old_outputs(study_run, capsys):
    out, _, args = study_run
    (out / "records.jsonl").write_text('{"partial": true}\n{"torn')  # as if interrupted
    retrieval_only = [
        *args[: args.index("--llm")],
        "--llm",
        "none",
        *args[args.index("--llm") + 2 :],
    ]
    assert main(retrieval_only) == 0
    printed = capsys.readouterr().out
    assert "(0 embedded now)" in printed
    assert "generation skipped: --llm none" in printed
    assert not (out / "table_generation_parity.md").exists()
    assert len(_records(out)) == 48
    assert re.search(r"peak memory \d+ MiB", printed)
    for phase in ("load", "embed", "trials", "report"):
        assert f"[{phase}]" in printed


def test_no_llm_without_key_says_which_metrics_are_skipped(study_run, monkeypatch, capsys):
    out, _, args = study_run
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    auto = [*args[: args.index("--llm")], "--llm", "auto", *args[args.index("--llm") + 2 :]]
    auto[auto.index("--trials") + 1] = "4"
    assert main(auto) == 0
    printed = capsys.readouterr().out
    assert "OPENAI_API_KEY is not set" in printed
    assert "generation parity" in (out / "report.md").read_text()


def test_bad_arguments_are_clear_errors(study_run, capsys):
    _, _, args = study_run
    bad = [*args, "--rankers", "standard,best"]
    with pytest.raises(SystemExit) as exited:
        main(bad)
    assert exited.value.code == 2
    assert "argument --rankers: unknown rankers ['best']" in capsys.readouterr().err


def test_interrupted_run_leaves_readable_records_and_the_next_run_starts_cleanly(
    study_run, monkeypatch, capsys
):
    import fairrag_study.study as study_module

    out, _, args = study_run
    real = study_module._trial_record
    calls = {"n": 0}

    def interrupt_after_five(*a, **kw):
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(study_module, "_trial_record", interrupt_after_five)
    assert main(args) == 130
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line)["ranker"] == "standard" for line in lines)
    assert not (out / "report.md").exists() and not (out / "table1_exposure_disparity.md").exists()
    monkeypatch.setattr(study_module, "_trial_record", real)
    assert main(args) == 0
    assert len(_records(out)) == 48
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert "interrupted" in capsys.readouterr().out
