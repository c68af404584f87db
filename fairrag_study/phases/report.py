"""The report phase: the run's settings and facts gathered for the report, and the outputs
written (:func:`fairrag_study.report.write_outputs`; docs/SPEC.md, "The study" → Outputs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..data import sha256_of, study_topics
from ..embedding import embedding_backend
from ..index import EF_SEARCH
from ..many_rankings import ManyRankings
from ..rankers import describe_rankers
from ..report import RunFacts, full_topics, write_outputs
from ..settings import ReportSettings
from .data import StudyCorpus
from .generation import Generation


def write_report(
    out: Path,
    records: list[dict[str, Any]],
    many: ManyRankings,
    *,
    settings: ReportSettings,
    data: StudyCorpus,
    model: Any,
    generation: Generation,
) -> None:
    """The report phase's entry: ``report.md``, the tables and the figures in ``out``."""
    configuration = _configuration(settings, data, model, generation)
    facts = _facts(settings, data, generation)
    write_outputs(
        out,
        records,
        list(settings.rankers),
        dataset=settings.dataset,
        config=configuration,
        generation_note=generation.note,
        many=many,
        facts=facts,
    )


def _configuration(
    settings: ReportSettings, data: StudyCorpus, model: Any, generation: Generation
) -> dict[str, Any]:
    """The report's "Configuration" lines."""
    dataset = settings.dataset
    asked = generation.llm is not None
    own = (
        {}
        if dataset.paper is not None
        else {"group key": dataset.group_key, "target": dataset.target_label()}
    )
    return {
        "data": f"{data.path} (sha256 {sha256_of(data.path)[:12]}...)",
        "corpus": f"{settings.corpus}: {len(data.corpus)} documents, {data.composition}",
        **data.text_lines,
        "trials per ranker": len(data.trials),
        "rankers": describe_rankers(settings.rankers, alpha=settings.alpha, dataset=dataset),
        "pool size / k / alpha": f"{_pool_size(settings, data)} / {settings.k} / {settings.alpha}",
        "rankings sampled per question (expected exposure)": settings.samples,
        "seed": settings.seed,
        "exposure model": settings.exposure or "dcg",
        **own,
        "embedding model": f"{settings.model} ({embedding_backend(model)})",
        "generator": (_generator_line(settings) + _served_by(generation.llm) if asked else "none"),
        **({"answers": generation.line()} if asked and generation.paying else {}),
    }


def _pool_size(settings: ReportSettings, data: StudyCorpus) -> str:
    """The pool size the trials ranked: the one asked for, or the corpus's size when that is
    smaller (``--pool-size 100000000`` on 252 documents ranked pools of 252)."""
    used = min(settings.pool_size, len(data.corpus))
    if used == settings.pool_size:
        return str(used)
    return f"{used} (asked {settings.pool_size}; the corpus holds {len(data.corpus)} documents)"


def _facts(settings: ReportSettings, data: StudyCorpus, generation: Generation) -> RunFacts:
    """The facts the report's text states (corpus, topics, trials, generator)."""
    dataset = settings.dataset
    corpus_topics = study_topics(data.documents, settings.topics, dataset.groups)
    per_group = settings.per_group
    return RunFacts(
        corpus_kind=settings.corpus,
        documents=len(data.corpus),
        topics=len(corpus_topics),
        full_topics=full_topics(data.documents, corpus_topics, per_group, dataset.groups),
        per_group=per_group,
        seed=settings.seed,
        trials=len(data.trials),
        pool_size=min(settings.pool_size, len(data.corpus)),
        k=settings.k,
        ef_search=EF_SEARCH,
        generator=generation.name,
        temperature=getattr(generation.llm, "temperature", None),
        server=_server(generation.llm),
        llm_format=settings.llm_format,
        exposure=settings.exposure or "dcg",
    )


def _served_by(llm: Any) -> str:
    server = _server(llm)
    return "" if server is None else f" at {server}"


def _server(llm: Any) -> str | None:
    """The server an OpenAI chat model asks (``openai_api_base``: ``--base-url`` or
    ``OPENAI_API_BASE``; else ``OPENAI_BASE_URL``, which the ``openai`` client reads), None
    for OpenAI's own or another kind of model."""
    if not hasattr(llm, "openai_api_base"):
        return None
    server = llm.openai_api_base or os.environ.get("OPENAI_BASE_URL")
    return server if isinstance(server, str) and server else None


def _generator_line(settings: ReportSettings) -> str:
    """The report's generator line: ``--llm``, and ``--llm-format`` when not free."""
    if settings.llm_format == "free":
        return settings.llm
    return f"{settings.llm} (--llm-format {settings.llm_format})"
