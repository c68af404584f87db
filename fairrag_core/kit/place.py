"""The kit's main step: one query's pool of framework documents in; its fair ranking, each shown
document's new metadata and the shown list as the record reads it out (docs/SPEC.md, "Adapters").

An adapter reads its framework's documents into plain values (metadata dicts, ids, the scores as
they came, texts), calls :func:`pool_relevance` and :func:`place`, and writes the returned
metadata into copies of its documents: every rule between (relevance, store-order check, groups,
query seed, duplicates, pool size, stale placement dropped, placement keys merged, titles) is
decided here, once for every framework.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..reranking import Reranking, group_labels, pool_scores
from .config import RankerState
from .context import document_title
from .placement import drop_stale_placement, placements_metadata, ranking_metadata
from .records import ShownDocument
from .relevance import check_store_order, to_relevance

__all__ = ["Placed", "place", "pool_relevance", "shown_documents"]


@dataclass(frozen=True)
class Placed:
    """One query's fair ranking of a pool and what each shown document carries."""

    reranking: Reranking
    """The core's ranking (:func:`fairrag_core.rerank`)."""
    query_seed: int
    """The seed it was drawn with (passing it again re-draws it)."""
    pool_size: int
    """The candidates ranked: the pool without the documents repeating an earlier id."""
    metadatas: list[dict[str, Any]]
    """Each shown document's new metadata, in fair-rank order: its own entries (without an
    earlier ranking's :data:`~fairrag_core.kit.LEDGER_PLACEMENT_KEYS`), the placement keys
    (:func:`~fairrag_core.kit.placements_metadata`), then the adapter's ``extra``."""

    @property
    def ranking(self) -> dict[str, Any]:
        """The keys all its documents share (:func:`~fairrag_core.kit.ranking_metadata`): what
        a record reads of this ranking when it placed no document (an empty pool)."""
        return ranking_metadata(self.reranking, self.query_seed, pool_size=self.pool_size)

    @property
    def indices(self) -> list[int]:
        """The pool index of each shown document, in fair-rank order."""
        return [placement.pool_index for placement in self.reranking.placements]


def pool_relevance(
    given: Sequence[Any],
    conversion: str | None = None,
    *,
    store: str | None = None,
    **order_check: Any,
) -> tuple[np.ndarray, bool]:
    """``(relevance, scored)`` of a pool from its scores as they came.

    A pool without any score is ranked by its incoming order and a partly scored one refused
    (:func:`fairrag_core.pool_scores`); otherwise the scores converted by ``conversion`` (a
    name of :data:`~fairrag_core.kit.RELEVANCE_CONVERSIONS`; None: they are relevance
    already) and, with ``store`` (its name for messages), checked against the store's
    best-first order (:func:`~fairrag_core.kit.check_store_order`, which takes
    ``order_check``'s ``described`` and ``own_function``).
    """
    scores, from_order = pool_scores(given)
    if from_order:
        return scores, False
    if conversion is not None:
        scores = to_relevance(scores, conversion)
    if store is not None:
        check_store_order(scores, conversion, store, **order_check)
    return scores, True


def place(
    state: RankerState,
    metadatas: Sequence[Mapping[str, Any]],
    scores: Any,
    k: int,
    *,
    group_key: str,
    ids: Sequence[Any] | None = None,
    given: Sequence[Any] | None = None,
    scored: bool = True,
    seed: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> Placed:
    """Rank one query's pool and place its shown documents.

    ``metadatas``: each candidate's metadata (its group read from ``group_key`` by
    :func:`fairrag_core.group_labels`); ``scores``: relevance (:func:`pool_relevance`);
    ``ids``: each candidate's id (a repeat is left out, the first kept); ``given``: the scores
    as they came, written as ``retrieval_score``; ``scored`` False: the relevance is the
    incoming order (``relevance_score`` None); ``seed``: the caller's query seed, else one
    drawn from ``state`` (:meth:`RankerState.rerank`).
    """
    groups = group_labels(metadatas, group_key)
    reranking, query_seed = state.rerank(scores, groups, k, ids=ids, seed=seed)
    pool_size = len(metadatas) - len(reranking.duplicates)
    placed = placements_metadata(reranking, query_seed, given, pool_size=pool_size, scored=scored)
    extra = extra or {}
    out = [
        {**drop_stale_placement(metadatas[placement.pool_index]), **keys, **extra}
        for placement, keys in zip(reranking.placements, placed, strict=True)
    ]
    return Placed(reranking, query_seed, pool_size, out)


def shown_documents(
    ids: Sequence[Hashable | None],
    metadatas: Sequence[Mapping[str, Any]],
    texts: Sequence[str],
    group_key: str,
    title_key: str = "title",
) -> list[ShownDocument]:
    """The shown list as the record reads it (:class:`ShownDocument`), in the order shown: each
    id as text, the kit's title rule, the group (a document without ``group_key`` is unknown)."""
    groups = group_labels(metadatas, group_key, require_present=False)
    return [
        ShownDocument(
            None if doc_id is None else str(doc_id),
            document_title(metadata, text, title_key),
            group,
            text,
        )
        for doc_id, metadata, text, group in zip(ids, metadatas, texts, groups, strict=True)
    ]
