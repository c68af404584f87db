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
from .generation import Generation


def write_report(
    out: Path,
    records: list[dict[str, Any]],
    many: ManyRankings,
    *,
    config: StudyConfig,
    data: StudyCorpus,
    model: Any,
    generation: Generation,
) -> None:
    """The report phase's entry: ``report.md``, the tables and the figures in ``out``."""
    assert config.rankers is not None  # resolved by run_study
    write_outputs(
        out,
        records,
        list(config.rankers),
        dataset=config.dataset,
        config=_settings(config, data, model, generation),
        generation_note=generation.note,
        many=many,
        facts=_facts(config, data, generation),
    )


def _settings(
    config: StudyConfig, data: StudyCorpus, model: Any, generation: Generation
) -> dict[str, Any]:
    """The report's "Configuration" lines."""
    assert config.rankers is not None
    dataset = config.dataset
    asked = generation.llm is not None
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
        "generator": _generator_line(config) if asked else "none",
        **({"answers": generation.line()} if asked and generation.paying else {}),
    }


def _facts(config: StudyConfig, data: StudyCorpus, generation: Generation) -> RunFacts:
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
        generator=generation.name,
        temperature=getattr(generation.llm, "temperature", None),
    )


def _generator_line(config: StudyConfig) -> str:
    """The report's generator line: ``--llm``, and ``--llm-format`` when not free."""
    if config.llm_format == "free":
        return config.llm
    return f"{config.llm} (--llm-format {config.llm_format})"
