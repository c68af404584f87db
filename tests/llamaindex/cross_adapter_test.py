"""The LangChain and LlamaIndex adapters rank the same pool identically: they share the core.

Same pool, same scores (LangChain: ``metadata["relevance_score"]``; LlamaIndex:
``NodeWithScore.score``), same groups, same seed -> the same ranking, call after call, with the
same placement metadata; and both equal the core's own :func:`fairrag_core.rerank`.
"""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, QueryBundle

from fairrag_core import available_rankers, make_ranker, rerank
from fairrag_langchain import FairReranker
from fairrag_llamaindex import FairRerankPostprocessor
from tests.llamaindex.pools import make_pool

QUERY = "Who are influential people in tennis?"
PLACEMENT_KEYS = ("fair_rank", "pool_rank", "exposure_weight", "ranker")


def as_documents(nodes: list[NodeWithScore]) -> list[Document]:
    """The same pool as LangChain documents: text, metadata, and the score in metadata."""
    return [
        Document(
            page_content=n.node.get_content(),
            id=n.node.node_id,
            metadata={**n.node.metadata, "relevance_score": n.score},
        )
        for n in nodes
    ]


def both(ranker: str, seed: int, k: int = 5, **params):
    langchain = FairReranker(
        ranker=ranker,
        group_key="gender",
        protected="female",
        seed=seed,
        k=k,
        ranker_params=params,
    )
    llamaindex = FairRerankPostprocessor(
        ranker=ranker,
        group_key="gender",
        protected="female",
        seed=seed,
        top_n=k,
        ranker_params=params,
    )
    return langchain, llamaindex


def rankings(langchain, llamaindex, nodes, documents):
    from_langchain = langchain.compress_documents(documents, QUERY)
    from_llamaindex = llamaindex.postprocess_nodes(nodes, QueryBundle(QUERY))
    return from_langchain, from_llamaindex


def assert_same(from_langchain, from_llamaindex):
    assert [d.metadata["doc_id"] for d in from_langchain] == [
        n.node.metadata["doc_id"] for n in from_llamaindex
    ]
    for document, node in zip(from_langchain, from_llamaindex, strict=True):
        for key in PLACEMENT_KEYS:
            assert document.metadata[key] == node.node.metadata[key], key
        assert document.metadata["relevance_score"] == node.node.metadata["relevance_score"]


@pytest.mark.parametrize("ranker", available_rankers())
@pytest.mark.parametrize("seed", [0, 1, 2026])
def test_same_pool_scores_groups_and_seed_give_the_same_rankings(ranker, seed):
    nodes = make_pool(50, seed=seed)
    documents = as_documents(nodes)
    langchain, llamaindex = both(ranker, seed)
    core = make_ranker(ranker, protected="female", seed=seed)
    scores = [n.score for n in nodes]
    groups = [n.node.metadata["gender"] for n in nodes]
    for _ in range(5):  # successive calls draw the same sequence from the seeded generators
        from_langchain, from_llamaindex = rankings(langchain, llamaindex, nodes, documents)
        assert_same(from_langchain, from_llamaindex)
        expected = rerank(core, scores, groups, 5).indices
        assert [n.node.node_id for n in from_llamaindex] == [nodes[i].node_id for i in expected]


def test_ranker_params_and_k_reach_both_the_same_way():
    nodes = make_pool(50, seed=3)
    langchain, llamaindex = both("stochastic", seed=8, k=7, alpha=1.0)
    from_langchain, from_llamaindex = rankings(langchain, llamaindex, nodes, as_documents(nodes))
    assert len(from_llamaindex) == 7
    assert_same(from_langchain, from_llamaindex)


def test_unscored_pools_are_ranked_the_same_way_by_incoming_order():
    nodes = make_pool(30, scored=False)
    documents = [
        Document(page_content=n.node.get_content(), metadata=dict(n.node.metadata)) for n in nodes
    ]
    langchain, llamaindex = both("representative_stochastic", seed=4)
    from_langchain, from_llamaindex = rankings(langchain, llamaindex, nodes, documents)
    assert [d.metadata["doc_id"] for d in from_langchain] == [
        n.node.metadata["doc_id"] for n in from_llamaindex
    ]
    for document, node in zip(from_langchain, from_llamaindex, strict=True):
        for key in PLACEMENT_KEYS:
            assert document.metadata[key] == node.node.metadata[key], key


def test_a_pool_only_partly_scored_is_refused_by_both():
    nodes = make_pool(10)
    nodes[4] = NodeWithScore(node=nodes[4].node, score=None)
    documents = as_documents(nodes)
    langchain, llamaindex = both("representative_stochastic", seed=0)
    with pytest.raises(ValueError, match="4"):
        langchain.compress_documents(documents, QUERY)
    with pytest.raises(ValueError, match="4"):
        llamaindex.postprocess_nodes(nodes, QueryBundle(QUERY))


@pytest.mark.integration
def test_a_real_chroma_pool_is_ranked_the_same_by_both(li_index):
    """The 50-node pool LlamaIndex retrieves from the real index, handed to both adapters."""
    nodes = li_index.as_retriever(similarity_top_k=50).retrieve(QUERY)
    assert len(nodes) == 50
    documents = as_documents(nodes)
    for ranker in available_rankers():
        langchain, llamaindex = both(ranker, seed=11)
        for _ in range(3):
            assert_same(*rankings(langchain, llamaindex, nodes, documents))
