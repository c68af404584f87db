"""FairRetriever on a real Chroma (embedded, cosine) holding a real TREC subset embedded with the
real all-MiniLM-L6-v2: relevance, copies, exposure toward target, sync / async / batch."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from fairrag_core import FairnessAuditor
from fairrag_core.prompts import scenario_question
from fairrag_langchain import FairRetriever

pytestmark = pytest.mark.integration


def fair(store, **params) -> FairRetriever:
    params.setdefault("protected", "female")
    params.setdefault("group_key", "gender")
    return FairRetriever(vectorstore=store, **params)


def ids(documents) -> list[str]:
    return [d.metadata["doc_id"] for d in documents]


@pytest.fixture(scope="module")
def queries(subset_topics) -> list[str]:
    """The study's four scenarios over the subset's topics."""
    return [scenario_question(s, topic) for topic in subset_topics for s in range(1, 5)]


def test_langchain_chroma_attaches_no_chroma_embedding_function(trec_store, chroma_collection):
    collection = trec_store._collection
    assert collection._embedding_function is None
    assert collection.configuration.get("embedding_function") is None
    assert collection.configuration["hnsw"]["space"] == "cosine"
    assert collection.count() == chroma_collection.count() == 300


def test_relevance_is_one_minus_cosine_distance(trec_store, chroma_collection, lc_embeddings):
    query = "influential people in medicine"
    documents = fair(trec_store, ranker="standard").invoke(query)
    assert documents[0].metadata["relevance_function"] == "store: cosine_relevance_score_fn"
    raw = chroma_collection.query(query_embeddings=[lc_embeddings.embed_query(query)], n_results=5)
    assert ids(documents) == [m["doc_id"] for m in raw["metadatas"][0]]
    assert [d.metadata["relevance_score"] for d in documents] == pytest.approx(
        [1.0 - d for d in raw["distances"][0]], abs=1e-6
    )
    assert [d.metadata["pool_rank"] for d in documents] == [1, 2, 3, 4, 5]


def test_the_collection_is_never_changed(trec_store, chroma_collection):
    before = chroma_collection.get(include=["metadatas", "documents"])
    retriever = fair(trec_store, seed=0)
    for seed in range(3):
        retriever.invoke("role models in tennis", seed=seed)
    after = chroma_collection.get(include=["metadatas", "documents"])
    assert after["ids"] == before["ids"]
    assert after["metadatas"] == before["metadatas"]
    assert after["documents"] == before["documents"]


def test_metadata_filter_reaches_chroma(trec_store):
    retriever = fair(trec_store, search_kwargs={"filter": {"topics": "Tennis"}}, seed=0)
    documents = retriever.invoke("famous scientists", k=5)
    assert {d.metadata["topics"] for d in documents} == {"Tennis"}


def test_representative_stochastic_moves_protected_exposure_toward_target(trec_store, queries):
    auditor = FairnessAuditor.create(protected="female", target_share=0.5)
    standard = fair(trec_store, ranker="standard")
    representative = fair(trec_store, ranker="representative_stochastic")

    def share(documents) -> float:
        groups = [d.metadata["gender"] for d in documents]
        return auditor.retrieval(groups)["exposure_share"]

    standard_shares = [share(docs) for docs in standard.batch(queries)]
    seeds = range(5)
    fair_shares = [
        share(representative.invoke(query, seed=seed)) for query in queries for seed in seeds
    ]
    standard_mean = statistics.fmean(standard_shares)
    fair_mean = statistics.fmean(fair_shares)
    # The subset is 20% female: the standard top-5 is far from parity, the fair one close.
    assert standard_mean < 0.35
    assert abs(fair_mean - 0.5) < 0.1
    assert abs(fair_mean - 0.5) < abs(standard_mean - 0.5) / 2


def test_every_shown_document_comes_from_the_pool(trec_store):
    query = scenario_question(1, "Medicine")
    pool = ids(fair(trec_store, ranker="standard").invoke(query, k=50))
    for seed in range(5):
        shown = fair(trec_store).invoke(query, seed=seed)
        assert set(ids(shown)) <= set(pool)
        assert [d.metadata["pool_rank"] for d in shown] == [pool.index(i) + 1 for i in ids(shown)]


async def test_sync_async_and_batch_agree(trec_store, queries):
    retriever = fair(trec_store)
    chosen = queries[::4]
    sync = [ids(retriever.invoke(q, seed=11)) for q in chosen]
    asynchronous = [ids(await retriever.ainvoke(q, seed=11)) for q in chosen]
    # a list gives each input its seed; one seed seeds the batch (docs/SPEC.md "Adapters" → Seeds)
    seeds = [11] * len(chosen)
    batched = [ids(d) for d in retriever.batch(chosen, seed=seeds)]
    abatched = [ids(d) for d in await retriever.abatch(chosen, seed=seeds)]
    assert sync == asynchronous == batched == abatched
    fresh = fair(trec_store, seed=11)
    assert [ids(d) for d in await retriever.abatch(chosen, seed=11)] == [
        ids(fresh.invoke(q)) for q in chosen
    ]
    assert all(len(i) == 5 for i in sync)


def test_per_call_k_and_seed_on_chroma(trec_store):
    retriever = fair(trec_store, seed=0)
    query = scenario_question(2, "Computer science")
    assert len(retriever.invoke(query, k=3)) == 3
    draws = [ids(retriever.invoke(query, seed=s)) for s in range(6)]
    assert draws == [ids(retriever.invoke(query, seed=s)) for s in range(6)]
    assert len({tuple(d) for d in draws}) > 1
    assert np.all([len(set(d)) == 5 for d in draws])


def test_wrong_group_key_on_chroma_names_the_fields(trec_store):
    with pytest.raises(KeyError, match=r"'sex'.*doc_id.*gender.*title.*topics"):
        fair(trec_store, group_key="sex").invoke("tennis champions")


def test_a_deep_copy_of_a_chroma_retriever_and_its_handler_shares_the_store(trec_store):
    """``copy.deepcopy`` of the quickstart's Chroma-backed retriever raised ``TypeError: cannot
    pickle 'builtins.Bindings'`` (a docs trial: the guides promise deep copies)."""
    import copy

    from fairrag_langchain import FairnessCallbackHandler

    retriever = fair(trec_store, ranker="amortized", seed=0)
    query = scenario_question(2, "Computer science")
    retriever.invoke(query)
    copied = copy.deepcopy(retriever)
    assert copied.vectorstore is trec_store and copied is not retriever
    assert copied.ledger.state().rankings == retriever.ledger.state().rankings == 1
    assert len(copied.invoke(query, k=3)) == 3
    handler = copy.deepcopy(FairnessCallbackHandler.from_retriever(retriever))
    copied.invoke(query, config={"callbacks": [handler]})
    (record,) = handler.records
    assert record["ranker"] == "amortized"
