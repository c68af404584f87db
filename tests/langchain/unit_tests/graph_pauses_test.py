"""LangGraph runs that pause, resume or end without a model's answer, with LangGraph's real
classes (``StateGraph``, ``interrupt``, ``Command``, ``InMemorySaver`` with its strict
serializer, ``create_agent`` and its middleware) and fake models named as such: one record
per question, holding the answer given after a resume; no answer where no model gave one
(docs/SPEC.md, "Records" → Agents and graphs, Interrupted runs)."""

from __future__ import annotations

import logging
from typing import TypedDict

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware, ToolCallLimitMiddleware
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import HumanMessage
from langchain_core.tools import create_retriever_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from fairrag_langchain import FairnessCallbackHandler, FairRetriever
from fairrag_langchain.fakes import FakeCitingChatModel, FakeSearchingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool

QUESTION = "Who were pioneers of computer science?"


@pytest.fixture
def retriever() -> FairRetriever:
    return FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()),
        group_key="gender",
        protected="female",
        k=4,
        seed=0,
    )


class Reviewed(TypedDict, total=False):
    question: str
    documents: list[Document]
    approved: bool
    answer: str


def reviewed(retriever: FairRetriever, saver: InMemorySaver):
    """retrieve -> a human reviews the documents (``interrupt()``) -> generate."""
    llm = FakeCitingChatModel()

    def retrieve(state: Reviewed) -> Reviewed:
        return {"documents": retriever.invoke(state["question"])}

    def review(state: Reviewed) -> Reviewed:
        titles = [d.metadata["title"] for d in state["documents"]]
        return {"approved": interrupt({"titles": titles})}

    def generate(state: Reviewed) -> Reviewed:
        assert all(isinstance(d, Document) for d in state["documents"])  # loaded back whole
        context = "\n\n".join(d.page_content for d in state["documents"])
        return {"answer": llm.invoke(f"Context:\n{context}\nQuestion: {state['question']}").text}

    graph = StateGraph(Reviewed).add_sequence([retrieve, review, generate])
    graph.add_edge(START, "retrieve")
    return graph.compile(checkpointer=saver)


def strict_saver() -> InMemorySaver:
    """LangGraph's checkpointer with the serializer that loads only its allow-listed types
    (``LANGGRAPH_STRICT_MSGPACK``; the default only warns today)."""
    return InMemorySaver(serde=JsonPlusSerializer(allowed_msgpack_modules=None))


def test_a_run_paused_at_interrupt_is_recorded_once_with_the_answer_given_after_the_resume(
    retriever, caplog
):
    graph = reviewed(retriever, strict_saver())
    handler = FairnessCallbackHandler.from_retriever(retriever)
    config = {"callbacks": [handler], "configurable": {"thread_id": "t1"}}
    with caplog.at_level(logging.WARNING):
        paused = graph.invoke({"question": QUESTION}, config)
        assert "__interrupt__" in paused and handler.records == []  # held, not written
        done = graph.invoke(Command(resume=True), config)
    (record,) = handler.records
    assert record["answer"] == done["answer"] and record["groundedness"] == 1.0
    assert record["titles"] == [d.metadata["title"] for d in paused["documents"]]
    assert record["query"] == QUESTION and record["model"] is not None
    assert record["framework"]["resumed_from"] and "answer_status" not in record["framework"]
    assert "unregistered type" not in caplog.text and "Blocked" not in caplog.text


def test_a_run_never_resumed_is_written_as_interrupted(retriever):
    graph = reviewed(retriever, InMemorySaver())
    handler = FairnessCallbackHandler.from_retriever(retriever)
    for thread in ("a", "b"):
        config = {"callbacks": [handler], "configurable": {"thread_id": thread}}
        graph.invoke({"question": QUESTION}, config)
    # a new question on thread "a": its paused run ends unanswered
    graph.invoke(
        {"question": "Name some composers"}, {**config, "configurable": {"thread_id": "a"}}
    )
    assert [r["framework"].get("answer_status") for r in handler.records] == ["interrupted"]
    assert handler.write_interrupted() == 2  # "b", and the new question's own pause (as at exit)
    assert [r["framework"].get("answer_status") for r in handler.records] == ["interrupted"] * 3
    assert all(r.get("answer") is None and r.get("groundedness") is None for r in handler.records)
    assert handler.write_interrupted() == 0


def test_a_resumed_agent_records_the_users_question_not_its_search(retriever):
    """``interrupt_before=["tools"]``, continued with ``invoke(None)``: the run's input holds
    no question; the state's last human message is it (the search text was recorded)."""
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    model = FakeSearchingChatModel(searches=[["computer scientists"]])
    agent = create_agent(model, [tool], checkpointer=InMemorySaver(), interrupt_before=["tools"])
    handler = FairnessCallbackHandler.from_retriever(retriever)
    config = {"callbacks": [handler], "configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)
    out = agent.invoke(None, config)
    (record,) = handler.records
    assert record["query"] == QUESTION and record["answer"] == out["messages"][-1].text


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
        [{"type": "human", "content": QUESTION}],
        QUESTION,
        {"role": "user", "content": QUESTION},
    ],
    ids=["content-blocks", "type-human", "a-string", "one-dict"],
)
def test_the_question_is_read_from_every_message_form_langgraph_accepts(retriever, messages):
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    agent = create_agent(FakeSearchingChatModel(searches=[["computer scientists"]]), [tool])
    handler = FairnessCallbackHandler.from_retriever(retriever)
    agent.invoke({"messages": messages}, {"callbacks": [handler]})
    (record,) = handler.records
    assert record["query"] == QUESTION


@pytest.mark.parametrize(
    "limit",
    [
        ModelCallLimitMiddleware(run_limit=2, exit_behavior="end"),
        ToolCallLimitMiddleware(run_limit=1, exit_behavior="end"),
    ],
    ids=["model-calls", "tool-calls"],
)
def test_a_limit_middlewares_own_message_is_no_answer(retriever, limit):
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    model = FakeSearchingChatModel(searches=[["computer scientists"], ["women in computing"]])
    agent = create_agent(model, [tool], middleware=[limit])
    handler = FairnessCallbackHandler.from_retriever(retriever)
    out = agent.invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]})
    assert "limit" in out["messages"][-1].text  # the middleware's message ends the run
    (record,) = handler.records
    assert record.get("answer") is None and record.get("groundedness") is None
    assert record["framework"]["answer_status"] == "not_from_a_model"
    assert record["framework"]["llm_runs"] >= 1 and record["titles"]


class Graded(TypedDict, total=False):
    question: str
    documents: list[Document]
    relevant: str
    generation: str


def test_a_graders_verdict_is_not_the_answer_when_the_graph_ends_without_one(retriever):
    """Corrective RAG whose grader says "no": the graph ends without generating. The grader
    read the context in another node; it was recorded as the answer (groundedness 0)."""
    grader, generator = FakeListChatModel(responses=["no"]), FakeCitingChatModel()

    def retrieve(state: Graded) -> Graded:
        return {"documents": retriever.invoke(state["question"])}

    def grade(state: Graded) -> Graded:
        context = "\n\n".join(d.page_content for d in state["documents"])
        return {"relevant": grader.invoke(f"Relevant? yes/no\n{context}").text}

    def generate(state: Graded) -> Graded:
        context = "\n\n".join(d.page_content for d in state["documents"])
        return {"generation": generator.invoke(f"Context:\n{context}").text}

    graph = StateGraph(Graded).add_sequence([retrieve, grade])
    graph.add_node(generate)
    graph.add_edge(START, "retrieve")
    graph.add_conditional_edges("grade", lambda s: "generate" if s["relevant"] == "yes" else END)
    handler = FairnessCallbackHandler.from_retriever(retriever)
    out = graph.compile().invoke({"question": QUESTION}, {"callbacks": [handler]})
    assert out["relevant"] == "no" and "generation" not in out
    (record,) = handler.records
    assert record.get("answer") is None and record.get("groundedness") is None
    assert record["framework"]["llm_runs"] == 1  # the grader counted, not recorded
