"""Every read of a LangChain private attribute, in one place (docs/SPEC.md, "Adapters").

``relevance="auto"`` needs a vector store's relevance function (``_select_relevance_score_fn``)
and whether the store overrides LangChain's relevance search (its private
``_similarity_search_with_relevance_scores``). Each is read here, and nowhere else, so that a
LangChain release renaming one breaks one module: ``tests/langchain/unit_tests/private_test.py``
checks each read on real objects of the supported versions (:data:`SUPPORTED`).
"""

from __future__ import annotations

from collections.abc import Callable

from langchain_core.vectorstores import VectorStore

__all__ = ["SUPPORTED", "overrides_relevance_search", "relevance_score_fn"]

SUPPORTED = ("1",)
"""The ``langchain-core`` major versions these reads are tested against."""


def relevance_score_fn(store: VectorStore) -> Callable[[float], float]:
    """The store's relevance function (``_select_relevance_score_fn``; NotImplementedError when
    the store states none, as LangChain raises it)."""
    return store._select_relevance_score_fn()


def overrides_relevance_search(store_type: type[VectorStore]) -> bool:
    """Whether the store computes relevance scores itself, without a relevance function."""
    return (
        store_type._similarity_search_with_relevance_scores
        is not VectorStore._similarity_search_with_relevance_scores
        or store_type._asimilarity_search_with_relevance_scores
        is not VectorStore._asimilarity_search_with_relevance_scores
        or store_type.similarity_search_with_relevance_scores
        is not VectorStore.similarity_search_with_relevance_scores
    )
