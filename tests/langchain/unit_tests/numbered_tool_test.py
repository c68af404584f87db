"""A numbered retriever tool's searches that show one document twice, under two labels
(:func:`fairrag_langchain.fair_retriever_tool`; docs/SPEC.md, "Records" → Agents and graphs):
the record keeps the document once, at its first place, and reads each label it was shown
under. Fast: a fixed retriever (two lists), real ``create_agent``, a fake tool-calling model."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import HumanMessage
from langchain_core.retrievers import BaseRetriever
from pydantic import BaseModel

from fairrag_langchain import FairnessCallbackHandler, fair_retriever_tool
from fairrag_langchain.fakes import FakeSearchingChatModel

PEOPLE = {
    "Ada Lovelace": "female",
    "Alan Turing": "male",
    "Grace Hopper": "female",
}


def doc(title: str) -> Document:
    return Document(
        id=title,
        page_content=f"Title: {title}\n{title} was a pioneer of computing.",
        metadata={"title": title, "gender": PEOPLE[title]},
    )


class TwoLists(BaseRetriever):
    """Search ``a`` finds Ada then Alan; any other finds Grace then Ada."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        if query == "a":
            return [doc("Ada Lovelace"), doc("Alan Turing")]
        return [doc("Grace Hopper"), doc("Ada Lovelace")]


def agent_and_handler():
    tool = fair_retriever_tool(TwoLists(), "search", "Search biographies.")
    handler = FairnessCallbackHandler(group_key="gender", protected="female")
    model = FakeSearchingChatModel(searches=[["a"], ["b"]], cite_by="entry_number")
    return create_agent(model, [tool]), handler


QUESTION = {"messages": [HumanMessage("Who pioneered computing?")]}


async def test_the_async_agent_reads_the_same_labels():
    agent, handler = agent_and_handler()
    await agent.ainvoke(QUESTION, {"callbacks": [handler]})
    agent, sync_handler = agent_and_handler()
    agent.invoke(QUESTION, {"callbacks": [sync_handler]})
    [record], [sync_record] = handler.records, sync_handler.records
    assert record["attributed_sources"] == sync_record["attributed_sources"]
    assert record["n_miscitations"] == 0 and len(record["attributed_sources"]) == 3


@pytest.mark.parametrize("mode", ["values", "messages", "updates"])
def test_a_streamed_agent_reads_the_same_labels(mode):
    """``agent.stream`` (each stream mode an app reads) writes the record ``invoke`` does."""
    agent, handler = agent_and_handler()
    for _ in agent.stream(QUESTION, {"callbacks": [handler]}, stream_mode=mode):
        pass
    agent, invoked = agent_and_handler()
    agent.invoke(QUESTION, {"callbacks": [invoked]})
    [record], [expected] = handler.records, invoked.records
    assert record["attributed_sources"] == expected["attributed_sources"]
    assert record["answer"] == expected["answer"] and record["n_miscitations"] == 0


def test_a_document_two_searches_showed_is_kept_once_and_cited_by_either_label():
    agent, handler = agent_and_handler()
    result = agent.invoke(QUESTION, {"callbacks": [handler]})
    [record] = handler.records
    # the model cites each title once, by the label it first saw it under
    assert result["messages"][-1].content.splitlines() == [
        "- Ada Lovelace [1]",
        "- Alan Turing [2]",
        "- Grace Hopper [1]",
    ]
    assert record["titles"] == ["Ada Lovelace", "Alan Turing", "Grace Hopper"]
    # [1] is Ada's (search a) and Grace's (search b), [2] Alan's and Ada's: each line's
    # person tells which it cites
    assert [s["title"] for s in record["attributed_sources"]] == [
        "Ada Lovelace",
        "Alan Turing",
        "Grace Hopper",
    ]
    assert {s["provenance"] for s in record["attributed_sources"]} == {"explicit"}
    assert record["n_miscitations"] == 0
    assert record["attributed_generation_parity_explicit"] == 2 / 3


def test_the_numbers_the_record_reads():
    from fairrag_langchain.callbacks import _numbered, _Retrieval

    a = [doc("Ada Lovelace"), doc("Alan Turing")]
    b = [doc("Grace Hopper"), doc("Ada Lovelace")]
    numbered = [
        (_Retrieval(None, documents=a, numbered=True), a),  # type: ignore[arg-type]
        (_Retrieval(None, documents=b, numbered=True), b),  # type: ignore[arg-type]
    ]
    kept, numbers = _numbered(numbered)
    assert [d.id for d in kept] == ["Ada Lovelace", "Alan Turing", "Grace Hopper"]
    assert numbers == [(1, (2,)), (2, ()), (1, ())]
    plain = [(_Retrieval(None, documents=a), a), (_Retrieval(None, documents=b), b)]  # type: ignore[arg-type]
    assert _numbered(plain) == (kept, None)  # numbered as the merged list: nothing to read
    one = [(_Retrieval(None, documents=b, numbered=True), b)]  # type: ignore[arg-type]
    assert _numbered(one)[1] is None  # labels that are the places
    # one object listed twice in a search keeps both labels (a user trial: its first was
    # lost; a review: then its second)
    ada = doc("Ada Lovelace")
    twice = [ada, doc("Alan Turing"), ada]
    kept, numbers = _numbered([(_Retrieval(None, documents=twice, numbered=True), twice)])  # type: ignore[arg-type]
    assert [d.id for d in kept] == ["Ada Lovelace", "Alan Turing"]
    assert numbers == [(1, (3,)), (2, ())]


class CitedAnswer(BaseModel):
    """An answer and the source ids it cites (LangChain's citation how-to)."""

    answer: str
    citations: list[int]


def _agent(model: FakeSearchingChatModel, tool: Any):
    """``create_agent`` with the numbered tool; a tool-call answer through ``ToolStrategy``."""
    if model.answer_format == "tool_call":
        return create_agent(model, [tool], response_format=ToolStrategy(CitedAnswer))
    return create_agent(model, [tool])


@pytest.mark.parametrize("answer_format", ["tool_call", "json"])
def test_structured_source_ids_read_the_labels_the_numbered_tool_showed(answer_format):
    """A user trial: the model cites the tool's ``[1]``..``[n]`` as source ids, and the handler
    read them from 0 (LangChain's how-to base): every id one entry off (parity 0.33 where the
    same ``[n]`` in text gave 0.5). Ids of a numbered tool's documents count from 1 unless a
    base is given. (One search: after two, a bare id both showed names no one, as stated.)"""
    tool = fair_retriever_tool(TwoLists(), "search", "Search biographies.")
    records = {}
    for form in ("text", answer_format):
        model = FakeSearchingChatModel(searches=[["a"]], cite_by="entry_number", answer_format=form)
        handler = FairnessCallbackHandler(group_key="gender", protected="female")
        _agent(model, tool).invoke(QUESTION, {"callbacks": [handler]})
        [records[form]] = handler.records
    text, structured = records["text"], records[answer_format]
    # an agent's ToolStrategy answer is its structured response
    read_as = {"tool_call": "structured_response", "json": "json"}[answer_format]
    assert structured["framework"]["answer_format"] == read_as
    assert structured["framework"]["source_id_base"] == 1
    cited = [s["title"] for s in text["attributed_sources"]]
    assert cited == ["Ada Lovelace", "Alan Turing"]
    assert [s["title"] for s in structured["attributed_sources"]] == cited
    assert structured["attributed_generation_parity"] == text["attributed_generation_parity"]
    # a base given is used as given (the record says which): id 2 is then no shown entry
    given = FairnessCallbackHandler(group_key="gender", protected="female", source_id_base=0)
    model = FakeSearchingChatModel(
        searches=[["a"]], cite_by="entry_number", answer_format=answer_format
    )
    _agent(model, tool).invoke(QUESTION, {"callbacks": [given]})
    [record] = given.records
    assert record["framework"]["source_id_base"] == 0
    assert [s["title"] for s in record["attributed_sources"]] == ["Alan Turing"]


def test_a_handler_pickled_before_keeps_reading_a_numbered_tools_ids_from_one():
    """A review: a handler pickled by the release before (no ``_base_given``), with the default
    base, kept reading a numbered tool's ids from 0 once unpickled."""
    import pickle

    for base, numbered in ((0, 1), (1, 1)):
        handler = FairnessCallbackHandler(
            group_key="gender", protected="female", source_id_base=base
        )
        state = handler.__getstate__()
        del state["_base_given"]  # as the release before pickled it
        old = FairnessCallbackHandler.__new__(FairnessCallbackHandler)
        old.__setstate__(state)
        assert old._ids_base(True) == numbered and old._ids_base(False) == base
        assert pickle.loads(pickle.dumps(handler))._ids_base(True) == base  # given: as given
