"""Issue 32: one record per answered question in the apps LangChain 1.x users build, agents and
graphs (docs/SPEC.md, "Records" → Agents and graphs), over ``create_retriever_tool`` of a
FairRetriever on the real Chroma pool (the embedded TREC subset, real all-MiniLM-L6-v2), with
fake tool-calling models. Each record's groundedness and parity are checked against a count made
here by hand from the answer and every document the agent's tools returned. Every test here
failed on main before issue 32 (2 records for 2 searches, the grader's "yes" as the answer)."""

from __future__ import annotations

import re
import warnings

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import create_retriever_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import BaseModel, Field

from fairrag_core import FairnessAuditor
from fairrag_core.prompts import render_prompt
from fairrag_langchain import FairnessCallbackHandler, FairRetriever
from fairrag_langchain.fakes import FakeCitingChatModel, FakeSearchingChatModel

pytestmark = pytest.mark.integration

QUESTION = "Who are role models in computing and tennis?"
SEARCHES = {
    "one search": [["computer scientists"]],
    "two in sequence": [["computer scientists"], ["tennis players"]],
    "three in sequence": [["computer scientists"], ["tennis players"], ["medicine"]],
    "two in parallel": [["computer scientists", "tennis players"]],
    "three in parallel": [["computer scientists", "tennis players", "medicine"]],
}
_TITLE = re.compile(r"^Title:[ \t]*(\S.*?)[ \t]*$", re.MULTILINE)
_BULLET = re.compile(r"^- (.+) \(DocTitle: (.+)\)$")


@pytest.fixture(scope="module")
def group_of(trec_store) -> dict[str, str]:
    """Every title of the pool -> its group, read from Chroma (not from any record)."""
    got = trec_store.get(include=["metadatas"])
    return {m["title"]: m["gender"] for m in got["metadatas"]}


@pytest.fixture
def retriever(trec_store) -> FairRetriever:
    return FairRetriever(
        vectorstore=trec_store, group_key="gender", protected="female", k=5, seed=0
    )


@pytest.fixture
def search_tool(retriever):
    return create_retriever_tool(retriever, "search", "Search biographies of people.")


def shown_titles(messages) -> list[str]:
    """Every title the tools returned in a turn, each once, in the order shown."""
    text = "\n".join(str(m.text) for m in messages if isinstance(m, ToolMessage))
    return list(dict.fromkeys(_TITLE.findall(text)))


def by_hand(answer: str, titles: list[str], group_of: dict[str, str]) -> tuple[float, float]:
    """Groundedness (bullets citing a shown title / bullets) and generation parity (female
    share of the valid citations), counted from the answer's bullets."""
    bullets = [_BULLET.match(line) for line in answer.splitlines() if line.strip()]
    assert bullets and all(bullets), answer
    valid = [m.group(2) for m in bullets if m is not None and m.group(2) in titles]
    female = sum(group_of[title] == "female" for title in valid)
    return len(valid) / len(bullets), female / len(valid)


def check_record(record, result, group_of, *, searches: int, ranker: str) -> None:
    """The record is the final answer's, against everything the tools showed."""
    final = result["messages"][-1]
    assert isinstance(final, AIMessage) and not final.tool_calls
    assert record["answer"] == final.content
    assert record["query"] == QUESTION
    turn = result["messages"]
    titles = shown_titles(turn)
    assert record["titles"] == titles
    assert record["groups"] == [group_of[t] for t in titles]
    groundedness, parity = by_hand(final.content, titles, group_of)
    assert record["groundedness"] == pytest.approx(groundedness)
    assert record["generation_parity"] == pytest.approx(parity)
    assert record["framework"]["answer_link"] == "final_output"
    entries = record["framework"]["searches"]
    assert len(entries) == searches
    auditor = FairnessAuditor.create(protected="female")
    for entry in entries:
        assert entry["ranker"] == ranker and len(entry["titles"]) == 5
        own = auditor.retrieval([group_of[t] for t in entry["titles"]])
        assert entry["exposure_share"] == pytest.approx(own["exposure_share"])
    assert [t for e in entries for t in e["titles"] if t in titles] == [
        t for e in entries for t in e["titles"]
    ]


@pytest.mark.parametrize("name", list(SEARCHES))
def test_create_agent_writes_one_record_of_its_final_answer(retriever, search_tool, group_of, name):
    handler = FairnessCallbackHandler.from_retriever(retriever)
    agent = create_agent(FakeSearchingChatModel(searches=SEARCHES[name]), [search_tool])
    result = agent.invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]})
    [record] = handler.records
    searches = sum(len(turn) for turn in SEARCHES[name])
    check_record(record, result, group_of, searches=searches, ranker=retriever.ranker)
    assert record["framework"]["llm_runs"] == len(SEARCHES[name]) + 1
    assert record["framework"]["llm_run_id"] == record["framework"]["llm_run_ids"][-1]


async def test_create_agent_ainvoke_writes_one_record(retriever, search_tool, group_of):
    handler = FairnessCallbackHandler.from_retriever(retriever)
    agent = create_agent(
        FakeSearchingChatModel(searches=SEARCHES["two in parallel"]), [search_tool]
    )
    result = await agent.ainvoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]})
    [record] = handler.records
    check_record(record, result, group_of, searches=2, ranker=retriever.ranker)


def test_langgraph_create_react_agent_writes_one_record(retriever, search_tool, group_of):
    from langgraph.prebuilt import create_react_agent

    handler = FairnessCallbackHandler.from_retriever(retriever)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # moved to langchain.agents
        agent = create_react_agent(
            FakeSearchingChatModel(searches=SEARCHES["two in sequence"]), [search_tool]
        )
    result = agent.invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]})
    [record] = handler.records
    check_record(record, result, group_of, searches=2, ranker=retriever.ranker)


def agentic_rag_graph(search_tool, grade: str = "yes"):
    """LangGraph's agentic-RAG shape: a model that decides to search, the search, a model that
    grades the retrieved context, and the model that answers from it."""
    router = FakeSearchingChatModel(searches=[["computer scientists"]]).bind_tools([search_tool])
    grader = FakeListChatModel(responses=[grade])
    writer = FakeCitingChatModel(max_citations=4)

    def decide(state: MessagesState):
        return {"messages": [router.invoke(state["messages"])]}

    def grade_documents(state: MessagesState) -> str:
        context = state["messages"][-1].content
        verdict = grader.invoke(f"Is this relevant to the question?\n{context}\nyes or no:")
        return "answer" if verdict.content == "yes" else END

    def answer(state: MessagesState):
        question = state["messages"][0].content
        context = state["messages"][-1].content
        prompt = render_prompt(question, context.split("\n\n"))
        return {"messages": [writer.invoke(prompt)]}

    graph = StateGraph(MessagesState)
    graph.add_node("decide", decide)
    graph.add_node("retrieve", ToolNode([search_tool]))
    graph.add_node("answer", answer)
    graph.add_edge(START, "decide")
    graph.add_conditional_edges("decide", tools_condition, {"tools": "retrieve", END: END})
    graph.add_conditional_edges("retrieve", grade_documents, ["answer", END])
    graph.add_edge("answer", END)
    return graph


def test_a_grader_before_the_answer_is_never_the_answer(retriever, search_tool, group_of):
    handler = FairnessCallbackHandler.from_retriever(retriever)
    graph = agentic_rag_graph(search_tool).compile()
    result = graph.invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]})
    [record] = handler.records
    assert record["answer"] != "yes"
    check_record(record, result, group_of, searches=1, ranker=retriever.ranker)
    assert record["framework"]["llm_runs"] == 3  # router, grader, writer
    assert record["model"] == "FakeCitingChatModel"


def test_a_graph_that_ends_without_answering_records_no_answer(retriever, search_tool):
    handler = FairnessCallbackHandler.from_retriever(retriever)
    graph = agentic_rag_graph(search_tool, grade="no").compile()
    graph.invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]})
    [record] = handler.records
    assert record.get("answer") is None and "groundedness" not in record
    assert len(record["titles"]) == 5


def test_checkpointed_threads_write_one_record_per_turn(retriever, search_tool, group_of):
    handler = FairnessCallbackHandler.from_retriever(retriever)
    agent = create_agent(
        FakeSearchingChatModel(searches=[["tennis players"]]),
        [search_tool],
        checkpointer=InMemorySaver(),
    )
    config = {"callbacks": [handler], "configurable": {"thread_id": "t1"}}
    first = agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)
    second = agent.invoke({"messages": [HumanMessage("And in medicine?")]}, config)
    assert len(second["messages"]) == 2 * len(first["messages"])  # the thread's history
    one, two = handler.records
    assert one["answer"] == first["messages"][-1].content
    assert two["answer"] == second["messages"][-1].content
    assert two["query"] == "And in medicine?"
    # the second turn's record holds that turn's search only
    turn = second["messages"][len(first["messages"]) :]
    groundedness, parity = by_hand(two["answer"], shown_titles(turn), group_of)
    assert two["titles"] == shown_titles(turn)
    assert (two["groundedness"], two["generation_parity"]) == pytest.approx((groundedness, parity))


def test_an_agent_in_a_sub_graph_writes_one_record_of_the_parents_answer(
    retriever, search_tool, group_of
):
    handler = FairnessCallbackHandler.from_retriever(retriever)
    agent = create_agent(
        FakeSearchingChatModel(searches=SEARCHES["two in sequence"]), [search_tool]
    )
    parent = StateGraph(MessagesState)
    parent.add_node("research", agent)
    parent.add_edge(START, "research")
    parent.add_edge("research", END)
    result = parent.compile().invoke(
        {"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]}
    )
    [record] = handler.records
    check_record(record, result, group_of, searches=2, ranker=retriever.ranker)


class CitedAnswer(BaseModel):
    """Answer the question from the given sources, and cite the sources used (LangChain's
    citation how-to: source ids from 0)."""

    answer: str = Field(description="The answer, based only on the given sources.")
    citations: list[int] = Field(description="The integer IDs of the sources that justify it.")


@pytest.mark.parametrize("form", ["tool_call", "json"])
def test_a_structured_agent_answer_gives_the_record_of_the_same_citations_as_text(trec_store, form):
    records, results = {}, {}
    for answer_format in ("text", form):
        retriever = FairRetriever(
            vectorstore=trec_store, group_key="gender", protected="female", k=5, seed=0
        )
        tool = create_retriever_tool(retriever, "search", "Search biographies of people.")
        handler = FairnessCallbackHandler.from_retriever(retriever)
        model = FakeSearchingChatModel(
            searches=SEARCHES["two in sequence"], answer_format=answer_format
        )
        structured = (
            {"response_format": ToolStrategy(CitedAnswer)} if answer_format == "tool_call" else {}
        )
        agent = create_agent(model, [tool], **structured)
        results[answer_format] = agent.invoke(
            {"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]}
        )
        [records[answer_format]] = handler.records
    text, other = records["text"], records[form]
    if form == "tool_call":
        assert isinstance(results[form]["structured_response"], CitedAnswer)
        assert other["framework"]["answer_format"] == "structured_response"
    else:
        assert other["framework"]["answer_format"] == "json"
    assert text["titles"] == other["titles"] and other["n_valid_citations"] == 5
    for name in ("answer", "groundedness", "generation_parity", "citations", "attributed_sources"):
        assert other[name] == text[name], name
