"""A relevance conversion that is not monotone over the pool is refused (docs/SPEC.md,
"Adapters" → Relevance): LangChain's inner-product relevance (``1 - s`` for ``s > 0``, ``-s``
otherwise) on a real FAISS ``MAX_INNER_PRODUCT`` store whose pool spans similarity 0."""

from __future__ import annotations

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from fairrag_langchain import FairRetriever

faiss_store = pytest.importorskip("langchain_community.vectorstores.faiss")
pytest.importorskip("faiss")

POOL = 300


def inner_product_store():
    from langchain_community.vectorstores.utils import DistanceStrategy

    texts = [f"Person {i:03d} is a pioneer." for i in range(POOL)]
    metadatas = [
        {"title": f"Person {i:03d}", "gender": ["male", "female"][i % 2]} for i in range(POOL)
    ]
    return faiss_store.FAISS.from_texts(
        texts,
        DeterministicFakeEmbedding(size=16),
        metadatas=metadatas,
        distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
    )


def fair(store, **fields) -> FairRetriever:
    return FairRetriever(
        vectorstore=store, group_key="gender", protected="female", pool_size=POOL, k=5, **fields
    )


def test_langchains_inner_product_relevance_over_a_pool_spanning_zero_is_refused():
    store = inner_product_store()
    scores = [s for _, s in store.similarity_search_with_score("who", k=POOL)]
    assert scores[0] > 0 > scores[-1]  # the pool spans similarity 0
    retriever = fair(store, ranker="standard")
    # today's main: the direction check passes and `standard` shows true ranks near 300
    with pytest.raises(ValueError, match="not monotone over this pool from FAISS"):
        retriever.invoke("who")


def test_a_named_monotone_conversion_on_the_same_store_ranks_the_best_first():
    store = inner_product_store()
    retriever = fair(store, ranker="standard", relevance="similarity")
    assert [d.metadata["pool_rank"] for d in retriever.invoke("who")] == [1, 2, 3, 4, 5]
