"""``relevance="auto"`` behind retrievers that wrap the Chroma one (issue 23, "See through the
framework's composition or refuse"), on the real index: a ChromaVectorStore (cosine, no Chroma
embedding function) holding real TREC documents embedded with all-MiniLM-L6-v2.

A custom ``BaseRetriever`` holding LlamaIndex's vector retriever, or a ``RecursiveRetriever``,
has no store of its own: ``auto`` reads which store's scores the nodes still carry from what the
retrievals inside the engine call returned, and refuses, naming the fix, when it cannot tell.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever, RecursiveRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from fairrag_core import make_ranker, rerank
from fairrag_core.kit import to_relevance
from fairrag_core.prompts import scenario_question
from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairRerankPostprocessor, query_seed
from tests.llamaindex.fake_llms import FakeRecordingLLM
from tests.llamaindex.pools import PoolRetriever, make_pool

pytestmark = pytest.mark.integration

QUESTION = scenario_question(1, "Computer science")


class HoldingRetriever(BaseRetriever):
    """A custom retriever around another one, as users write them (logging, filters, ...)."""

    def __init__(self, inner: BaseRetriever) -> None:
        self._inner = inner
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._inner.retrieve(query_bundle)


class RescoringRetriever(HoldingRetriever):
    """A wrapper that puts scores of its own on the inner retriever's nodes."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = self._inner.retrieve(query_bundle)
        return [NodeWithScore(node=n.node, score=(n.score or 0.0) / 2) for n in nodes]


def fair(**fields) -> FairRerankPostprocessor:
    return FairRerankPostprocessor(group_key="gender", protected="female", **fields)


def fair_engine(retriever, **fields) -> RetrieverQueryEngine:
    return RetrieverQueryEngine.from_args(
        retriever,
        llm=FakeRecordingLLM(),
        node_postprocessors=[fair(**fields)],
        text_qa_template=PAPER_QA_TEMPLATE,
    )


def spec_ranking(pool, seed: int) -> list[str]:
    """The core's stochastic ranking of ``pool`` on the spec's ``1 - d`` from ``seed``."""
    expected = rerank(
        make_ranker("stochastic", protected="female"),
        to_relevance([n.score for n in pool], "chroma_cosine"),
        [n.node.metadata["gender"] for n in pool],
        5,
        rng=np.random.default_rng(seed),
        ids=[n.node.node_id for n in pool],
    )
    return [pool[i].node.node_id for i in expected.indices]


def test_auto_sees_the_chroma_store_behind_a_custom_retriever(li_index, subset_topics):
    """48 stochastic rankings (6 questions x 8 query seeds) behind a custom retriever equal
    the core's on ``1 - d``, with no warning (on main 43 of 48 did: ``exp(-d)``, silently)."""
    chroma = li_index.as_retriever(similarity_top_k=50)
    engine = fair_engine(HoldingRetriever(chroma), ranker="stochastic")
    questions = [scenario_question(s, topic) for topic in subset_topics for s in (1, 2)]
    equal = on_spec_relevance = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        for question in questions:
            pool = chroma.retrieve(question)
            for seed in range(8):
                with query_seed(seed):
                    response = engine.query(question)
                ranked = [n.node.node_id for n in response.source_nodes]
                equal += ranked == spec_ranking(pool, seed)
                node = response.source_nodes[0]
                expected = 1 + math.log(node.node.metadata["retrieval_score"])
                on_spec_relevance += node.score == pytest.approx(expected)
    assert (equal, on_spec_relevance) == (48, 48) and len(questions) == 6

    # A wrapper around a retriever without a store: its own scores, similarities, as before.
    pool = make_pool(30)
    response = fair_engine(HoldingRetriever(PoolRetriever(pool)), ranker="standard").query("q")
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in pool[:5]]
    assert response.source_nodes[0].score == pool[0].score


async def test_auto_sees_the_chroma_store_behind_a_recursive_retriever(li_index):
    chroma = li_index.as_retriever(similarity_top_k=50)
    recursive = RecursiveRetriever("vector", retriever_dict={"vector": chroma})
    pool = chroma.retrieve(QUESTION)
    engine = fair_engine(recursive, ranker="stochastic")
    for seed in (1, 2):
        with query_seed(seed):
            response = engine.query(QUESTION)
            asynchronous = await engine.aquery(QUESTION)
        assert [n.node.node_id for n in response.source_nodes] == spec_ranking(pool, seed)
        assert [n.node.node_id for n in asynchronous.source_nodes] == spec_ranking(pool, seed)
        node = response.source_nodes[0]
        assert node.score == pytest.approx(1 + math.log(node.node.metadata["retrieval_score"]))


def test_auto_refuses_scores_a_wrapper_changed_naming_the_fix(li_index):
    chroma = li_index.as_retriever(similarity_top_k=50)
    with pytest.raises(ValueError, match="cannot tell what these nodes' scores mean") as info:
        fair_engine(RescoringRetriever(chroma)).query(QUESTION)
    message = str(info.value)
    assert "RescoringRetriever" in message and "50 of these 50 nodes" in message
    assert "'similarity' when they are the retriever's own" in message and "for_index" in message
    # naming the conversion is the fix
    response = fair_engine(RescoringRetriever(chroma), relevance="similarity").query(QUESTION)
    assert len(response.source_nodes) == 5


def test_auto_refuses_a_wrapper_merging_chroma_with_another_source(li_index):
    class Merging(HoldingRetriever):
        def _retrieve(self, query_bundle):
            return self._inner.retrieve(query_bundle) + PoolRetriever(make_pool(10)).retrieve(
                query_bundle
            )

    with pytest.raises(ValueError, match="10 of these 60 nodes do not carry"):
        fair_engine(Merging(li_index.as_retriever(similarity_top_k=50))).query(QUESTION)


def test_a_real_index_that_embedded_the_group_warns_once_naming_the_key(
    li_documents, li_embed_model, chroma_client
):
    """``Document(..., excluded_llm_metadata_keys=["gender"])`` hides the group from the LLM
    only: the index embeds it. The postprocessor warns (on main: silently)."""
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.vector_stores.chroma import ChromaVectorStore

    collection = chroma_client.get_or_create_collection(
        "llamaindex-embedded-group", configuration={"hnsw": {"space": "cosine"}}
    )
    documents = [
        Document(
            id_=d.doc_id,
            text=d.page_content,
            metadata={"gender": d.gender},
            excluded_llm_metadata_keys=["gender"],
        )
        for d in li_documents[:40]
    ]
    index = VectorStoreIndex.from_documents(
        documents,
        storage_context=StorageContext.from_defaults(
            vector_store=ChromaVectorStore(chroma_collection=collection)
        ),
        embed_model=li_embed_model,
    )
    post = fair()
    engine = index.as_query_engine(
        similarity_top_k=20, node_postprocessors=[post], llm=FakeRecordingLLM()
    )
    with pytest.warns(UserWarning, match=r"20 of the 20 nodes .* embed the group key 'gender'"):
        engine.query(QUESTION)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        engine.query(QUESTION)
