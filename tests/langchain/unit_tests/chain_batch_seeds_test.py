"""A chain's batch draws its query seeds from the one FairRetriever its calls run, in input
order, whatever wrapper the chain is given; a per-call component (``configurable_fields``)
draws its own (docs/SPEC.md, "Adapters" -> Seeds)."""

from __future__ import annotations

from langchain_core.runnables import ConfigurableField

from fairrag_langchain import FairRetriever, make_fair_rag_chain
from fairrag_langchain.fakes import FakeCitingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool

QUESTION = "Who are influential people in computing?"


def _retriever() -> FairRetriever:
    documents, distances = imbalanced_pool()
    return FairRetriever(
        vectorstore=FixedPoolStore(documents, distances),
        group_key="gender",
        protected="female",
        seed=0,
        k=4,
    )


def test_a_configured_seed_reaches_every_input_of_a_batch():
    configurable = _retriever().configurable_fields(seed=ConfigurableField(id="retriever_seed"))
    chain = make_fair_rag_chain(configurable, FakeCitingChatModel())
    config = {"configurable": {"retriever_seed": 7}}
    alone = chain.invoke(QUESTION, config=config)["metrics"]["query_seed"]
    batched = [out["metrics"]["query_seed"] for out in chain.batch([QUESTION] * 3, config=config)]
    # each call's fresh copy starts seed 7's sequence (the batch drew seed 0's before)
    assert batched == [alone] * 3
    assert (
        alone
        == FairRetriever(
            vectorstore=_retriever().vectorstore, group_key="g", protected="f", seed=7
        ).ranker_state.query_seed()
    )


def test_every_wrapper_of_the_chain_keeps_its_seed_source():
    chain = make_fair_rag_chain(_retriever(), FakeCitingChatModel())
    assert chain.seeds is not None
    wrapped = [
        chain.with_config(tags=["t"]),
        chain.bind(),
        chain.with_listeners(on_start=lambda run: None),
        chain.with_types(input_type=str),
    ]
    assert all(w.seeds is chain.seeds for w in wrapped)
    fresh = make_fair_rag_chain(_retriever(), FakeCitingChatModel())
    expected = [fresh.invoke(QUESTION)["metrics"]["query_seed"] for _ in range(4)]
    listened = make_fair_rag_chain(_retriever(), FakeCitingChatModel()).with_listeners(
        on_start=lambda run: None
    )
    assert [o["metrics"]["query_seed"] for o in listened.batch([QUESTION] * 4)] == expected
