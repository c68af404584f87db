"""Issue 23, LangChain wiring over the real Chroma store (the embedded, cosine TREC subset with
the real all-MiniLM-L6-v2): per-call arguments, batch seeds, a compression retriever under the
chain, a MultiQueryRetriever over the fair one. Every test here failed before issue 23."""

from __future__ import annotations

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from fairrag_langchain import (
    FairnessCallbackHandler,
    FairReranker,
    FairRetriever,
    make_fair_rag_chain,
)
from fairrag_langchain.fakes import FakeCitingChatModel

pytestmark = pytest.mark.integration

QUERY = "role models in tennis"


def fair(store, **params) -> FairRetriever:
    params.setdefault("protected", "female")
    params.setdefault("group_key", "gender")
    return FairRetriever(vectorstore=store, **params)


def ids(documents) -> list[str]:
    return [d.id for d in documents]


# -- per-call arguments: ours, or the store's search arguments; never a failure inside Chroma --


@pytest.mark.parametrize("name", ["bogus", "pool_size"])
def test_an_unknown_per_call_argument_is_refused_before_the_store_is_called(trec_store, name):
    retriever = fair(trec_store)
    with pytest.raises(TypeError, match=rf"unknown argument '{name}'") as raised:
        retriever.invoke(QUERY, **{name: 10})
    message = str(raised.value)
    assert "k, seed, search_kwargs=" in message and "['filter', 'where_document']" in message
    if name == "pool_size":
        assert "pool_size is a field" in message


def test_the_stores_search_arguments_and_search_kwargs_reach_chroma(trec_store):
    retriever = fair(trec_store, k=4)
    by_keyword = retriever.invoke(QUERY, filter={"gender": "female"}, seed=1)
    by_dict = retriever.invoke(QUERY, search_kwargs={"filter": {"gender": "female"}}, seed=1)
    assert ids(by_keyword) == ids(by_dict)
    assert {d.metadata["gender"] for d in by_keyword} == {"female"}
    with pytest.raises(ValueError, match="may not set 'k'"):
        retriever.invoke(QUERY, search_kwargs={"k": 3})


# -- batch seeds: by input order, never by thread arrival -------------------------------------


def test_five_fresh_retrievers_batch_the_same_outputs(trec_store):
    outputs = [
        [ids(documents) for documents in fair(trec_store, seed=0).batch([QUERY] * 12)]
        for _ in range(5)
    ]
    assert all(output == outputs[0] for output in outputs)
    fresh = fair(trec_store, seed=0)
    assert outputs[0] == [ids(fresh.invoke(QUERY)) for _ in range(12)]


async def test_abatch_and_batch_as_completed_draw_in_input_order_too(trec_store):
    expected = [ids(d) for d in fair(trec_store, seed=0).batch([QUERY] * 6)]
    assert [ids(d) for d in await fair(trec_store, seed=0).abatch([QUERY] * 6)] == expected
    done = dict(fair(trec_store, seed=0).batch_as_completed([QUERY] * 6))
    assert [ids(done[i]) for i in range(6)] == expected
    adone = {i: d async for i, d in fair(trec_store, seed=0).abatch_as_completed([QUERY] * 6)}
    assert [ids(adone[i]) for i in range(6)] == expected


def test_a_batch_seed_seeds_the_batch_and_a_list_of_seeds_re_draws_it(trec_store):
    retriever = fair(trec_store)
    seeded = retriever.batch([QUERY] * 12, seed=3)
    assert len({tuple(ids(d)) for d in seeded}) > 1  # not 12 copies of one ranking
    assert [ids(d) for d in seeded] == [
        ids(d) for d in fair(trec_store, seed=3).batch([QUERY] * 12)
    ]
    logged = [d[0].metadata["query_seed"] for d in seeded]
    assert [ids(d) for d in retriever.batch([QUERY] * 12, seed=logged)] == [ids(d) for d in seeded]
    with pytest.raises(ValueError, match="one per input"):
        retriever.batch([QUERY] * 3, seed=[1, 2])


def test_fresh_chains_batch_the_same_contexts_and_keep_their_outputs(trec_store):
    def contexts(handler=None):
        chain = make_fair_rag_chain(fair(trec_store, seed=0), FakeCitingChatModel())
        config = {"callbacks": [handler]} if handler else None
        outputs = chain.with_config(tags=["t"]).batch([QUERY] * 8, config)
        assert all("seed" not in output for output in outputs)
        return [ids(output["context"]) for output in outputs]

    handler = FairnessCallbackHandler(group_key="gender", protected="female")
    runs = [contexts(handler), contexts(), contexts()]
    assert runs[0] == runs[1] == runs[2]
    fresh = fair(trec_store, seed=0)
    assert runs[0] == [ids(fresh.invoke(QUERY)) for _ in range(8)]
    assert all(record["metadata"] == {} for record in handler.records)


# -- a compression retriever under the chain: k and seed never reach the base retriever -------


def test_the_chain_refuses_k_and_seed_a_compression_retrievers_reranker_cannot_take(trec_store):
    from langchain_classic.retrievers import ContextualCompressionRetriever

    reranker = FairReranker(
        group_key="gender", protected="female", ranker="forced_exposure", top_n=5
    )
    compression = ContextualCompressionRetriever(
        base_compressor=reranker, base_retriever=trec_store.as_retriever(search_kwargs={"k": 50})
    )
    chain = make_fair_rag_chain(compression, FakeCitingChatModel())
    output = chain.invoke(QUERY)
    assert output["metrics"]["ranker"] == "forced_exposure"
    assert output["metrics"]["pool_size"] == 50  # the whole pool was re-ranked
    for given in ({"k": 3}, {"seed": 7}):
        with pytest.raises(ValueError, match=r"FairReranker.*takes no per-call") as raised:
            chain.invoke({"question": QUERY, **given})
        assert "base retriever (VectorStoreRetriever)" in str(raised.value)


# -- a MultiQueryRetriever over the fair retriever: one copy of each document -----------------


def test_multi_query_keeps_one_copy_of_each_document_and_the_record_its_ranker(trec_store):
    from langchain_classic.retrievers.multi_query import MultiQueryRetriever

    retriever = fair(trec_store, seed=0)
    questions = "women who play tennis\ntennis champions\nfamous tennis players"
    multi = MultiQueryRetriever.from_llm(
        retriever=retriever, llm=FakeListChatModel(responses=[questions]), include_original=True
    )
    handler = FairnessCallbackHandler.from_retriever(retriever)
    shown = multi.invoke(QUERY, config={"callbacks": [handler]})
    assert len(ids(shown)) == len(set(ids(shown))) > retriever.k
    (record,) = handler.records
    assert record["doc_ids"] == ids(shown)
    assert record["ranker"] == "representative_stochastic" and record["query_seed"] is None
    assert record.get("mixed_after_ranking") is not True
