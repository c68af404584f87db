"""Issue 23, LangChain wiring: the chains and wrappers LangChain developers really build, each
with the record it must give or the loud refusal. Every test here failed on the adapter before
issue 23."""

from __future__ import annotations

from operator import itemgetter

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import ConfigurableField, RunnableLambda, RunnablePassthrough

from fairrag_core import FairnessAuditor
from fairrag_langchain import FairnessCallbackHandler, FairRetriever, make_fair_rag_chain
from fairrag_langchain.fakes import FakeCitingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool


@pytest.fixture
def store():
    return FixedPoolStore(*imbalanced_pool())


def fair(store, **fields):
    fields.setdefault("group_key", "gender")
    fields.setdefault("protected", "female")
    return FairRetriever(vectorstore=store, **fields)


def linked(record):
    """The record's framework-only fields (the answer's model runs)."""
    return record.get("framework", record)


def moderated(chain, verdict="SAFE"):
    """The chain, then a moderation model run on its answer (``assign(verdict=...)``)."""
    moderation = FakeListChatModel(responses=[verdict])
    return chain | RunnablePassthrough.assign(
        verdict=itemgetter("answer") | moderation | StrOutputParser()
    )


# -- item 3: the answer is what was generated from the fair context ----------------------------


def test_a_moderation_model_after_the_answer_is_not_logged_as_the_answer(store):
    retriever = fair(store, target_share=0.6, ranker="forced_exposure")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    chain = moderated(make_fair_rag_chain(retriever, FakeCitingChatModel()))
    output = chain.invoke("q", config={"callbacks": [handler]})
    assert output["verdict"] == "SAFE"
    (record,) = handler.records
    assert record["answer"] == output["answer"] != "SAFE"
    metrics = output["metrics"]
    assert record["groundedness"] == metrics["groundedness"] == 1.0
    assert record["generation_parity"] == pytest.approx(metrics["generation_parity"])
    assert record["model"] == "FakeCitingChatModel"
    links = linked(record)
    assert links["answer_link"] == "content" and links["llm_runs"] == 1
    assert links["llm_run_ids"] == [links["llm_run_id"]]


async def test_the_async_path_links_the_answer_by_content_too(store):
    retriever = fair(store)
    handler = FairnessCallbackHandler.from_retriever(retriever)
    chain = moderated(make_fair_rag_chain(retriever, FakeCitingChatModel()))
    output = await chain.ainvoke("q", config={"callbacks": [handler]})
    (record,) = handler.records
    assert record["answer"] == output["answer"] and linked(record)["answer_link"] == "content"


def test_several_model_runs_on_one_context_are_recorded_as_such(store):
    """A second model run whose prompt holds the context (a self-check over context and
    answer) is counted and listed; the answer stays the first one's."""
    retriever = fair(store)
    handler = FairnessCallbackHandler.from_retriever(retriever)
    check = ChatPromptTemplate.from_messages(
        [("human", "Context:\n{context}\n\nAnswer:\n{answer}\n\nIs the answer supported?")]
    )

    def context_text(inputs):
        return "\n\n".join(d.page_content for d in inputs["context"])

    checker = (
        RunnablePassthrough.assign(context=RunnableLambda(context_text))
        | check
        | FakeListChatModel(responses=["yes"])
        | StrOutputParser()
    )
    chain = make_fair_rag_chain(retriever, FakeCitingChatModel()) | RunnablePassthrough.assign(
        supported=checker
    )
    output = chain.invoke("q", config={"callbacks": [handler]})
    assert output["supported"] == "yes"
    (record,) = handler.records
    assert record["answer"] == output["answer"]
    links = linked(record)
    assert links["llm_runs"] == 2 and len(links["llm_run_ids"]) == 2
    assert links["llm_run_ids"][0] == links["llm_run_id"]


def test_an_empty_context_links_its_answer_by_the_run_tree_first_run_first(store):
    # Nothing shown: no prompt can hold the context; the first model run after it answered.
    retriever = fair(store, search_kwargs={"filter": {"topics": "Nothing"}})
    handler = FairnessCallbackHandler(group_key="gender", protected="female")
    chain = moderated(make_fair_rag_chain(retriever, FakeCitingChatModel()))
    output = chain.invoke("q", config={"callbacks": [handler]})
    assert output["context"] == []
    (record,) = handler.records
    assert record["answer"] == output["answer"] != "SAFE"
    assert linked(record)["answer_link"] == "run_tree" and linked(record)["llm_runs"] == 2


# -- item 4: see through the composition, or refuse naming the fix -----------------------------


class DownStore(FixedPoolStore):
    """A store whose server is gone: every search is refused."""

    def similarity_search_with_score(self, *args, **kwargs):
        raise ConnectionRefusedError("connection refused")


def test_configurable_fields_resolve_and_chain_and_log_audit_the_target_ranked_for(store):
    retriever = fair(store, ranker="forced_exposure", target_share=0.2)
    configurable = retriever.configurable_fields(target_share=ConfigurableField(id="share"))
    handler = FairnessCallbackHandler.from_retriever(configurable)
    chain = make_fair_rag_chain(configurable, FakeCitingChatModel())
    output = chain.invoke("q", config={"callbacks": [handler], "configurable": {"share": 0.6}})
    (record,) = handler.records
    metrics = output["metrics"]
    assert metrics["target"] == record["target"] == {"female": 0.6, "OTHERS": 0.4}
    assert metrics["exposure_disparity"] == pytest.approx(record["exposure_disparity"])
    groups = [d.metadata["gender"] for d in output["context"]]
    expected = FairnessAuditor.create(protected="female", target_share=0.6).retrieval(groups)
    assert metrics["exposure_disparity"] == pytest.approx(expected["exposure_disparity"])


def test_a_fallback_retrievers_list_is_audited_against_its_own_target(store):
    primary = fair(DownStore(*imbalanced_pool()), ranker="forced_exposure", target_share=0.2)
    backup = fair(store, ranker="forced_exposure", target_share=0.6)
    with_backup = primary.with_fallbacks([backup])
    handler = FairnessCallbackHandler.from_retriever(with_backup)
    output = make_fair_rag_chain(with_backup, FakeCitingChatModel()).invoke(
        "q", config={"callbacks": [handler]}
    )
    (record,) = handler.records
    assert output["metrics"]["target"] == record["target"] == {"female": 0.6, "OTHERS": 0.4}
    assert output["metrics"]["exposure_disparity"] == pytest.approx(record["exposure_disparity"])


def test_configurable_alternatives_resolve_to_the_default_and_audit_each_list(store):
    retriever = fair(store, ranker="forced_exposure", target_share=0.2)
    alternatives = retriever.configurable_alternatives(
        ConfigurableField(id="which"),
        default_key="low",
        high=fair(store, ranker="forced_exposure", target_share=0.6),
    )
    handler = FairnessCallbackHandler.from_retriever(alternatives)
    chain = make_fair_rag_chain(alternatives, FakeCitingChatModel())
    high = chain.invoke("q", config={"callbacks": [handler], "configurable": {"which": "high"}})
    low = chain.invoke("q", config={"callbacks": [handler]})
    targets = [high["metrics"]["target"], low["metrics"]["target"]]
    assert [record["target"] for record in handler.records] == targets
    assert high["metrics"]["target"] == {"female": 0.6, "OTHERS": 0.4}
    assert low["metrics"]["target"] == {"female": 0.2, "OTHERS": 0.8}


def test_wrappers_whose_fair_members_disagree_are_refused_naming_the_fix(store):
    retriever = fair(store)
    other_key = fair(store, group_key="topics", protected="Medicine")
    disagreeing = [
        retriever.with_fallbacks([other_key]),
        retriever.configurable_alternatives(ConfigurableField(id="w"), other=other_key),
        retriever.configurable_fields(group_key=ConfigurableField(id="gk")),
        retriever.configurable_alternatives(ConfigurableField(id="w"), lazy=lambda: other_key),
    ]
    for wrapper in disagreeing:
        with pytest.raises(ValueError, match=r"group_key|function") as raised:
            make_fair_rag_chain(wrapper, FakeCitingChatModel())
        assert "group_key= and protected=/target=" in str(raised.value)
        with pytest.raises(ValueError, match="build the handler with group_key="):
            FairnessCallbackHandler.from_retriever(wrapper)
    # Given both explicitly, the chain audits against them and needs no component.
    chain = make_fair_rag_chain(
        disagreeing[0], FakeCitingChatModel(), group_key="gender", protected="female"
    )
    assert chain.invoke("q")["metrics"]["target"] == {"female": 0.5, "OTHERS": 0.5}


def test_k_and_seed_reach_the_fair_retriever_through_its_wrappers(store):
    retriever = fair(store, ranker="forced_exposure")
    configurable = retriever.configurable_fields(target_share=ConfigurableField(id="share"))
    chain = make_fair_rag_chain(configurable.with_fallbacks([fair(store)]), FakeCitingChatModel())
    output = chain.invoke({"question": "q", "k": 3, "seed": 11})
    assert len(output["context"]) == 3
    assert {d.metadata["query_seed"] for d in output["context"]} == {11}
    plain = make_fair_rag_chain(
        store.as_retriever(), FakeCitingChatModel(), group_key="gender", protected="female"
    )
    with pytest.raises(ValueError, match=r"VectorStoreRetriever\) is not a FairRetriever"):
        plain.invoke({"question": "q", "seed": 11})


# -- item 6: copies of one document are one document for de-duplication ----------------------


def test_copies_of_one_document_placed_by_two_rankings_compare_equal(store):
    from langchain_classic.retrievers.multi_query import MultiQueryRetriever
    from langchain_core.load import dumpd

    retriever = fair(store)
    first, second = retriever.invoke("q", seed=1), retriever.invoke("q", seed=2)
    union = MultiQueryRetriever.unique_union(None, first + second)  # LangChain's own rule
    assert [d.id for d in union] == list(dict.fromkeys(d.id for d in first + second))
    originals = {d.id: d for d, _ in store.pool}
    assert all(d == originals[d.id] and originals[d.id] == d for d in first)
    assert first[0] != first[1]
    assert dumpd(first[0])["id"] == ["langchain", "schema", "document", "Document"]


def test_a_list_merging_rankings_of_one_ranker_keeps_it():
    from fairrag_core.kit import shown_provenance

    def placed(seed, rank):
        return {"ranker": "fair", "query_seed": seed, "fair_rank": rank, "fair_k": 2}

    merged = shown_provenance([placed(1, 1), placed(1, 2), placed(2, 1)])
    assert merged["ranker"] == "fair" and merged["merged_rankings"] == 2
    assert merged["query_seed"] is None and merged.get("mixed_after_ranking") is not True
    other = shown_provenance([placed(1, 1), {**placed(2, 1), "ranker": "other"}])
    assert other["ranker"] is None and other["mixed_after_ranking"] is True
