"""An agent whose retriever tool numbers each search's documents from ``[1]``
(:func:`fairrag_langchain.fair_retriever_tool`), answering by entry number: the record reads
each ``[n]`` by the label the document was shown under, a number two searches both showed by the
person the line names (docs/SPEC.md, "Records" → Agents and graphs). Real ``create_agent``, a
FairRetriever on the real Chroma pool (the embedded TREC subset, real all-MiniLM-L6-v2), a fake
tool-calling model that cites the labels it read. Before: the handler read ``[1]`` after two
searches as the merged list's first document, so the second search's people were counted
mis-citations and credited by name only."""

from __future__ import annotations

import re

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import create_retriever_tool
from pydantic import BaseModel, Field

from fairrag_core.citations import ContextDocument
from fairrag_langchain import FairnessCallbackHandler, FairRetriever, fair_retriever_tool
from fairrag_langchain.fakes import FakeSearchingChatModel

pytestmark = pytest.mark.integration

QUESTION = "Who are role models in computing and tennis?"
SEARCHES = [["computer scientists"], ["tennis players"]]
_ENTRY = re.compile(r"^\[([1-9][0-9]*)\]\nTitle: (.+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def group_of(trec_store) -> dict[str, str]:
    """Every title of the pool -> its group, read from Chroma (not from any record)."""
    got = trec_store.get(include=["metadatas"])
    return {m["title"]: m["gender"] for m in got["metadatas"]}


def retriever_of(trec_store) -> FairRetriever:
    return FairRetriever(
        vectorstore=trec_store, group_key="gender", protected="female", k=5, seed=0
    )


def shown_entries(messages) -> list[list[tuple[int, str]]]:
    """Each tool result's ``([n], title)`` entries, as the model read them."""
    return [
        [(int(n), title) for n, title in _ENTRY.findall(str(m.text))]
        for m in messages
        if isinstance(m, ToolMessage)
    ]


def test_the_tool_shows_each_search_numbered_from_one_as_the_chain_does(trec_store):
    retriever = retriever_of(trec_store)
    tool = fair_retriever_tool(
        retriever, "search", "Search.", response_format="content_and_artifact"
    )
    message = tool.invoke(
        {
            "type": "tool_call",
            "id": "c1",
            "name": "search",
            "args": {"query": "computer scientists"},
        }
    )
    content, documents = message.content, message.artifact
    assert [n for n, _ in _ENTRY.findall(content)] == ["1", "2", "3", "4", "5"]
    assert [t for _, t in _ENTRY.findall(content)] == [d.metadata["title"] for d in documents]
    assert content == "\n\n".join(
        f"[{n}]\n{d.page_content.strip()}" for n, d in enumerate(documents, start=1)
    )  # each text whole after its label (it states its own Title: line)
    plain = fair_retriever_tool(retriever, "search", "Search.").invoke({"query": "medicine"})
    assert isinstance(plain, str) and [n for n, _ in _ENTRY.findall(plain)] == list("12345")


@pytest.mark.parametrize("bad", ["name", "description", "response_format", "retriever"])
def test_bad_tool_arguments_are_named(trec_store, bad):
    arguments = {
        "retriever": retriever_of(trec_store),
        "name": "search",
        "description": "Search.",
    }
    extra = {}
    if bad == "retriever":
        arguments["retriever"] = trec_store
    elif bad == "response_format":
        extra["response_format"] = "artifact"
    else:
        arguments[bad] = " "
    with pytest.raises((TypeError, ValueError), match=bad):
        fair_retriever_tool(*arguments.values(), **extra)


def test_an_agents_entry_numbers_are_read_by_the_label_each_search_showed(trec_store, group_of):
    retriever = retriever_of(trec_store)
    tool = fair_retriever_tool(retriever, "search", "Search biographies of people.")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    model = FakeSearchingChatModel(searches=SEARCHES, cite_by="entry_number", max_citations=10)
    agent = create_agent(model, [tool])
    result = agent.invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]})
    [record] = handler.records
    final = result["messages"][-1]
    assert isinstance(final, AIMessage) and record["answer"] == final.content
    first, second = shown_entries(result["messages"])
    assert [n for n, _ in first] == [n for n, _ in second] == [1, 2, 3, 4, 5]
    # by hand: each bullet "- <Person> [n]" cites the entry its search showed under [n]
    cited = [title for _, title in [*first, *second]]
    assert final.content.splitlines() == [
        f"- {ContextDocument(title).person} [{n}]" for n, title in [*first, *second]
    ]
    assert record["titles"] == cited
    sources = record["attributed_sources"]
    assert [s["title"] for s in sources] == cited
    assert {s["provenance"] for s in sources} == {"explicit"}
    assert record["n_miscitations"] == 0 and record["attributed_groundedness_explicit"] == 1.0
    female = sum(group_of[title] == "female" for title in cited) / len(cited)
    assert record["attributed_generation_parity_explicit"] == pytest.approx(female)


def test_plain_create_retriever_tool_keeps_numbering_by_the_merged_list(trec_store):
    """A tool that shows no labels: the model can only count the merged list, as before."""
    retriever = retriever_of(trec_store)
    tool = create_retriever_tool(retriever, "search", "Search biographies of people.")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    model = FakeSearchingChatModel(searches=SEARCHES, cite_by="entry_number", max_citations=10)
    result = create_agent(model, [tool]).invoke(
        {"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]}
    )
    [record] = handler.records
    assert result["messages"][-1].content.splitlines()[5].endswith(" [6]")
    assert [s["title"] for s in record["attributed_sources"]] == record["titles"]
    assert record["n_miscitations"] == 0


class CitedAnswer(BaseModel):
    """Answer the user question based only on the given sources, and cite the sources used."""

    answer: str = Field(description="The answer, based only on the given sources.")
    citations: list[int] = Field(description="The entry numbers of the sources that justify it.")


def test_a_structured_answers_bare_ids_two_searches_showed_cite_no_one(trec_store):
    """Source ids 1..5, as both searches labelled their entries, with no person: a reader
    cannot tell which search's entry each means, so none is credited (before: each was read
    as the first search's entry, twice)."""
    retriever = retriever_of(trec_store)
    tool = fair_retriever_tool(retriever, "search", "Search biographies of people.")
    handler = FairnessCallbackHandler.from_retriever(retriever, source_id_base=1)
    model = FakeSearchingChatModel(
        searches=SEARCHES, answer_format="tool_call", cite_by="entry_number", max_citations=10
    )
    result = create_agent(model, [tool], response_format=ToolStrategy(CitedAnswer)).invoke(
        {"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]}
    )
    [record] = handler.records
    assert result["structured_response"].citations == [1, 2, 3, 4, 5] * 2
    assert record["framework"]["answer_format"] == "structured_response"
    assert record["answer"].count("carried by 2 shown documents") == 10
    assert record["attributed_sources"] == [] and record["n_valid_citations"] == 0
