"""The position-curve phase (`fairrag study --position-curve N`) recovers a known curve: a fake
generator (FakeCurveChatModel, not a model) cites position i with probability w_i."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from fairrag_core.exposure import load_fitted_curve, make_exposure_model
from fairrag_core.position_curve import fit_curve, observation_from_record, wilson_interval
from fairrag_langchain.fakes import FakeCurveChatModel
from fairrag_study.data import CorpusDocument
from fairrag_study.dataset import TREC_GENDER
from fairrag_study.plan import Trial
from fairrag_study.pools import QuestionPool
from fairrag_study.position_curve import POSITION_CURVE_FILES, run_position_curve

CURVE = [0.9, 0.6, 0.4, 0.3, 0.2]
K = 5


def _synthetic(questions: int) -> tuple[list[QuestionPool], list[CorpusDocument]]:
    """``questions`` pools of 8 candidates over 6 topics, groups alternating (no index: the
    phase only reads each pool's order)."""
    corpus, pools = [], []
    rng = np.random.default_rng(7)
    for q in range(questions):
        topic = f"Topic {q % 6}"
        ids = []
        for j in range(8):
            doc_id = f"d{q}-{j}"
            group = "female" if (q + j) % 2 else "male"
            name = " ".join(_word(rng) for _ in range(2))  # distinct people, no shared name
            corpus.append(CorpusDocument(doc_id, name, "A biography.", group, (topic,)))
            ids.append(doc_id)
        trial = Trial(q, 1, topic, f"Who are notable people in {topic}?", int(rng.integers(1e9)))
        groups = [d.group for d in corpus[-8:]]
        pools.append(
            QuestionPool(trial, tuple(ids), np.linspace(0.9, 0.5, 8), groups, np.ones(8, bool), 8)
        )
    return pools, corpus


def _word(rng: np.random.Generator) -> str:
    return "".join(chr(c) for c in rng.integers(97, 123, 7)).capitalize()


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("curve")
    pools, corpus = _synthetic(240)
    curve = _run(200, pools, corpus, FakeCurveChatModel(curve=CURVE, seed=3), out)
    return out, curve


def _run(questions, pools, corpus, llm, out, **options):
    """The phase on ``pools`` with the tests' settings (k, seed), quietly."""
    return run_position_curve(
        questions,
        pools,
        corpus,
        llm,
        dataset=TREC_GENDER,
        k=K,
        seed=11,
        model_name=options.pop("model_name", "fake-curve"),
        out=out,
        log=lambda _: None,
        **options,
    )


def test_every_position_rate_interval_covers_the_fakes_curve(measured):
    _, curve = measured
    overall = sorted((r for r in curve.rates if r.group is None), key=lambda r: r.position)
    assert [r.shown for r in overall] == [1000] * K  # 200 questions x 5 shifts, each position
    for rate, truth in zip(overall, CURVE, strict=True):
        assert rate.low <= truth <= rate.high, (rate, truth)
    # Per group too: the fake ignores the group, so each group's rate is the curve's. Ten
    # intervals at 95% miss one by chance about half the time: Bonferroni (z for 0.05 / 10).
    by_group = [r for r in curve.rates if r.group is not None]
    assert len(by_group) == 2 * K
    for rate in by_group:
        low, high = wilson_interval(rate.attributed, rate.shown, z=2.807)
        assert low <= CURVE[rate.position - 1] <= high, rate


def test_the_fitted_weights_cover_the_normalised_curve_and_the_held_out_half(measured):
    _, curve = measured
    truth = np.array(CURVE) / sum(CURVE)
    fitted = curve.fitted
    assert sum(fitted.weights) == pytest.approx(1.0, abs=1e-9)
    assert np.all(np.array(fitted.lower) <= truth) and np.all(truth <= np.array(fitted.upper))
    assert set(curve.fit_topics).isdisjoint(curve.held_out_topics)
    assert len(curve.fit_topics) == len(curve.held_out_topics) == 3
    held = curve.held_out
    assert held.provenance["answers"] + fitted.provenance["answers"] == 1000
    # The held-out half measures the same curve: its intervals cover it too, Bonferroni-adjusted
    # over both halves' ten weights (one 95% interval in ten misses about half the time).
    records = [r for r in curve.records if r["topic"] in curve.held_out_topics]
    observations = [observation_from_record(r, unit_key="trial") for r in records]
    wide = fit_curve([o for o in observations if o is not None], K, seed=11, level=0.995)
    assert np.all(np.array(wide.lower) <= truth) and np.all(truth <= np.array(wide.upper))
    assert wide.weights == held.weights
    # Fitted on the fit half only.
    assert fitted.provenance["topics"] == list(curve.fit_topics)
    assert fitted.provenance["held_out_topics"] == list(curve.held_out_topics)


def test_the_phase_writes_its_files_and_a_curve_the_core_reads(measured):
    out, curve = measured
    for name in POSITION_CURVE_FILES:
        assert (out / name).is_file(), name
    records = [json.loads(line) for line in (out / "position_curve.jsonl").read_text().splitlines()]
    assert len(records) == 1000
    assert {r["rotation"] for r in records} == set(range(K))
    first = [r for r in records if r["trial"] == records[0]["trial"]]
    # A Latin square: each shown title visits each position once.
    positions = {t: {r["titles"].index(t) for r in first} for t in first[0]["titles"]}
    assert all(seen == set(range(K)) for seen in positions.values())
    # each shown document's id, as a trial's record has it (a user trial: all null)
    assert all(None not in r["doc_ids"] and len(set(r["doc_ids"])) == K for r in records)
    ids = {r["titles"][0]: r["doc_ids"][0] for r in first}
    assert all(
        dict(zip(r["titles"], r["doc_ids"], strict=True)).items() <= ids.items() for r in first
    )
    path = out / "exposure_fitted.json"
    loaded = load_fitted_curve(path)
    assert loaded == curve.fitted
    model = make_exposure_model(f"fitted:{path}")
    assert model.weights(K).tolist() == list(curve.fitted.weights)
    table = (out / "position_curve.md").read_text()
    assert "Wilson 95%" in table and "held-out" in table
    # the model as LangChain reports it, as the trials' records name it (the study's own
    # name for its generator, ``model_name``, only when none is reported)
    assert {r["model"] for r in records} == {"FakeCurveChatModel"}
    assert "FakeCurveChatModel" in table


def test_the_study_refuses_a_one_topic_curve_before_its_trials(tmp_path, capsys):
    """A user trial: ``--position-curve 4 --trials 4`` on one sampled topic failed only after
    every trial had run (and paid for its answers). The sample is known once the trials are
    planned: refused then, before the embedding."""
    from fairrag_study.cli import main
    from tests.chroma_pool import data_path_or_skip

    out = tmp_path / "out"
    flags = ["study", "--data", str(data_path_or_skip()), "--topics", "Tennis,Medicine",
             "--per-group", "6", "--trials", "2", "--llm", "fake", "--position-curve", "2",
             "--rankers", "standard", "--cache-dir", str(tmp_path / "cache"), "--out", str(out),
             "--no-progress", "--seed", "0"]  # fmt: skip
    assert main(flags) == 2
    said = capsys.readouterr()
    assert "all of one topic" in said.err and "[embed]" not in said.out
    assert not (out / "records.jsonl").exists()


def test_the_study_runs_the_phase_and_ranks_with_its_curve(tmp_path):
    """``fairrag study --position-curve`` on a small real corpus with the fake that cites every
    entry (a flat curve), then a second run ranking with ``--exposure fitted:<file>``."""
    from fairrag_study.cli import main
    from tests.chroma_pool import data_path_or_skip

    data, cache = data_path_or_skip(), tmp_path / "cache"
    common = ["study", "--data", str(data), "--topics", "Computer science,Medicine,Tennis",
              "--per-group", "12", "--trials", "8", "--llm", "fake", "--cache-dir", str(cache),
              "--no-progress"]  # fmt: skip
    out = tmp_path / "curve"
    assert main([*common, "--rankers", "standard", "--position-curve", "6", "--out", str(out)]) == 0
    curve = load_fitted_curve(out / "exposure_fitted.json")
    assert curve.weights == pytest.approx((0.2,) * K)  # the fake cites every entry it is shown
    # one model, one name: the trials' records', as LangChain reports it, in the curve's table
    lines = (out / "records.jsonl").read_text().splitlines()
    trial_models = {json.loads(line)["model"] for line in lines}
    (name,) = trial_models
    assert "Fake" in name and name in (out / "position_curve.md").read_text()
    assert (out / "figures" / "position_curve.png").stat().st_size > 0
    # the report shows the curve and names the phase's files (a trial found no word of them)
    report = (out / "report.md").read_text()
    assert "figures/position_curve.png" in report and "`exposure_fitted.json`" in report
    assert "`position_curve.md`" in report
    assert (out / "report.html").read_text().count("<img") == report.count("![")
    ranked = tmp_path / "ranked"
    fitted = f"fitted:{out / 'exposure_fitted.json'}"
    args = [*common, "--rankers", "representative_stochastic", "--exposure", fitted]
    assert main([*args, "--out", str(ranked)]) == 0
    records = [json.loads(line) for line in (ranked / "records.jsonl").read_text().splitlines()]
    assert {r["exposure_model"] for r in records} == {"fitted(0.2,0.2,0.2,0.2,0.2)"}
    said = (ranked / "report.md").read_text()  # the paper's numbers are DCG's: said so
    assert f"**Exposure model.** This run: `{fitted}` position weights" in said
    assert f"this run's exposure under `{fitted}` weights, the paper's under DCG" in said
    # The per-group file too: both rankers that target a share take it, records name it.
    groups = load_fitted_curve(out / "exposure_fitted_groups.json")
    factors = groups.factor_of  # the fake cites everyone: one factor (1 up to the smoothing)
    assert (
        factors["female"] == pytest.approx(factors["male"], rel=0.01) == pytest.approx(1, rel=0.05)
    )
    both = tmp_path / "both"
    fitted = f"fitted:{out / 'exposure_fitted_groups.json'}"
    args = [*common, "--rankers", "representative_stochastic,amortized", "--exposure", fitted]
    assert main([*args, "--out", str(both)]) == 0
    records = [json.loads(line) for line in (both / "records.jsonl").read_text().splitlines()]
    names = {r["exposure_model"] for r in records}
    assert len(names) == 1 and ";female=" in names.pop()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--position-curve", "1"], "two halves"),
        (["--position-curve", "4", "--llm", "none"], "needs a generator"),
        (["--exposure", "fitted:/no/such/file.json"], "cannot read a fitted curve"),
        (["--exposure", "fitted(0.5,0.5)"], r"ranks 1\.\.2 only"),
    ],
)
def test_bad_phase_flags_are_clear_errors(flags, message, capsys):
    from fairrag_study.cli import main

    with pytest.raises(SystemExit):
        main(["study", *flags])
    assert re.search(message, capsys.readouterr().err)


def test_the_phase_recovers_a_per_group_curve(tmp_path):
    """A fake that cites women's entries at half the rate of men's at every position: the
    per-group fit's factors cover the truth, and its file is read as a per-group model."""
    pools, corpus = _synthetic(120)
    factor = {"female": 0.5, "male": 1.0}
    titles = {doc.title: factor[doc.group] for doc in corpus}
    llm = FakeCurveChatModel(curve=CURVE, seed=5, title_factors=titles)
    curve = _run(120, pools, corpus, llm, tmp_path, model_name="fake-group-curve", concurrency=4)
    fitted = curve.fitted_groups
    assert fitted.weights == curve.fitted.weights  # the same position curve, plus factors
    shown = fitted.provenance["shown_per_group_position"]
    # Each factor's truth: lambda_g over the shown-weighted mean of the factors.
    for j, (group, _) in enumerate(fitted.factors):
        n = np.array(shown[group], dtype=float)
        others = np.array(shown["male" if group == "female" else "female"], dtype=float)
        p = np.array(CURVE)
        mean = (n * p * factor[group] + others * p * factor["male" if group == "female" else
                "female"]).sum() / ((n + others) * p).sum()  # fmt: skip
        truth = factor[group] / mean
        assert fitted.factor_lower[j] <= truth <= fitted.factor_upper[j], (group, truth)
    ratio = fitted.factor_of["female"] / fitted.factor_of["male"]
    assert ratio == pytest.approx(0.5, abs=0.12)
    model = make_exposure_model(f"fitted:{tmp_path / 'exposure_fitted_groups.json'}")
    assert model.per_group and model.curve == fitted
    assert "lambda_g" in (tmp_path / "position_curve.md").read_text()
    # The records keep the order of the questions and shifts (asked 4 at a time).
    assert [(r["trial"], r["rotation"]) for r in curve.records] == sorted(
        (r["trial"], r["rotation"]) for r in curve.records
    )


def test_a_sample_of_one_topic_is_refused_before_any_answer(tmp_path):
    """Two topics, four questions all of one: every answer was paid for, then the held-out
    half had no topic and the fit failed with a message about list lengths."""

    class NeverAsked(FakeCurveChatModel):
        def _generate(self, *args, **kwargs):  # type: ignore[override]
            raise AssertionError("no answer may be asked")

    pools, corpus = _synthetic(12)
    one_topic = [p for p in pools if p.trial.topic == "Topic 0"]
    with pytest.raises(ValueError, match="all of one topic \\(Topic 0\\)"):
        _run(2, one_topic, corpus, NeverAsked(curve=CURVE, seed=3), tmp_path)
    assert not (tmp_path / "position_curve.jsonl").exists()


def test_the_phase_shows_its_list_as_a_retriever_run_a_paper_format_model_reads():
    """A researcher's trial: ``--llm local --llm-format paper --position-curve N`` paid for
    every trial, then failed on the phase's first answer ("answer_format='paper' needs the
    shown titles"): the phase's list was a plain function, no retriever run, so the model's
    ``ShownTitles`` handler never learned the titles it may cite."""
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.documents import Document

    from fairrag_langchain.chains import make_fair_rag_chain
    from fairrag_langchain.fakes import FakeCitingChatModel
    from fairrag_study.local_llm import ShownTitles
    from fairrag_study.position_curve import _shown_list

    titles = ["Ada Lovelace", "Alan Turing", "Grace Hopper"]
    shown = [Document(f"Title: {t}\n{t} was a pioneer.", metadata={"title": t}) for t in titles]
    learned = ShownTitles()
    seen: list[list[str] | None] = []

    class Model(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, *, run_id, **kwargs):
            seen.append(learned.titles_for(run_id))

    chain = make_fair_rag_chain(
        _shown_list(shown), FakeCitingChatModel(), group_key="gender", protected="female"
    )
    chain.invoke({"question": "Who?"}, {"callbacks": [learned, Model()]})
    assert seen == [titles]


def test_more_curve_questions_than_trials_is_refused_before_any_answer():
    """A researcher's trial: ``--position-curve 100 --trials 8`` silently used 8 questions."""
    from fairrag_study.position_curve import curve_questions

    pools, _ = _synthetic(6)
    with pytest.raises(ValueError, match="--position-curve 100: the study's trials hold 6"):
        curve_questions([pool.trial for pool in pools], 100, seed=0)
