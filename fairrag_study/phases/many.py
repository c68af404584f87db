"""The many-rankings phase: the metrics over many rankings on the trials' pools, and the
amortized ranker's frontier on them (docs/SPEC.md, "The study" → Over many rankings)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..data import (
    CorpusDocument,
)
from ..errors import (
    IndexDamagedError,
)
from ..frontier import amortized_frontier
from ..many_rankings import ManyRankings, measure
from ..plan import Trial
from ..pools import NotInPoolError, QuestionPool, query_pools
from ..settings import ManySettings
from .index import StudyIndex, query_embeddings


def trial_pools(
    settings: ManySettings,
    index: StudyIndex,
    corpus: Sequence[CorpusDocument],
    trials: Sequence[Trial],
) -> list[QuestionPool]:
    """The trials' pools: the collection the trials searched, queried with the same question
    vectors, a short pool refused as in the trials."""
    embeddings = query_embeddings(index.model)
    embeddings.prefill([trial.question for trial in trials])
    return query_pools(
        index.checked_collection(),
        [embeddings.embed_query(trial.question) for trial in trials],
        trials,
        corpus,
        pool_size=settings.pool_size,
        group_key=settings.dataset.group_key,
    )


def measure_many(
    settings: ManySettings,
    index: StudyIndex,
    pools: Sequence[QuestionPool],
    records: Sequence[Mapping[str, Any]],
) -> ManyRankings:
    """The many-rankings phase's entry: the metrics over many rankings
    (:func:`fairrag_study.many_rankings.measure`) on the trials' pools (:func:`trial_pools`),
    under the study's exposure model, and with ``amortized`` its frontier on those pools
    (:func:`fairrag_study.frontier.amortized_frontier`)."""
    where = index.where
    # the rankers as the trials ran them, sampled as the study asks
    setting: dict[str, Any] = dict(
        dataset=settings.dataset, samples=settings.samples, alpha=settings.alpha, seed=settings.seed
    )
    try:
        many = measure(
            pools, records, settings.rankers, k=settings.k, exposure=settings.exposure, **setting
        )
    except NotInPoolError as exc:
        raise IndexDamagedError(
            f"the index at {where} no longer returns the trials' pools ({exc}): it changed "
            "during the run. Run the study again"
        ) from exc
    if "amortized" not in settings.rankers:
        return many
    return replace(many, frontier=amortized_frontier(pools, settings.k, **setting))
