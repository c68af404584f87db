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

PAPER_RANKERS = ["standard", "stochastic", "forced_exposure", "representative_stochastic"]
RANKERS = [*PAPER_RANKERS, "fair", "amortized"]
"""Every ranker runs by default: the paper's four, then FA*IR and the amortized ranker."""
TOPICS = "Computer science,Medicine,Tennis"


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    """One small study: 3 topics x 12 documents per gender, 12 trials per ranker (every ranker,
    the default), fake LLM."""
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
        "table_fairness_gap_magnitude.md", "table_ee_loss.md", "table_ee_disparity.md",
        "table_ee_relevance.md", "table_awrf.md", "table_trec_ndcg.md", "table_trec_score.md",
        "table_amortized_disparity.md", "trial_metrics.csv", "table_amortized_frontier.md",
        "figures/retrieval.png", "figures/generation.png", "figures/many_rankings.png",
        "figures/amortized_frontier.png",
    ]  # fmt: skip
    for name in expected:
        assert (out / name).is_file(), name
    for png in ("figures/retrieval.png", "figures/generation.png", "figures/many_rankings.png",
                "figures/amortized_frontier.png"):  # fmt: skip
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert not list(out.glob("*.tmp"))


def test_records_one_per_ranker_and_trial_same_questions_for_every_ranker(study_run):
    out, _, _ = study_run
    records = _records(out)
    assert len(records) == len(RANKERS) * 12
    assert [x["ranker"] for x in records[::12]] == RANKERS
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
    assert len(rows) == len(RANKERS) * (len(RANKERS) - 1) // 2
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


def _section(report: str, title: str) -> str:
    """The text of a report's ``## title`` section, up to the next ``## ``."""
    start = report.index(f"## {title}")
    end = report.find("\n## ", start + 3)
    return report[start : None if end < 0 else end]


def _summary(out):
    with open(out / "summary.csv") as handle:
        return {(r["metric"], r["ranker"]): r for r in csv.DictReader(handle)}


def _trial_metrics(out):
    with open(out / "trial_metrics.csv") as handle:
        return {(r["ranker"], int(r["trial"])): r for r in csv.DictReader(handle)}


DCG = 1.0 / np.log2(np.arange(2, 7))
"""v_1..v_5, the exposure model's weights (1 / log2(i + 1))."""
MANY = ("ee_loss", "ee_disparity", "ee_relevance", "awrf", "trec_ndcg", "trec_score")


def test_fair_and_amortized_have_rows_in_every_table_but_the_papers(study_run):
    out, _, _ = study_run
    summary = _summary(out)
    metrics = {metric for metric, _ in summary}
    assert {*MANY, "amortized_disparity", "exposure_disparity", "ndcg_at_k"} <= metrics
    for metric in metrics:
        for ranker in RANKERS:
            row = summary[(metric, ranker)]
            assert row["aggregate"] == ("stream" if metric == "amortized_disparity" else "mean")
            assert int(row["n"]) == 12
    for name in ("table_ee_loss.md", "table_awrf.md", "table_trec_score.md",
                 "table_amortized_disparity.md", "table1_exposure_disparity.md"):  # fmt: skip
        table = (out / name).read_text()
        assert all(f"| {ranker} | " in table for ranker in RANKERS), name
    assert len(_trial_metrics(out)) == len(RANKERS) * 12
    assert {row["samples"] for row in _trial_metrics(out).values()} == {"100"}
    report = (out / "report.md").read_text()
    beside = _section(report, "This run beside the paper")
    assert all(f"| {ranker} | " in beside for ranker in PAPER_RANKERS)
    assert "| fair |" not in beside and "| amortized |" not in beside
    every = _section(report, "Every ranker")
    many = _section(report, "Over many rankings")
    for ranker in ("fair", "amortized"):
        for metric in ("exposure_disparity", "ndcg_at_k", "groundedness", *MANY):
            assert f"| {metric} | {ranker} | " in every, (metric, ranker)
        assert f"\n| {ranker} | " in many
    for reading in ("- EE-L", "- EE-D", "- EE-R", "- AWRF", "- TREC 2022 score", "- Amortized"):
        assert reading in many
    # The paper's t-test pattern is still stated for its four rankers.
    assert "Among the paper's four: " in report


def test_amortized_disparity_is_that_of_the_shown_rankings_in_trial_order(study_run):
    out, _, _ = study_run
    records = _records(out)
    summary = _summary(out)
    table = (out / "table_amortized_disparity.md").read_text()
    for ranker in RANKERS:
        stream = sorted((r for r in records if r["ranker"] == ranker), key=lambda r: r["trial"])
        female = sum(DCG[i] for r in stream for i, g in enumerate(r["groups"]) if g == "female")
        total = sum(DCG[: len(r["groups"])].sum() for r in stream)
        expected = abs(female / total - 0.5)
        assert float(summary[("amortized_disparity", ranker)]["mean"]) == pytest.approx(
            expected, abs=1e-12
        )
        assert f"| {ranker} | {expected:.4f} | {female / total:.4f} | 12 |" in table
    # The amortized ranker balances its stream: far below its own per-query disparity.
    per_query = float(summary[("exposure_disparity", "amortized")]["mean"])
    assert float(summary[("amortized_disparity", "amortized")]["mean"]) < per_query / 2


FRONTIER_ROWS = (
    "`representative_stochastic` (the reference)",
    "`amortized` alpha 7, spread 4 (defaults)",
    "`amortized` alpha 8, no spread (old defaults)",
    "`amortized` alpha 4, no spread",
    "`amortized` alpha 6.5, spread 4",
    "`amortized` alpha 8, spread 4",
)
"""The settings the study's frontier measures (issue 26), in the report's order."""


def _frontier_rows(text: str) -> dict[str, list[str]]:
    """``{setting: cells}`` of the frontier table in ``text``."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def _value_and_ratio(cell: str) -> tuple[float, float]:
    value, ratio = re.fullmatch(r"([-\d.]+) \(([-\d.]+|n/a)\)", cell).groups()
    return float(value), math.nan if ratio == "n/a" else float(ratio)


def test_the_report_holds_the_amortized_frontier_with_real_numbers(study_run):
    """Issue 26, "the study's report includes the amortized frontier": one row per setting
    with the three goal metrics beside representative_stochastic's. The defaults' stream is
    the study's own amortized stream (its disparity and nDCG@5 loss follow from the records),
    and its document EE-L is that of draws from the ledger each trial read."""
    from fairrag_core.metrics import document_expected_exposure
    from fairrag_study.dataset import TREC_GENDER
    from fairrag_study.frontier import SAMPLE_STREAM
    from fairrag_study.many_rankings import SnapshotLedger, build_ranker
    from fairrag_study.study import StudyConfig
    from fairrag_study.sweep import load_pools

    out, cache, _ = study_run
    report = (out / "report.md").read_text()
    section = _section(report, "The amortized ranker's frontier")
    rows = _frontier_rows(section)
    assert list(rows) == list(FRONTIER_ROWS)
    assert _frontier_rows((out / "table_amortized_frontier.md").read_text()) == rows
    figures = {}
    for setting, cells in rows.items():
        disparity = float(cells[0])
        loss, loss_ratio = _value_and_ratio(cells[1])
        ee, ee_ratio = _value_and_ratio(cells[2])
        distinct, entropy = float(cells[3]), float(cells[4])
        for value in (disparity, loss, ee, distinct, entropy):
            assert math.isfinite(value), (setting, cells)
        assert 0 <= disparity < 0.5 and ee > 0 and 1 <= distinct <= 100 and entropy >= 0
        figures[setting] = (disparity, loss, loss_ratio, ee, ee_ratio, distinct, cells[5])
    reference = figures[FRONTIER_ROWS[0]]
    assert reference[2] == 1.0 and reference[4] == 1.0
    for setting, (disparity, loss, loss_ratio, ee, ee_ratio, _, goals) in figures.items():
        assert loss_ratio == pytest.approx(loss / reference[1], abs=0.006), setting
        assert ee_ratio == pytest.approx(ee / reference[3], abs=0.006), setting
        met = (disparity < 0.01, ee <= reference[3], loss <= 0.65 * reference[1])
        assert goals == " / ".join("yes" if m else "no" for m in met), setting
    # The defaults' stream is the trials' amortized stream, ranking for ranking.
    defaults = figures[FRONTIER_ROWS[1]]
    summary = _summary(out)
    assert defaults[0] == pytest.approx(
        float(summary[("amortized_disparity", "amortized")]["mean"]), abs=5e-5
    )
    ndcg = {r: float(summary[("ndcg_at_k", r)]["mean"]) for r in ("standard", "amortized")}
    assert defaults[1] == pytest.approx(ndcg["standard"] - ndcg["amortized"], abs=5e-5)
    # Spread: the defaults vary the top five more than the old defaults (alpha 8, no spread).
    assert defaults[5] > figures[FRONTIER_ROWS[2]][5]
    # Its document EE-L: 100 draws per trial from the ledger that trial read (the records).
    config = StudyConfig(
        data=data_path_or_skip(), cache_dir=cache, topics=tuple(TOPICS.split(",")),
        per_group=12, trials=12, llm="none", progress=False,
    )  # fmt: skip
    pools = load_pools(config, lambda _: None)
    served: dict[str, float] = {}
    losses = []
    shown = sorted(
        (r for r in _records(out) if r["ranker"] == "amortized"), key=lambda r: r["trial"]
    )
    for record in shown:
        pool = pools[record["trial"]]
        ledger = SnapshotLedger(served, 0)
        ranker = build_ranker("amortized", alpha=4.0, dataset=TREC_GENDER, seed=2026, ledger=ledger)
        rng = np.random.default_rng((pool.trial.seed, SAMPLE_STREAM))
        drawn = ranker.sample(pool.scores, pool.groups, 5, 100, rng=rng)
        losses.append(document_expected_exposure(drawn, pool.relevant.astype(float)).loss)
        for i, group in enumerate(record["groups"]):
            served[group] = served.get(group, 0.0) + DCG[i]
    assert defaults[3] == pytest.approx(float(np.mean(losses)), abs=5e-4)
    assert "Settings meeting all three goals on this run: " in section


def _corpus():
    from fairrag_study.data import build_corpus, load_documents

    documents = load_documents(data_path_or_skip())
    return build_corpus(documents, topics=TOPICS.split(","), per_group=12)


def _kl(p, q) -> float:
    """Kullback-Leibler divergence in nats (0 log 0 = 0)."""
    return sum(x * math.log(x / y) for x, y in zip(p, q, strict=True) if x > 0)


def test_awrf_and_trec_score_are_those_of_each_shown_ranking(study_run):
    out, _, _ = study_run
    corpus = _corpus()
    topics_of = {doc.doc_id: doc.topics for doc in corpus}
    discount = 1.0 / np.log2(np.maximum(np.arange(1, 6), 2))  # TREC: 1/log2(max(i, 2))
    target = np.array([0.5, 0.5])
    measured = _trial_metrics(out)
    for record in _records(out):
        shown = np.array([[g == "female", g != "female"] for g in record["groups"]], dtype=float)
        a = discount @ shown / discount.sum()
        m = (a + target) / 2
        awrf = 1.0 - (_kl(a, m) + _kl(target, m)) / 2  # 1 - JSD^2 (natural log)
        relevant = [record["topic"] in topics_of[doc_id] for doc_id in record["doc_ids"]]
        in_topic = sum(record["topic"] in topics for topics in topics_of.values())
        ndcg = discount[: len(relevant)] @ relevant / discount[: min(5, in_topic)].sum()
        row = measured[(record["ranker"], record["trial"])]
        assert float(row["awrf"]) == pytest.approx(awrf, abs=1e-12)
        assert float(row["trec_ndcg"]) == pytest.approx(ndcg, abs=1e-12)
        assert float(row["trec_score"]) == pytest.approx(ndcg * awrf, abs=1e-12)


def test_expected_exposure_is_drawn_from_each_trials_pool(study_run):
    """EE by hand from the draws; the pools are the trials' (the first draw of every ranker,
    the amortized one from a ledger rebuilt from the records, is the ranking shown), and a
    deterministic ranker's EE is its shown ranking's exposure."""
    from fairrag_study.dataset import TREC_GENDER
    from fairrag_study.many_rankings import SnapshotLedger, build_ranker
    from fairrag_study.study import StudyConfig
    from fairrag_study.sweep import load_pools

    out, cache, _ = study_run
    config = StudyConfig(
        data=data_path_or_skip(), cache_dir=cache, topics=tuple(TOPICS.split(",")),
        per_group=12, trials=12, llm="none", progress=False,
    )  # fmt: skip
    pools = load_pools(config, lambda _: None)
    measured = _trial_metrics(out)
    target = DCG.sum() / 2  # T_female = T_male
    for ranker in RANKERS:
        served: dict[str, float] = {}  # the amortized stream's exposure before each trial
        for record in sorted(
            (r for r in _records(out) if r["ranker"] == ranker), key=lambda r: r["trial"]
        ):
            pool = pools[record["trial"]]
            ledger = SnapshotLedger(served, 0) if ranker == "amortized" else None
            built = build_ranker(ranker, alpha=4.0, dataset=TREC_GENDER, seed=2026, ledger=ledger)
            draws = built.sample(pool.scores, pool.groups, 5, 100, rng=pool.trial.seed)
            assert [pool.doc_ids[i] for i in draws[0]] == record["doc_ids"], (ranker, record)
            female = np.mean(
                [
                    sum(DCG[i] for i, d in enumerate(row) if pool.groups[d] == "female")
                    for row in draws
                ]
            )
            exposure = np.array([female, DCG.sum() - female])
            row = measured[(ranker, record["trial"])]
            assert float(row["ee_loss"]) == pytest.approx(((exposure - target) ** 2).sum())
            assert float(row["ee_disparity"]) == pytest.approx((exposure**2).sum())
            assert float(row["ee_relevance"]) == pytest.approx((exposure * target).sum())
            if ranker in ("standard", "forced_exposure", "fair"):  # one ranking, repeated
                shown = sum(DCG[i] for i, g in enumerate(record["groups"]) if g == "female")
                assert female == pytest.approx(shown)
            for i, group in enumerate(record["groups"]):
                served[group] = served.get(group, 0.0) + DCG[i]


def test_differences_from_the_paper_are_named_with_this_runs_figures(study_run):
    out, _, _ = study_run
    report = (out / "report.md").read_text()
    section = _section(report, "Differences from the paper")
    standard = float(_summary(out)[("exposure_share", "standard")]["mean"])
    for words in (
        "**Document text.**", "first sentence", "first 100 words",
        "**Corpus.** This run: 72 documents from 3 topics", "4,800",
        "**Seeds.**", "study seed 2026", "**Index.**", "ef_search 2,000",
        "**Generator.**", "fake generator", "gpt-4o-mini at temperature 0.1",
        "**Setting.** This run: trials per ranker 12",
        f"**Baseline gap.** This run's standard ranker gives women {100 * standard:.2f}%",
        "12.50%",
    ):  # fmt: skip
        assert words in section, words
    assert section.count("Likely effect") + section.count("Effect:") == section.count("- **")


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
    assert len(_records(out)) == len(RANKERS) * 12
    assert re.search(r"peak memory \d+ MiB", printed)
    for phase in ("load", "embed", "trials", "many rankings", "report"):
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
    import fairrag_study.phases.trials as study_module

    out, _, args = study_run
    real = study_module.trial_record
    calls = {"n": 0}

    def interrupt_after_five(*a, **kw):
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(study_module, "trial_record", interrupt_after_five)
    assert main(args) == 130
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line)["ranker"] == "standard" for line in lines)
    assert not (out / "report.md").exists() and not (out / "table1_exposure_disparity.md").exists()
    monkeypatch.setattr(study_module, "trial_record", real)
    assert main(args) == 0
    assert len(_records(out)) == len(RANKERS) * 12
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert "interrupted" in capsys.readouterr().out
