"""The report phase: the run's settings and facts gathered for the report, and the outputs
written (:func:`fairrag_study.report.write_outputs`; docs/SPEC.md, "The study" → Outputs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import StudyConfig
from ..data import sha256_of, study_topics
from ..embedding import embedding_backend
from ..index import EF_SEARCH
from ..many_rankings import ManyRankings
from ..rankers import describe_rankers
from ..report import RunFacts, full_topics, write_outputs
from .data import StudyCorpus
from .generation import answers_line, generator_name, pays


def write_report(
    out: Path,
    records: list[dict[str, Any]],
    many: ManyRankings,
    *,
    config: StudyConfig,
    data: StudyCorpus,
    model: Any,
    llm: Any,
    answers: Any,
    generation_note: str | None,
) -> None:
    """The report phase's entry: ``report.md``, the tables and the figures in ``out``."""
    assert config.rankers is not None  # resolved by run_study
    write_outputs(
        out,
        records,
        list(config.rankers),
        dataset=config.dataset,
        config=_settings(config, data, model, llm, answers),
        generation_note=generation_note,
        many=many,
        facts=_facts(config, data, llm),
    )


def _settings(
    config: StudyConfig, data: StudyCorpus, model: Any, llm: Any, answers: Any
) -> dict[str, Any]:
    """The report's "Configuration" lines."""
    assert config.rankers is not None
    dataset = config.dataset
    own = (
        {}
        if dataset.paper is not None
        else {"group key": dataset.group_key, "target": dataset.target_label()}
    )
    return {
        "data": f"{data.path} (sha256 {sha256_of(data.path)[:12]}...)",
        "corpus": f"{config.corpus}: {len(data.corpus)} documents, {data.composition}",
        **data.text_lines,
        "trials per ranker": len(data.trials),
        "rankers": describe_rankers(config.rankers, alpha=config.alpha, dataset=dataset),
        "pool size / k / alpha": f"{config.pool_size} / {config.k} / {config.alpha}",
        "rankings sampled per question (expected exposure)": config.samples,
        "seed": config.seed,
        **own,
        "embedding model": f"{config.model} ({embedding_backend(model)})",
        "generator": config.llm if llm is not None else "none",
        **({"answers": answers_line(answers)} if llm is not None and pays(config) else {}),
    }


def _facts(config: StudyConfig, data: StudyCorpus, llm: Any) -> RunFacts:
    """The facts the report's text states (corpus, topics, trials, generator)."""
    dataset = config.dataset
    corpus_topics = study_topics(data.documents, config.topics, dataset.groups)
    per_group = config.per_group or dataset.per_group
    return RunFacts(
        corpus_kind=config.corpus,
        documents=len(data.corpus),
        topics=len(corpus_topics),
        full_topics=full_topics(data.documents, corpus_topics, per_group, dataset.groups),
        per_group=per_group,
        seed=config.seed,
        trials=len(data.trials),
        pool_size=config.pool_size,
        k=config.k,
        ef_search=EF_SEARCH,
        generator=generator_name(config, llm),
        temperature=getattr(llm, "temperature", None),
    )
