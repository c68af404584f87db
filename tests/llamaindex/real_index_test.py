"""The contract on the real path: ``index.as_query_engine`` over a real ChromaVectorStore (cosine,
no Chroma embedding function) holding real TREC documents embedded with all-MiniLM-L6-v2."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairrag_core import make_ranker, rerank
from fairrag_core.kit import document_title, render_context_prompt, to_relevance
from fairrag_core.prompts import scenario_question
from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairRerankPostprocessor, query_seed
from tests.llamaindex.fake_llms import FakeRecordingLLM

pytestmark = pytest.mark.integration

QUESTION = scenario_question(1, "Computer science")


def fair(**fields) -> FairRerankPostprocessor:
    return FairRerankPostprocessor(group_key="gender", protected="female", **fields)


def test_the_prompt_through_as_query_engine_is_the_kits_prompt(li_index):
    llm = FakeRecordingLLM()
    engine = li_index.as_query_engine(
        similarity_top_k=50,
        node_postprocessors=[fair(seed=1)],
        llm=llm,
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    response = engine.query(QUESTION)
    (prompt,) = llm.prompts
    shown = [
        (document_title(n.node.metadata, n.node.get_content()), n.node.get_content())
        for n in response.source_nodes
    ]
    assert len(shown) == 5
    assert prompt == render_context_prompt(QUESTION, shown)
    assert "gender" not in prompt


def test_auto_relevance_recognises_the_chroma_store_on_the_plain_path(li_index, fairness_handler):
    """``as_query_engine(node_postprocessors=[fair])`` with the default relevance ranks on the
    spec's ``1 - d`` (``chroma_cosine``), exactly as the core does from the same query seed."""
    pool = li_index.as_retriever(similarity_top_k=50).retrieve(QUESTION)
    relevance = to_relevance([n.score for n in pool], "chroma_cosine")
    groups = [n.node.metadata["gender"] for n in pool]
    engine = li_index.as_query_engine(
        similarity_top_k=50,
        node_postprocessors=[fair(ranker="stochastic")],
        llm=FakeRecordingLLM(),
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    for seed in range(8):
        with query_seed(seed):
            response = engine.query(QUESTION)
        expected = rerank(
            make_ranker("stochastic", protected="female"),
            relevance,
            groups,
            5,
            rng=np.random.default_rng(seed),
            ids=[n.node.node_id for n in pool],
        )
        assert [n.node.node_id for n in response.source_nodes] == [
            pool[i].node.node_id for i in expected.indices
        ]
        node = response.source_nodes[0]
        assert node.score == pytest.approx(1 + math.log(node.node.metadata["retrieval_score"]))
    assert {r["query_seed"] for r in fairness_handler.records} == set(range(8))


def test_for_index_reads_the_store(li_index):
    assert FairRerankPostprocessor.for_index(
        li_index, group_key="gender", protected="female"
    ).relevance == ("chroma_cosine")


def test_a_conversion_running_the_wrong_way_is_refused_naming_the_fix(li_index):
    engine = li_index.as_query_engine(
        similarity_top_k=50,
        node_postprocessors=[fair(relevance="l2_distance")],
        llm=FakeRecordingLLM(),
    )
    with pytest.raises(ValueError, match=r"relevance rises .* Use relevance="):
        engine.query(QUESTION)


def test_auto_relevance_reads_the_space_of_an_l2_collection(
    li_index, li_collection, li_embed_model, chroma_client
):
    """Over an l2 collection (Chroma's default space) ``auto`` ranks on ``chroma_l2``, ``-d``,
    and every node's score is minus the squared L2 distance Chroma measured (``1 - d``, the
    cosine rule, was reported there before)."""
    from llama_index.core import VectorStoreIndex
    from llama_index.vector_stores.chroma import ChromaVectorStore

    source = li_collection.get(include=["embeddings", "documents", "metadatas"])  # li_index's
    l2 = chroma_client.create_collection(
        "llamaindex-trec-subset-l2",
        configuration={"hnsw": {"space": "l2"}},
        embedding_function=None,
    )
    l2.add(
        ids=source["ids"],
        embeddings=source["embeddings"],
        documents=source["documents"],
        metadatas=source["metadatas"],
    )
    index = VectorStoreIndex.from_vector_store(
        ChromaVectorStore(chroma_collection=l2), embed_model=li_embed_model
    )
    assert FairRerankPostprocessor.for_index(
        index, group_key="gender", protected="female"
    ).relevance == ("chroma_l2")
    vector = li_embed_model.get_query_embedding(QUESTION)
    found = l2.query(query_embeddings=[vector], n_results=50, include=["distances"])
    distance = dict(zip(found["ids"][0], found["distances"][0], strict=True))
    pool = index.as_retriever(similarity_top_k=50).retrieve(QUESTION)
    engine = index.as_query_engine(
        similarity_top_k=50,
        node_postprocessors=[fair(ranker="stochastic")],
        llm=FakeRecordingLLM(),
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    with query_seed(4):
        response = engine.query(QUESTION)
    expected = rerank(
        make_ranker("stochastic", protected="female"),
        [-distance[n.node.node_id] for n in pool],
        [n.node.metadata["gender"] for n in pool],
        5,
        rng=np.random.default_rng(4),
        ids=[n.node.node_id for n in pool],
    )
    assert [n.node.node_id for n in response.source_nodes] == [
        pool[i].node.node_id for i in expected.indices
    ]
    for node in response.source_nodes:
        assert node.score == pytest.approx(-distance[node.node.node_id], abs=1e-6)


def test_auto_relevance_sees_chroma_behind_a_simple_query_fusion_retriever(li_index):
    """``QueryFusionRetriever`` in ``simple`` mode keeps its members' scores: ``auto`` ranks on
    ``1 - d`` there too (it ranked on ``exp(-d)``, which changes stochastic draws), and refuses a
    fusion mixing a Chroma member with another store."""
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import QueryFusionRetriever

    from tests.llamaindex.pools import PoolRetriever, make_pool

    def fused(*members):
        return QueryFusionRetriever(
            list(members),
            mode="simple",
            similarity_top_k=50,
            num_queries=1,
            use_async=False,
            llm=FakeRecordingLLM(),
        )

    chroma = li_index.as_retriever(similarity_top_k=50)
    pool = fused(chroma).retrieve(QUESTION)
    relevance = to_relevance([n.score for n in pool], "chroma_cosine")
    engine = RetrieverQueryEngine.from_args(
        fused(chroma),
        llm=FakeRecordingLLM(),
        node_postprocessors=[fair(ranker="stochastic")],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    with query_seed(6):
        response = engine.query(QUESTION)
    expected = rerank(
        make_ranker("stochastic", protected="female"),
        relevance,
        [n.node.metadata["gender"] for n in pool],
        5,
        rng=np.random.default_rng(6),
        ids=[n.node.node_id for n in pool],
    )
    assert [n.node.node_id for n in response.source_nodes] == [
        pool[i].node.node_id for i in expected.indices
    ]
    node = response.source_nodes[0]
    assert node.score == pytest.approx(1 + math.log(node.node.metadata["retrieval_score"]))
    mixed = RetrieverQueryEngine.from_args(
        fused(chroma, PoolRetriever(make_pool(20))),
        llm=FakeRecordingLLM(),
        node_postprocessors=[fair()],
    )
    with pytest.raises(ValueError, match="cannot tell what these nodes' scores mean"):
        mixed.query(QUESTION)
