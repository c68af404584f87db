"""The Haystack component equals the other adapters (docs/SPEC.md, "Adapters"): for the same pool
and query seed, the same ranking and placement metadata as LlamaIndex's postprocessor and
LangChain's reranker, and the same fairness record as LangChain's handler, field by field."""

from __future__ import annotations

import pytest
from llama_index.core.schema import QueryBundle

from fairrag_core import available_rankers
from fairrag_core.kit import PLACEMENT_KEYS
from fairrag_haystack import FairDocumentRanker
from fairrag_langchain import FairnessCallbackHandler, FairReranker, FairRetriever
from fairrag_llamaindex import FairRerankPostprocessor, query_seed
from tests.haystack.pools import documents_of_pool
from tests.langchain.doubles import FixedPoolStore
from tests.langchain.doubles import documents_of_pool as langchain_documents
from tests.llamaindex.pools import make_pool

QUERY = "Who are influential people in tennis?"
FIELDS = {"group_key": "gender", "protected": "female"}
RUN_ONLY = {"timestamp", "source", "run_id", "framework", "metadata", "relevance_function"}
"""Record fields that name the run or the framework, not the ranking (``metadata``: LangChain's
run metadata; ``relevance_function``: the LangChain retriever names its rule, the Haystack
component's pool comes scored)."""


@pytest.mark.parametrize("ranker", available_rankers())
@pytest.mark.parametrize("seed", [0, 2026])
def test_the_three_adapters_place_one_pool_alike(ranker, seed):
    pool = make_pool(50, seed=seed)
    haystack = FairDocumentRanker(ranker=ranker, top_k=5, **FIELDS)
    llamaindex = FairRerankPostprocessor(ranker=ranker, relevance="similarity", top_n=5, **FIELDS)
    langchain = FairReranker(ranker=ranker, top_n=5, **FIELDS)
    for query_seed_value in (seed, seed + 17):
        shown = haystack.run(documents_of_pool(pool), seed=query_seed_value)["documents"]
        with query_seed(query_seed_value):
            nodes = llamaindex.postprocess_nodes(pool, QueryBundle(QUERY))
        ours = [{key: d.meta[key] for key in PLACEMENT_KEYS} for d in shown]
        theirs = [{key: n.node.metadata[key] for key in PLACEMENT_KEYS} for n in nodes]
        assert [d.id for d in shown] == [n.node.node_id for n in nodes]
        assert ours == theirs
        assert [d.score for d in shown] == [n.score for n in nodes]
    # FairReranker takes no per-call seed: rank with the query seed it drew (a fresh component:
    # the amortized ranker's ledger holds the rankings above)
    documents = langchain.compress_documents(langchain_documents(pool), QUERY)
    drawn = documents[0].metadata["query_seed"]
    fresh = FairDocumentRanker(ranker=ranker, top_k=5, **FIELDS)
    shown = fresh.run(documents_of_pool(pool), seed=drawn)["documents"]
    assert [d.id for d in documents] == [d.id for d in shown]
    assert [{key: d.metadata[key] for key in PLACEMENT_KEYS} for d in documents] == [
        {key: d.meta[key] for key in PLACEMENT_KEYS} for d in shown
    ]


def _retriever(pool, ranker: str) -> FairRetriever:
    """LangChain's retriever over ``pool`` (scored as the pool scores it), k 5 of 50."""
    documents = langchain_documents(pool)
    scores = [d.metadata.pop("relevance_score") for d in documents]
    return FairRetriever(
        vectorstore=FixedPoolStore(documents, scores),
        relevance="similarity",
        ranker=ranker,
        pool_size=50,
        k=5,
        **FIELDS,
    )


@pytest.mark.parametrize("ranker", ["representative_stochastic", "forced_exposure", "fair"])
def test_records_equal_the_langchain_handlers_field_by_field(ranker):
    pool = make_pool(50, seed=5)
    retriever = _retriever(pool, ranker)
    handler = FairnessCallbackHandler.from_retriever(retriever)
    retriever.invoke(QUERY, seed=9, config={"callbacks": [handler]})
    (theirs,) = handler.records
    component = FairDocumentRanker(ranker=ranker, top_k=5, **FIELDS)
    ours = component.run(documents_of_pool(pool), query=QUERY, seed=9)["record"]
    assert set(ours) == set(theirs)
    assert {k: v for k, v in ours.items() if k not in RUN_ONLY} == {
        k: v for k, v in theirs.items() if k not in RUN_ONLY
    }
    assert ours["source"] == "haystack"


def test_an_answered_record_equals_the_langchain_chains_field_by_field():
    """``FairAnswerRecorder`` writes the record LangChain's handler writes for the same shown
    list and answer: the retrieval fields and every generation field (docs/SPEC.md, "Records")."""
    from langchain_core.language_models import FakeListChatModel

    from fairrag_haystack import FairAnswerRecorder
    from fairrag_langchain import make_fair_rag_chain

    pool = make_pool(50, seed=5)
    retriever = _retriever(pool, "representative_stochastic")
    shown = retriever.invoke(QUERY, seed=9)
    titles = [d.metadata["title"] for d in shown]
    answer = f"- {titles[0]} [1]\n- {titles[2]} (DocTitle: {titles[2]})\n- {titles[3]} [2]"
    chain = make_fair_rag_chain(retriever, FakeListChatModel(responses=[answer]))
    handler = FairnessCallbackHandler.from_retriever(retriever)
    chain.invoke({"question": QUERY, "seed": 9}, config={"callbacks": [handler]})
    (theirs,) = handler.records
    assert theirs["answer"] == answer and theirs["n_miscitations"] == 1  # a real answer's record
    ranker = FairDocumentRanker(ranker="representative_stochastic", top_k=5, **FIELDS)
    placed = ranker.run(documents_of_pool(pool), query=QUERY, seed=9)["documents"]
    recorder = FairAnswerRecorder.from_ranker(ranker)
    ours = recorder.run(placed, replies=[answer], query=QUERY)["record"]
    answer_only = {"model", "answer_link", "llm_run_id"}
    assert set(ours) == set(theirs)
    assert {k: v for k, v in ours.items() if k not in RUN_ONLY | answer_only} == {
        k: v for k, v in theirs.items() if k not in RUN_ONLY | answer_only
    }
