"""What differs between a study run and the paper's setting (docs/SPEC.md, "The study"), each
difference with its likely effect: the bullets of the report's "Differences from the paper"
(the paper's data set only), read from the run's own facts (:class:`RunFacts`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fairrag_core.stats import Descriptive

from .dataset import PAPER_NUMBERS

__all__ = ["PAPER_SETTING", "RunFacts", "differences", "full_topics", "percent"]


def percent(value: float) -> str:
    """A fraction as the report writes it: ``12.50%``, or ``n/a`` when not finite."""
    return "n/a" if not math.isfinite(value) else f"{100 * value:.2f}%"


@dataclass(frozen=True)
class RunFacts:
    """What the report's "Differences from the paper" reads about the run (not in ``config``)."""

    corpus_kind: str
    documents: int
    topics: int
    """Topics of the corpus (those holding every group)."""
    full_topics: int
    """Of those, the topics whose data hold ``per_group`` documents with text of every group."""
    per_group: int
    seed: int
    trials: int
    pool_size: int
    k: int
    ef_search: int
    """The collection's HNSW search breadth."""
    generator: str
    """``none``, ``fake`` or ``openai:<model>``."""
    temperature: float | None = None
    llm_format: str = "free"
    """``--llm-format`` of ``--llm local``: ``free`` or ``paper`` (constrained decoding)."""
    server: str | None = None
    """The OpenAI-compatible server an ``openai:<model>`` generator asked (``--base-url``,
    ``OPENAI_BASE_URL``); None: OpenAI's own API, as the paper."""
    exposure: str = "dcg"
    """``--exposure``: the position weights of every exposure metric and every ranker's target
    (``dcg``, the paper's; ``rbp(p)``, ``uniform``, ``fitted:<file>``)."""


def _openai_api(server: str) -> bool:
    """Whether ``server`` is OpenAI's own API (``https://api.openai.com/...``)."""
    from urllib.parse import urlsplit

    return urlsplit(server).hostname == "api.openai.com"


def full_topics(
    documents: Iterable[Any], topics: Iterable[str], per_group: int, groups: Sequence[str]
) -> int:
    """How many of ``topics`` hold at least ``per_group`` documents of every group (documents
    with text, as :func:`fairrag_study.data.load_documents` keeps them)."""
    counts = Counter((topic, doc.group) for doc in documents for topic in doc.topics)
    return sum(all(counts[topic, group] >= per_group for group in groups) for topic in topics)


PAPER_SETTING: dict[str, Any] = {
    "documents": 4800,
    "topics": 48,
    "per_group": 50,
    "trials": 80,
    "pool_size": 50,
    "k": 5,
    "generator": "openai:gpt-4o-mini",
    "temperature": 0.1,
}
"""The paper's setting as it reports it (docs/SPEC.md, "The study"; 4,800 = 48 topics x 50 x 2)."""


def differences(
    results: Mapping[str, Mapping[str, Descriptive]],
    config: Mapping[str, object],
    facts: RunFacts,
    generation_note: str | None = None,
) -> list[str]:
    """The bullets of the "Differences from the paper" section (Markdown, one per difference):
    every known difference between this run and the paper's setting, each with its likely
    effect, from the run's own facts (TREC only).

    ``config["document text"]`` says where the documents' text came from (the study writes
    ``csv: '<column>'`` or ``wikipedia: ...``; default ``csv``: the TREC file's first sentence;
    a value naming ``wikipedia``: the articles' leads, as the paper's source).
    """
    found = [
        _text_difference(str(config.get("document text", "csv"))),
        _corpus_difference(facts),
        f"**Seeds.** This run: every trial's seed derived from the study seed {facts.seed}, "
        "which also draws the topics asked; the same seed writes the same rankings. The paper: "
        "seeds not published. Likely effect: other topics and other stochastic rankings; the "
        f"means can differ within sampling noise (about sd/sqrt({facts.trials}) per mean; the "
        "tables give each sd).",
        f"**Index.** This run: the exact cosine top-{facts.pool_size} for every question "
        f"(Chroma HNSW with ef_search {facts.ef_search:,}, checked exact by the integrity "
        "probe: probe queries must return the true nearest documents). The paper: index "
        "settings not published. Likely effect: with Chroma's default ef_search of 100, the "
        "pools here missed documents of the true top-50 for half of the questions; if the "
        "paper's pools were approximate, its baselines ranked other candidates.",
        _generator_difference(facts, generation_note),
        _setting_difference(facts),
        _exposure_difference(facts),
        _baseline_difference(results, facts),
    ]
    return [line for line in found if line is not None]


def _text_difference(text: str) -> str:
    if "wikipedia" in text.lower():
        return (
            f"**Document text.** This run: `{text}`, the paper's source (the first 100 words "
            "of each person's Wikipedia article; here of its lead section, shorter for a few "
            "people). Likely effect: small; the article revisions may differ from those the "
            "paper read."
        )
    return (
        "**Document text.** This run: `Title: <name>` and the TREC CSV's first sentence "
        f"of each biography (`{text}`). The paper: the first 100 words of each person's "
        "Wikipedia article. Likely effect: one sentence says less about a person's field "
        "than 100 words, so the embedding's relevance scores, and with them which people "
        "(and how many women) the baselines show, can differ; the generator also has less "
        "text to ground each citation on."
    )


def _corpus_difference(facts: RunFacts) -> str | None:
    paper = PAPER_SETTING
    if facts.corpus_kind != "balanced":
        return (
            f"**Corpus.** This run: the {facts.corpus_kind} corpus, {facts.documents:,} "
            f"documents (every document once, imbalanced). The paper: a balanced corpus of "
            f"{paper['documents']:,}. Likely effect: far fewer women in every pool, so every "
            "ranker's share of women is lower and the fair rankers work harder for it."
        )
    if facts.documents == paper["documents"]:
        return None
    if facts.full_topics < facts.topics:
        why = (
            f", because only {facts.full_topics} of the {facts.topics} topics hold "
            f"{facts.per_group} documents with text of every group (the others give as "
            "many of each group as their smaller group holds)"
        )
    else:
        why = f" ({facts.topics} topics x {facts.per_group} per group: a smaller run)"
    return (
        f"**Corpus.** This run: {facts.documents:,} documents from {facts.topics} topics, "
        f"exactly balanced{why}. The paper reports {paper['documents']:,} "
        f"({paper['topics']} topics x {paper['per_group']} x 2). Likely effect: fewer "
        f"on-topic people per topic, so each pool of {facts.pool_size} mixes in other "
        "topics' people (P@k and nDCG@k lower than a full corpus would give) and the "
        "baselines' share of women follows that mix; the fair rankers' shares follow their "
        "targets either way."
    )


def _setting_difference(facts: RunFacts) -> str | None:
    paper = PAPER_SETTING
    setting = [
        (name, getattr(facts, key), paper[key])
        for name, key in (("trials per ranker", "trials"), ("pool", "pool_size"), ("k", "k"))
        if getattr(facts, key) != paper[key]
    ]
    if not setting:
        return None
    return (
        "**Setting.** This run: "
        + ", ".join(f"{name} {ours}" for name, ours, _ in setting)
        + "; the paper: "
        + ", ".join(f"{name} {theirs}" for name, _, theirs in setting)
        + ". Likely effect: "
        + "; ".join(
            "fewer trials widen every mean's noise and weaken the t-tests"
            if name.startswith("trials")
            else f"another {name} changes what every ranker can show"
            for name, _, _ in setting
        )
        + "."
    )


def _exposure_difference(facts: RunFacts) -> str | None:
    if facts.exposure == "dcg":
        return None
    return (
        f"**Exposure model.** This run: `{facts.exposure}` position weights for every exposure "
        "metric (exposure share, disparity, the metrics over many rankings) and for every "
        "ranker's target. The paper: DCG weights, 1/log2(1 + rank). Likely effect: the same "
        "rankings read as other exposure shares (a model flatter than DCG gives the lower "
        "positions more weight), and the fair rankers aim at the target under this model, "
        "so every exposure number here measures something other than the paper's column of "
        "the same name; compare the rankers' order, not the numbers."
    )


def _baseline_difference(
    results: Mapping[str, Mapping[str, Descriptive]], facts: RunFacts
) -> str | None:
    standard = results.get("exposure_share", {}).get("standard")
    theirs = PAPER_NUMBERS["exposure_share"]["standard"]
    if standard is None or not math.isfinite(standard.mean):
        return None
    fairer = standard.mean > theirs
    model = (
        ""
        if facts.exposure == "dcg"
        else f" (under `{facts.exposure}` weights; the paper's under DCG weights)"
    )
    return (
        f"**Baseline gap.** This run's standard ranker gives women {percent(standard.mean)} "
        f"of the exposure; the paper's {percent(theirs)} ({100 * (standard.mean - theirs):+.2f} "
        f"points){model}. Likely effect: the differences above set the baseline; with a baseline "
        f"{'less' if fairer else 'more'} unfair than the paper's, every fair ranker's "
        f"reduction of exposure disparity is {'smaller' if fairer else 'larger'} in absolute "
        "terms, so compare the rankers' order and their distance to the target rather than "
        "the baselines' numbers."
    )


def _generator_difference(facts: RunFacts, generation_note: str | None) -> str:
    paper = f"gpt-4o-mini at temperature {PAPER_SETTING['temperature']:g}"
    if facts.generator == "none":
        why = f" ({generation_note.rstrip('.')})" if generation_note else ""
        return (
            f"**Generator.** This run: none{why}. The paper: {paper}. Effect: "
            "generation parity, the fairness gap and utility are not measured, so the paper's "
            "generation numbers have nothing to compare with here."
        )
    if facts.generator == "fake":
        return (
            "**Generator.** This run: the offline fake generator, a test double that cites "
            f"its context in order (not a language model). The paper: {paper}. Effect: the "
            "generation numbers only show that the pipeline works; they are not comparable."
        )
    if facts.generator.startswith("local:"):
        name = facts.generator.split(":", 1)[1]
        run = (
            f"**Generator.** This run: {name} at temperature 0 (greedy), a small model run "
            f"locally (`--llm local`"
        )
        if facts.llm_format == "paper":
            return (
                f"{run}, its answers held to the paper's format by constrained decoding, "
                f"`--llm-format paper`). The paper: {paper}. Likely effect: the paper's "
                "generation parity is measured for every answer, but which titles an answer "
                "cites is the model's only choice (it often cites all it is shown, and the "
                "parity then equals the shown share by count); its choices say little about "
                "what a large model would cite."
            )
        return (
            f"{run}). The paper: {paper}. Likely effect: a 135M model rarely writes the "
            "requested citation format, so the paper's generation parity is mostly n/a here; "
            "the attributed metrics read what it names, and its choices say little about what "
            "a large model would cite."
        )
    model = facts.generator.split(":", 1)[-1]
    temperature = (
        "an unknown temperature"
        if facts.temperature is None
        else (f"temperature {facts.temperature:g}")
    )
    if facts.server is not None and not _openai_api(facts.server):
        return (
            f"**Generator.** This run: {model} at {temperature}, served by {facts.server}. The "
            f"paper: {paper}, from OpenAI's API. Likely effect: another server may run another "
            "model (or quantisation, or chat template) under that name; generation parity and "
            "utility are comparable only as far as the two models are the same."
        )
    if model == "gpt-4o-mini" and facts.temperature == PAPER_SETTING["temperature"]:
        return (
            f"**Generator.** This run: {model} at {temperature}, as the paper. Likely effect: "
            "the model behind the name changes over time, and at this temperature answers "
            "still vary; generation numbers can differ within that."
        )
    return (
        f"**Generator.** This run: {model} at {temperature}. The paper: {paper}. Likely "
        "effect: another model (or temperature) cites differently; generation parity and "
        "utility are not comparable one to one."
    )
