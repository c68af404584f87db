"""The study's question pools: each trial's candidates as the rankers see them.

One place for what the study's "many rankings" phase and ``fairrag sweep`` rank again outside
the retriever (docs/SPEC.md, "The study" → Over many rankings, and "Sweep"): for each trial, the
``pool_size`` candidates the store returns for its question, with the relevance the
``FairRetriever`` ranks on (Chroma cosine: ``1 - distance``, the kit's ``cosine_distance``
conversion), each candidate's group label and whether it belongs to the question's topic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairrag_core.kit import to_relevance

from .data import CorpusDocument
from .plan import Trial

__all__ = ["NotInPoolError", "QuestionPool", "query_pools"]


class NotInPoolError(LookupError):
    """A shown document is not in the pool it is said to be ranked from."""


@dataclass(frozen=True)
class QuestionPool:
    """One trial's pool, in the store's order (best first)."""

    trial: Trial
    doc_ids: tuple[str, ...]
    scores: np.ndarray
    """Relevance, ``1 - cosine distance`` (what the study's ``FairRetriever`` ranks on)."""
    groups: list[Any]
    """Each candidate's group label (its ``group_key`` metadata; ``None`` when it has none)."""
    relevant: np.ndarray
    """Whether each candidate belongs to the question's topic (the study's relevance rule)."""
    n_relevant: int
    """Relevant documents in the corpus (nDCG's ideal), as the study's records count them."""

    def positions(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The pool indices of ``doc_ids`` (a shown list), in their order.

        A document that is not in the pool raises :class:`NotInPoolError`: the list was not
        ranked from this pool.
        """
        index = {doc_id: i for i, doc_id in enumerate(self.doc_ids)}
        missing = [doc_id for doc_id in doc_ids if doc_id not in index]
        if missing:
            raise NotInPoolError(
                f"documents {missing} are not in the pool of trial {self.trial.index} "
                f"({len(self.doc_ids)} candidates)"
            )
        return np.array([index[doc_id] for doc_id in doc_ids], dtype=np.intp)


def query_pools(
    collection: Any,
    vectors: Sequence[Sequence[float]],
    trials: Sequence[Trial],
    corpus: Sequence[CorpusDocument],
    *,
    pool_size: int,
    group_key: str,
) -> list[QuestionPool]:
    """The pool of every trial: ``collection`` queried once with the trials' question
    ``vectors`` (one per trial, in order) for ``pool_size`` candidates each.

    ``collection`` is a Chroma collection (the study passes it wrapped so that a short pool is
    refused, as in the trials). Relevance is ``1 - d`` (docs/SPEC.md, "Inputs every ranker
    takes"); a candidate is relevant when its ``topics`` metadata holds the trial's topic, and
    ``n_relevant = max(documents of the topic in the corpus, relevant candidates)``, the rule of
    the study's nDCG.
    """
    if len(vectors) != len(trials):
        raise ValueError(f"vectors must hold one per trial: {len(vectors)} for {len(trials)}")
    found = collection.query(
        query_embeddings=[list(vector) for vector in vectors],
        n_results=pool_size,
        include=["distances", "metadatas"],
    )
    topic_size = Counter(topic for doc in corpus for topic in doc.topics)
    pools = []
    answers = zip(trials, found["ids"], found["distances"], found["metadatas"], strict=True)
    for trial, ids, distances, metadatas in answers:
        relevant = [trial.topic in str(m.get("topics", "")).split("|") for m in metadatas]
        pools.append(
            QuestionPool(
                trial,
                tuple(ids),
                to_relevance(distances, "cosine_distance"),
                [m.get(group_key) for m in metadatas],
                np.asarray(relevant, dtype=bool),
                max(topic_size[trial.topic], sum(relevant)),
            )
        )
    return pools
