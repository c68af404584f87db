"""The study's rankers and its report's differences from the paper, without a study run: which
rankers run on which data set, with which parameters, the amortized ranker's frozen ledger, and
the differences section's wording for each case it reads from the run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fairrag_core import make_ranker
from fairrag_core.ledger import MemoryLedger
from fairrag_core.stats import Descriptive
from fairrag_study.dataset import PAPER_RANKERS, TREC_GENDER, custom_dataset
from fairrag_study.many_rankings import (
    FAIR_ALPHA,
    STREAM_KEY,
    SnapshotLedger,
    build_ranker,
    ranker_fields,
    study_rankers,
)
from fairrag_study.plan import Trial
from fairrag_study.pools import NotInPoolError, QuestionPool
from fairrag_study.report import RunFacts, differences, full_topics

THREE = custom_dataset({"a": 0.4, "b": 0.3, "c": 0.3})


def test_every_ranker_runs_on_the_paper_data_and_fair_is_left_out_of_three_groups():
    rankers, left_out = study_rankers(None, alpha=4.0, dataset=TREC_GENDER)
    assert rankers == (*PAPER_RANKERS, "fair", "amortized") and left_out == {}
    rankers, left_out = study_rankers(None, alpha=4.0, dataset=THREE)
    assert "fair" not in rankers and "amortized" in rankers
    assert "binary target" in left_out["fair"]
    assert study_rankers(PAPER_RANKERS, alpha=4.0, dataset=THREE) == (PAPER_RANKERS, {})
    with pytest.raises(ValueError, match=r"'fair' cannot rank .* rankers that can: \["):
        study_rankers(("standard", "fair"), alpha=4.0, dataset=THREE)


def test_the_new_rankers_get_the_parameters_the_core_expects():
    fair = build_ranker("fair", alpha=4.0, dataset=TREC_GENDER, seed=0)
    assert (fair.p, fair.alpha) == (0.5, FAIR_ALPHA)  # p = the protected group's target share
    assert build_ranker("stochastic", alpha=2.0, dataset=TREC_GENDER, seed=0).alpha == 2.0
    ledger = MemoryLedger()
    fields = ranker_fields("amortized", alpha=4.0, dataset=TREC_GENDER, ledger=ledger)
    assert fields == {"ranker_params": {}, "ledger": ledger, "ledger_key": STREAM_KEY}
    amortized = build_ranker("amortized", alpha=4.0, dataset=TREC_GENDER, seed=0, ledger=ledger)
    default = make_ranker("amortized", protected="female")
    assert (amortized.alpha, amortized.gain) == (default.alpha, default.gain)  # core defaults
    assert amortized.ledger is ledger and amortized.ledger_key == STREAM_KEY
    # Each study run's amortized retriever gets a fresh ledger.
    first = ranker_fields("amortized", alpha=4.0, dataset=TREC_GENDER)["ledger"]
    assert first is not ranker_fields("amortized", alpha=4.0, dataset=TREC_GENDER)["ledger"]


def test_a_snapshot_ledger_reads_one_instant_and_serves_nothing():
    totals = {"female": 1.5, "male": 4.25}
    snapshot = SnapshotLedger(totals, 3)
    ranker = build_ranker("amortized", alpha=4.0, dataset=TREC_GENDER, seed=0, ledger=snapshot)
    scores = np.linspace(1.0, 0.5, 12)
    groups = ["male"] * 8 + ["female"] * 4
    draws = ranker.sample(scores, groups, 5, 50, rng=7)
    state = snapshot.state(STREAM_KEY)
    assert (state.totals, state.rankings) == (totals, 3)  # 50 draws, nothing added
    # The first draw is what a live ledger holding those totals draws with the same seed.
    live = MemoryLedger()
    live.add(STREAM_KEY, totals)
    same = build_ranker("amortized", alpha=4.0, dataset=TREC_GENDER, seed=0, ledger=live)
    assert same.rank(scores, groups, 5, rng=7).tolist() == draws[0].tolist()
    with pytest.raises(TypeError, match="read-only"):
        snapshot.reset(STREAM_KEY)


FACTS = RunFacts(
    corpus_kind="balanced",
    documents=3366,
    topics=48,
    full_topics=24,
    per_group=50,
    seed=2026,
    trials=80,
    pool_size=50,
    k=5,
    ef_search=2000,
    generator="openai:gpt-4o-mini",
    temperature=0.1,
)
STANDARD = {"exposure_share": {"standard": Descriptive(0.2748, 0.1, 80, 0)}}


def _bullet(lines: list[str], name: str) -> str:
    return next(line for line in lines if line.startswith(f"**{name}.**"))


def test_differences_read_the_runs_facts():
    lines = differences(STANDARD, {}, FACTS)
    assert all(line.startswith("**") for line in lines)  # one bullet per difference
    corpus = _bullet(lines, "Corpus")
    assert "3,366 documents from 48 topics" in corpus and "only 24 of the 48 topics" in corpus
    assert "4,800" in corpus
    assert "first sentence" in _bullet(lines, "Document text")  # no text key: the CSV's
    assert "as the paper" in _bullet(lines, "Generator")
    gap = _bullet(lines, "Baseline gap")
    assert "27.48%" in gap and "12.50%" in gap and "+14.98 points" in gap and "less" in gap
    assert not any(line.startswith("**Setting.**") for line in lines)  # the paper's setting


def test_differences_name_an_exposure_model_other_than_the_papers():
    """A user trial: with ``--exposure uniform`` (or a fitted curve) the differences never
    named the exposure model, and the baseline gap set a uniform share beside the paper's DCG
    one as if both were DCG."""
    assert not any("Exposure model" in line for line in differences(STANDARD, {}, FACTS))
    uniform = dataclasses.replace(FACTS, exposure="uniform")
    lines = differences(STANDARD, {}, uniform)
    assert "`uniform` position weights" in _bullet(lines, "Exposure model")
    assert "under `uniform` weights; the paper's under DCG" in _bullet(lines, "Baseline gap")


@pytest.mark.parametrize(
    "text, words",
    [
        ("csv", "first sentence of each biography"),
        ("wikipedia (first 100 words)", "`wikipedia (first 100 words)`, the paper's source"),
        ("Wikipedia", "the paper's source"),
    ],
)
def test_the_text_difference_follows_the_config(text: str, words: str):
    assert words in _bullet(differences(STANDARD, {"document text": text}, FACTS), "Document text")


@pytest.mark.parametrize(
    "generator, temperature, words",
    [
        ("none", None, "This run: none (no key). The paper: gpt-4o-mini at temperature 0.1."),
        ("fake", None, "test double"),
        ("openai:gpt-4o-mini", 0.1, "as the paper"),
        ("openai:gpt-4.1", 0.1, "This run: gpt-4.1 at temperature 0.1. The paper:"),
        ("openai:gpt-4o-mini", None, "at an unknown temperature. The paper:"),
    ],
)
def test_the_generator_difference_names_model_and_temperature(generator, temperature, words):
    facts = RunFacts(**{**FACTS.__dict__, "generator": generator, "temperature": temperature})
    assert words in _bullet(differences(STANDARD, {}, facts, "no key."), "Generator")


def test_a_generator_on_another_server_is_not_the_papers():
    """A run of ``openai:gpt-4o-mini`` against a local server was written up as "as the
    paper" (the report named no server; a researcher's trial)."""
    paper = {**FACTS.__dict__, "generator": "openai:gpt-4o-mini", "temperature": 0.1}
    local = RunFacts(**{**paper, "server": "http://127.0.0.1:8000/v1"})
    bullet = _bullet(differences(STANDARD, {}, local), "Generator")
    assert "served by http://127.0.0.1:8000/v1" in bullet and "as the paper" not in bullet
    openai = RunFacts(**{**paper, "server": "https://api.openai.com/v1"})
    assert "as the paper" in _bullet(differences(STANDARD, {}, openai), "Generator")


@pytest.mark.parametrize(
    "llm_format, words, not_words",
    [
        ("free", "rarely writes the requested citation format", "constrained decoding"),
        ("paper", "measured for every answer", "mostly n/a"),
    ],
)
def test_the_local_generator_difference_follows_the_answer_format(llm_format, words, not_words):
    facts = RunFacts(**{**FACTS.__dict__, "generator": "local:smollm2", "llm_format": llm_format})
    bullet = _bullet(differences(STANDARD, {}, facts), "Generator")
    assert words in bullet and not_words not in bullet


def test_a_smaller_or_natural_run_says_so():
    small = RunFacts(**{**FACTS.__dict__, "documents": 72, "topics": 3, "full_topics": 3,
                        "per_group": 12, "trials": 12, "k": 3})  # fmt: skip
    lines = differences({}, {}, small)
    assert "(3 topics x 12 per group: a smaller run)" in _bullet(lines, "Corpus")
    setting = _bullet(lines, "Setting")
    assert "trials per ranker 12, k 3; the paper: trials per ranker 80, k 5" in setting
    assert not any(line.startswith("**Baseline gap.**") for line in lines)  # no standard
    natural = RunFacts(**{**FACTS.__dict__, "corpus_kind": "natural", "documents": 19466})
    assert "the natural corpus, 19,466 documents" in _bullet(differences({}, {}, natural), "Corpus")


def test_full_topics_counts_topics_holding_enough_of_every_group():
    class Doc:
        def __init__(self, group: str, *topics: str) -> None:
            self.group, self.topics = group, topics

    documents = [Doc("female", "x", "y"), Doc("male", "x"), Doc("male", "y"), Doc("female", "x")]
    assert full_topics(documents, ["x", "y"], 1, ("female", "male")) == 2
    assert full_topics(documents, ["x", "y"], 2, ("female", "male")) == 0
    assert full_topics(documents, ["x"], 2, ("female",)) == 1
    assert full_topics([], ["x"], 1, ("female",)) == 0


def test_a_shown_document_is_placed_in_its_pool_or_named_as_missing():
    pool = QuestionPool(
        Trial(3, 1, "Tennis", "Who?", 0),
        ("a", "b", "c"),
        np.array([0.9, 0.8, 0.7]),
        ["female", "male", "female"],
        np.array([True, False, True]),
        2,
    )
    assert pool.positions(["c", "a"]).tolist() == [2, 0]
    with pytest.raises(NotInPoolError, match=r"\['z'\] are not in the pool of trial 3"):
        pool.positions(["a", "z"])


@pytest.mark.parametrize("exposure", ["rbp(0.8)", "uniform"])
def test_the_metrics_over_many_rankings_use_the_studys_exposure_model(exposure):
    """``fairrag study --exposure rbp(0.8)``: the records' shares were under RBP but the
    stream's amortized disparity, its shares and EE-L/D/R were the DCG ones (a user trial:
    amortized disparity 0.0200 where the records' mean share gave 0.0427; EE-R 4.3467 under
    every model)."""
    from fairrag_core.exposure import make_exposure_model
    from fairrag_core.metrics import exposure_share
    from fairrag_study.many_rankings import measure

    groups = ["male", "female", "male", "male", "female", "male", "female", "male"]
    pools = [
        QuestionPool(
            Trial(i, 1, "Tennis", "Who?", i),
            tuple(f"d{i}-{j}" for j in range(8)),
            np.linspace(0.9, 0.2, 8),
            groups,
            np.ones(8, dtype=bool),
            8,
        )
        for i in range(3)
    ]
    shown = [0, 1, 2, 3, 4]  # the standard ranker's top-5 of each pool
    records = [
        {
            "ranker": "standard",
            "trial": pool.trial.index,
            "doc_ids": [pool.doc_ids[j] for j in shown],
            "groups": [groups[j] for j in shown],
        }
        for pool in pools
    ]
    many = measure(
        pools,
        records,
        ["standard"],
        dataset=TREC_GENDER,
        k=5,
        samples=4,
        alpha=4.0,
        seed=0,
        exposure=exposure,
    )
    model = make_exposure_model(exposure)
    share = exposure_share([groups[j] for j in shown], "female", exposure=model)
    stream = many.streams["standard"]
    assert stream.disparity == pytest.approx(abs(share - 0.5))
    weights = model.weights(5)
    female = sum(w for w, j in zip(weights, shown, strict=True) if groups[j] == "female")
    target = 0.5 * weights.sum()
    male = weights.sum() - female
    assert many.trials[0]["ee_relevance"] == pytest.approx(female * target + male * target)
