"""The LlamaIndex adapter equals the core, which every adapter must equal (docs/SPEC.md,
"Adapters"): for the same pool and the same query seed, the ranking is
:func:`fairrag_core.rerank` drawn with ``numpy.random.default_rng(query_seed)``, the placement
metadata is :func:`fairrag_core.kit.placement_metadata`, and the prompt the LLM receives is
:func:`fairrag_core.kit.render_context_prompt`. Nothing is re-derived here: whatever another
adapter sends for the same documents and seed must equal the same core values.
"""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle

from fairrag_core import available_rankers, make_ranker, rerank, scores_from_order
from fairrag_core.kit import document_title, placement_metadata, render_context_prompt, to_relevance
from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairRerankPostprocessor, query_seed
from tests.llamaindex.fake_llms import FakeRecordingLLM
from tests.llamaindex.pools import PoolRetriever, make_pool

QUERY = "Who are influential people in tennis?"


def postprocessor(ranker: str, k: int = 5, **params) -> FairRerankPostprocessor:
    return FairRerankPostprocessor(
        ranker=ranker,
        group_key="gender",
        protected="female",
        top_n=k,
        ranker_params=params,
        relevance="similarity",
    )


def core(ranker: str, relevance, pool, seed: int, k: int = 5, **params):
    return rerank(
        make_ranker(ranker, protected="female", **params),
        relevance,
        [n.node.metadata["gender"] for n in pool],
        k,
        rng=np.random.default_rng(seed),
        ids=[n.node.node_id for n in pool],
    )


def assert_equals_core(out: list[NodeWithScore], pool, expected, seed: int, scored=True):
    assert [n.node.node_id for n in out] == [pool[i].node.node_id for i in expected.indices]
    for node, placement in zip(out, expected.placements, strict=True):
        original = pool[placement.pool_index]
        want = placement_metadata(
            placement,
            expected.ranker,
            seed,
            original.score,
            pool_size=len(pool) - len(expected.duplicates),
            fair_k=len(expected.placements),
            scored=scored,
            target=expected.target,
        )
        assert {key: node.node.metadata[key] for key in want} == want
        assert node.score == want["relevance_score"]


@pytest.mark.parametrize("ranker", available_rankers())
@pytest.mark.parametrize("seed", [0, 1, 2026])
def test_same_pool_and_query_seed_give_the_cores_ranking(ranker, seed):
    pool = make_pool(50, seed=seed)
    fair = postprocessor(ranker)
    # one core ranker for the three calls: the amortized one's ledger then holds the same
    # stream as the postprocessor's (a fresh core ranker per call only agreed by chance)
    reference = make_ranker(ranker, protected="female")
    for query_seed_value in (seed, seed + 17, 2**31 - 2):
        with query_seed(query_seed_value):
            out = fair.postprocess_nodes(pool, QueryBundle(QUERY))
        expected = rerank(
            reference,
            [n.score for n in pool],
            [n.node.metadata["gender"] for n in pool],
            5,
            rng=np.random.default_rng(query_seed_value),
            ids=[n.node.node_id for n in pool],
        )
        assert_equals_core(out, pool, expected, query_seed_value)


def test_ranker_params_and_k_reach_the_core_the_same_way():
    pool = make_pool(50, seed=3)
    with query_seed(8):
        out = postprocessor("stochastic", k=7, alpha=1.0).postprocess_nodes(
            pool, QueryBundle(QUERY)
        )
    expected = core("stochastic", [n.score for n in pool], pool, 8, k=7, alpha=1.0)
    assert len(out) == 7
    assert_equals_core(out, pool, expected, 8)


def test_unscored_pools_are_ranked_by_incoming_order_as_the_core_does():
    pool = make_pool(30, scored=False)
    with query_seed(4):
        out = postprocessor("representative_stochastic").postprocess_nodes(pool, QueryBundle(QUERY))
    expected = core("representative_stochastic", scores_from_order(30), pool, 4)
    assert_equals_core(out, pool, expected, 4, scored=False)


def test_a_pool_only_partly_scored_is_refused_naming_the_position():
    pool = make_pool(10)
    pool[4] = NodeWithScore(node=pool[4].node, score=None)
    with pytest.raises(ValueError, match=r"positions \[4\]"):
        postprocessor("representative_stochastic").postprocess_nodes(pool, QueryBundle(QUERY))


@pytest.mark.parametrize("ranker", available_rankers())
def test_the_prompt_is_the_cores_for_every_ranker(ranker):
    """Titles from metadata and titles stated by the text both give the kit's context text."""
    pool = make_pool(30)
    for node in pool[::2]:  # half the nodes state their title only in metadata
        node.node.set_content(node.node.get_content().split("\n", 1)[1])
    llm = FakeRecordingLLM()
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(pool),
        llm=llm,
        node_postprocessors=[postprocessor(ranker)],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    with query_seed(5):
        response = engine.query(QUERY)
    expected = core(ranker, [n.score for n in pool], pool, 5)
    shown = [pool[i] for i in expected.indices]
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in shown]
    documents = [
        (document_title(n.node.metadata, n.node.get_content()), n.node.get_content()) for n in shown
    ]
    assert llm.prompts == [render_context_prompt(QUERY, documents)]


@pytest.mark.integration
def test_a_real_chroma_pool_is_ranked_on_the_specs_one_minus_distance(
    li_index, li_collection, li_embed_model
):
    """LlamaIndex's ChromaVectorStore reports exp(-d); the engine's ranking equals the core's
    on 1 - d read from Chroma itself (the conversion every other adapter uses for Chroma)."""
    embedding = li_embed_model.get_query_embedding(QUERY)
    found = li_collection.query(query_embeddings=[embedding], n_results=50, include=["distances"])
    distances = dict(zip(found["ids"][0], found["distances"][0], strict=True))
    pool = li_index.as_retriever(similarity_top_k=50).retrieve(QUERY)
    assert {n.node.node_id for n in pool} == set(distances)
    relevance = to_relevance([distances[n.node.node_id] for n in pool], "cosine_distance")
    for ranker in available_rankers():
        engine = li_index.as_query_engine(
            similarity_top_k=50,
            node_postprocessors=[
                FairRerankPostprocessor(ranker=ranker, group_key="gender", protected="female")
            ],
            llm=FakeRecordingLLM(),
            text_qa_template=PAPER_QA_TEMPLATE,
        )
        for seed in (3, 11):
            with query_seed(seed):
                response = engine.query(QUERY)
            expected = core(ranker, relevance, pool, seed)
            assert [n.node.node_id for n in response.source_nodes] == [
                pool[i].node.node_id for i in expected.indices
            ]
