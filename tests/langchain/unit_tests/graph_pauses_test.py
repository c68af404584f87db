"""LangGraph runs that pause, resume or end without a model's answer, with LangGraph's real
classes (``StateGraph``, ``interrupt``, ``Command``, ``InMemorySaver`` with its strict
serializer, ``create_agent`` and its middleware) and fake models named as such: one record
per question, holding the answer given after a resume; no answer where no model gave one
(docs/SPEC.md, "Records" → Agents and graphs, Interrupted runs)."""

from __future__ import annotations

import logging
from operator import itemgetter
from typing import Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware, ToolCallLimitMiddleware
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import (
    FakeListChatModel,
    FakeMessagesListChatModel,
)
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnableLambda, RunnableParallel
from langchain_core.tools import create_retriever_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, MessagesState, StateGraph
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
    reply: str


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


def paused_after(retriever: FairRetriever, node: Any, state: type, inputs: dict) -> tuple:
    """``node`` then a human review (``interrupt()``), never resumed: the handler once its
    paused run is written, and the paused graph's output."""

    def review(values: Any) -> dict:
        return {"approved": interrupt("review")}

    graph = StateGraph(state).add_sequence([node, review])
    graph.add_edge(START, node.__name__)
    handler = FairnessCallbackHandler.from_retriever(retriever)
    config = {"callbacks": [handler], "configurable": {"thread_id": "t"}}
    paused = graph.compile(checkpointer=InMemorySaver()).invoke(inputs, config)
    assert handler.write_interrupted() == 1
    return handler, paused


@pytest.mark.parametrize("searches", [["aviators"], ["aviators", "astronomers"]])
def test_a_graph_never_resumed_is_one_record_of_its_question(retriever, searches):
    """A user trial: a graph that searched (once, or twice for one question) and paused was
    written per search (two records of one question, each with its search's query as the
    question, ``searches`` missing) when never resumed; resumed, it was one record."""

    def retrieve(state: Reviewed) -> Reviewed:
        return {"documents": [d for q in searches for d in retriever.invoke(q)]}

    handler, paused = paused_after(retriever, retrieve, Reviewed, {"question": QUESTION})
    (record,) = handler.records
    assert record["query"] == QUESTION and record["framework"]["answer_status"] == "interrupted"
    assert [s["query"] for s in record["framework"]["searches"]] == searches
    assert record["titles"] == list(dict.fromkeys(d.metadata["title"] for d in paused["documents"]))
    assert record.get("answer") is None


def test_a_paused_graph_answering_each_question_by_its_own_chain_keeps_a_record_each(retriever):
    """A review of the one-record rule above: a node answering several questions, each by its
    own retrieval and model call, then a pause never resumed, was written as one record of the
    last question (the others' rankings and answers gone); resumed, it was three."""
    questions = [QUESTION, "Name some physicists", "Name some composers"]
    llm = FakeCitingChatModel()

    class Batch(TypedDict, total=False):
        questions: list[str]
        answers: list[str]
        approved: bool

    def answer_each(state: Batch) -> Batch:
        answers = []
        for question in state["questions"]:
            context = "\n\n".join(d.page_content for d in retriever.invoke(question))
            answers.append(llm.invoke(f"Context:\n{context}\nQuestion: {question}").text)
        return {"answers": answers}

    handler, paused = paused_after(retriever, answer_each, Batch, {"questions": questions})
    assert [r["query"] for r in handler.records] == questions
    assert [r["answer"] for r in handler.records] == paused["answers"]


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


class Chat(MessagesState):
    context: str


def chat_graph(retriever: FairRetriever, *after) -> Any:
    """retrieve into ``context`` -> the fake model answers -> the nodes ``after``."""
    llm = FakeCitingChatModel()

    def retrieve(state: Chat) -> dict:
        documents = retriever.invoke(state["messages"][-1].text)
        return {"context": "\n\n".join(d.page_content for d in documents)}

    def generate(state: Chat) -> dict:
        prompt = [SystemMessage("Context:\n" + state["context"]), state["messages"][-1]]
        return {"messages": [llm.invoke(prompt)]}

    graph = StateGraph(Chat).add_sequence([retrieve, generate, *after])
    graph.add_edge(START, "retrieve")
    return graph.compile()


CHANGES = {
    "footer": lambda text: text + "\n\n(Reviewed.)  ",
    "first-line": lambda text: text.splitlines()[0],
    "upper-case": str.upper,
    "long-wrapper": lambda text: "Here is what I found. " * 20 + text + " That is all. " * 20,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_answer_a_later_node_re_emits_changed_is_the_models(retriever, change):
    """A node after the model re-emits its answer as a new message, changed: the record holds
    what the user received, from that model (a first fix called a footer "not_from_a_model",
    a differential test found the shortened, re-cased and wrapped ones)."""

    def changed(state: Chat) -> dict:
        return {"messages": [AIMessage(CHANGES[change](state["messages"][-1].text))]}

    handler = FairnessCallbackHandler.from_retriever(retriever)
    out = chat_graph(retriever, changed).invoke(
        {"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]}
    )
    (record,) = handler.records
    assert record["answer"] == out["messages"][-1].text
    assert record["model"] == "FakeCitingChatModel"
    assert "answer_status" not in record["framework"]


@pytest.mark.parametrize("graded", [False, True], ids=["no-model", "after-a-grader"])
def test_a_nodes_canned_reply_is_no_answer(retriever, graded):
    """No model run gave it, whether or not a grader ran (whose "no" is inside "cannot")."""
    grader = FakeListChatModel(responses=["no"])

    def grade(state: Chat) -> dict:
        grader.invoke("Relevant?\n" + state["context"])
        return {}

    def canned(state: Chat) -> dict:
        return {"messages": [AIMessage("Sorry, I cannot answer that from our documents.")]}

    def retrieve(state: Chat) -> dict:
        documents = retriever.invoke(state["messages"][-1].text)
        return {"context": "\n\n".join(d.page_content for d in documents)}

    nodes = [retrieve, grade, canned] if graded else [retrieve, canned]
    graph = StateGraph(Chat).add_sequence(nodes)
    graph.add_edge(START, "retrieve")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    graph.compile().invoke({"messages": [HumanMessage(QUESTION)]}, {"callbacks": [handler]})
    (record,) = handler.records
    assert record.get("answer") is None and record.get("groundedness") is None
    assert record["framework"]["answer_status"] == "not_from_a_model"


def test_a_chain_whose_input_names_no_question_never_takes_its_answer_as_the_question():
    """Only a run that continues a thread (a Command, None) reads its question from what it
    returns; a chain given ``{"topic": ...}`` recorded its answer text as the query."""
    first, second = (
        FairRetriever(
            vectorstore=FixedPoolStore(*imbalanced_pool()),
            group_key="gender",
            protected="female",
            k=3,
            seed=seed,
        )
        for seed in (0, 7)
    )

    def prompt(x: dict) -> str:
        shown = [d.page_content for d in x["a"] + x["b"]]
        return "Context:\n" + "\n\n".join(shown) + f"\nQuestion: {x['q']}"

    chain = (
        RunnableParallel(
            a=itemgetter("topic") | first,
            b=itemgetter("topic") | RunnableLambda(lambda t: t + " women") | second,
            q=itemgetter("topic"),
        )
        | RunnableLambda(prompt)
        | FakeCitingChatModel()
        | StrOutputParser()
    )
    handler = FairnessCallbackHandler.from_retriever(first)
    out = chain.invoke({"topic": QUESTION}, {"callbacks": [handler]})
    assert handler.records and all(r["query"] != out for r in handler.records)


def test_a_paused_run_of_a_dropped_handler_is_still_written(retriever, tmp_path):
    """A handler made per request and dropped while its run is paused: held strongly until
    the run is old (``write_interrupted(older_than=...)``, as the age check does) or the
    process exits; before, its record was lost with the handler."""
    import gc

    from fairrag_langchain import callbacks

    graph = reviewed(retriever, InMemorySaver())
    log = tmp_path / "records.jsonl"
    before = set(callbacks._PAUSING)
    handler = FairnessCallbackHandler.from_retriever(retriever, path=str(log))
    config = {"callbacks": [handler], "configurable": {"thread_id": "d"}}
    graph.invoke({"question": QUESTION}, config)
    assert handler.records == []
    del handler, config
    gc.collect()
    held = [h for key, h in callbacks._PAUSING.items() if key not in before]
    assert len(held) == 1 and held[0].write_interrupted(older_than=3600.0) == 0  # not yet
    del held
    callbacks._write_interrupted_at_exit()  # what exit runs
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and '"answer_status": "interrupted"' in lines[0]
    assert set(callbacks._PAUSING) <= before


def test_a_graph_answering_under_a_key_of_its_own_keeps_its_answer(retriever):
    """retrieve -> generate into ``reply`` (no answer key): the generator in another node is
    the answer, as the chain rule reads it (a rule that took only a model in the retrieval's
    own node dropped it)."""
    handler = FairnessCallbackHandler.from_retriever(retriever)
    graph = answered(retriever, into="reply")
    out = graph.invoke({"question": QUESTION}, {"callbacks": [handler]})
    (record,) = handler.records
    assert record["answer"] == out["reply"] and record["groundedness"] == 1.0


def corrective_rag(retriever: FairRetriever, grader: Any, relevant: Any) -> tuple[dict, dict]:
    """retrieve -> grade (``grader``; ``relevant(its message)`` says "yes" or "no") -> generate
    into ``reply`` (a key of its own) when "yes", else the end: the graph's output and its one
    record."""
    generator = FakeCitingChatModel()

    def retrieve(state: Graded) -> Graded:
        return {"documents": retriever.invoke(state["question"])}

    def grade(state: Graded) -> Graded:
        context = "\n\n".join(d.page_content for d in state["documents"])
        said = grader.invoke(f"Is this relevant to {state['question']}? yes or no\n{context}")
        return {"relevant": relevant(said)}

    def generate(state: Graded) -> Graded:
        context = "\n\n".join(d.page_content for d in state["documents"])
        return {"reply": generator.invoke(f"Context:\n{context}\nQ: {state['question']}").text}

    graph = StateGraph(Graded).add_sequence([retrieve, grade])
    graph.add_node(generate)
    graph.add_edge(START, "retrieve")
    graph.add_conditional_edges("grade", lambda s: "generate" if s["relevant"] == "yes" else END)
    handler = FairnessCallbackHandler.from_retriever(retriever)
    out = graph.compile().invoke({"question": QUESTION}, {"callbacks": [handler]})
    (record,) = handler.records
    return out, record


@pytest.mark.parametrize("verdict", ["no", "yes"])
def test_a_structured_grader_is_never_the_answer(retriever, verdict):
    """Corrective RAG with a grader giving structured output (a tool call, as LangGraph's
    tutorials write it) and the answer under a key of its own: the grader was recorded (answer
    '', groundedness 0) whether or not the generator then answered. Found by reading the
    reverted node rule's case again."""
    grade_call = {"name": "GradeDocuments", "args": {"binary_score": verdict}, "id": "c1"}
    grader = FakeMessagesListChatModel(responses=[AIMessage("", tool_calls=[grade_call])])
    out, record = corrective_rag(
        retriever, grader, lambda said: said.tool_calls[0]["args"]["binary_score"]
    )
    if verdict == "no":
        assert "reply" not in out
        assert record.get("answer") is None and record.get("groundedness") is None
    else:
        assert record["answer"] == out["reply"] and record["groundedness"] == 1.0


class Graded(TypedDict, total=False):
    question: str
    documents: list[Document]
    relevant: str
    reply: str


def test_a_run_that_failed_after_a_grader_records_no_answer(retriever):
    """The generator raised: the user received an error, and the grader's "yes" (the only
    model output) was recorded as the answer, groundedness 0. Found by a differential test."""
    grader = FakeListChatModel(responses=["yes"])

    def retrieve(state: Graded) -> Graded:
        return {"documents": retriever.invoke(state["question"])}

    def grade(state: Graded) -> Graded:
        context = "\n\n".join(d.page_content for d in state["documents"])
        return {"relevant": grader.invoke(f"Relevant? yes/no\n{context}").text}

    def generate(state: Graded) -> Graded:
        raise RuntimeError("model down")

    graph = StateGraph(Graded).add_sequence([retrieve, grade, generate])
    graph.add_edge(START, "retrieve")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    with pytest.raises(RuntimeError, match="model down"):
        graph.compile().invoke({"question": QUESTION}, {"callbacks": [handler]})
    (record,) = handler.records
    assert record["error"] == "RuntimeError: model down"
    assert record.get("answer") is None and record.get("groundedness") is None
    assert record["titles"]  # what was shown is still recorded


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_an_agent_whose_human_approves_a_tool_records_the_answer(retriever, mode):
    """``HumanInTheLoopMiddleware``: the model calls ``search`` (not gated) and ``notify``
    (gated) in one turn. ``per_call``: the search runs before the pause and the answer comes
    after the approval; one record, with that answer, continuing the paused run (it was a
    pause with no answer, and nothing after). ``batched``: the whole turn waits, the search
    runs after the approval; one record of the resumed run."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool

    @tool
    def notify(text: str) -> str:
        """Notify the team."""
        return "notified"

    class Notifying(FakeSearchingChatModel):
        """FakeSearchingChatModel that also asks to notify the team with its first search."""

        def reply(self, messages):  # type: ignore[no-untyped-def]
            message = super().reply(messages)
            if message.tool_calls and not any(isinstance(m, ToolMessage) for m in messages):
                call = {"name": "notify", "args": {"text": "go"}, "id": "n1", "type": "tool_call"}
                message.tool_calls.append(call)
            return message

    search = create_retriever_tool(retriever, "search", "Search biographies.")
    agent = create_agent(
        Notifying(searches=[["computer scientists"]]),
        [search, notify],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"notify": True}, interrupt_mode=mode)],
        checkpointer=InMemorySaver(),
    )
    handler = FairnessCallbackHandler.from_retriever(retriever)
    config = {"callbacks": [handler], "configurable": {"thread_id": "h"}}
    paused = agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)
    assert paused["__interrupt__"] and handler.records == []
    decision = {"type": "approve"} if mode == "per_call" else {"decisions": [{"type": "approve"}]}
    done = agent.invoke(Command(resume={paused["__interrupt__"][0].id: decision}), config)
    (record,) = handler.records
    assert record["answer"] == done["messages"][-1].text and record["query"] == QUESTION
    assert record["groundedness"] == 1.0
    assert ("resumed_from" in record["framework"]) == (mode == "per_call")


def test_an_agent_paused_before_a_tool_holding_a_draft_answer_records_no_answer(retriever):
    """A user trial: ``HumanInTheLoopMiddleware`` paused before ``submit_for_review(answer,
    citations)``, never resumed, was recorded with that draft as the answer (groundedness 1,
    a parity), though the tool never ran and the user received nothing."""
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.tools import tool

    @tool
    def submit_for_review(answer: str, citations: list[int]) -> str:
        """Submit a drafted answer and its sources for review."""
        return "submitted"

    search = create_retriever_tool(retriever, "search", "Search biographies.")
    model = FakeSearchingChatModel(
        searches=[["computer scientists"]],
        answer_format="tool_call",
        answer_tool="submit_for_review",
    )
    agent = create_agent(
        model,
        [search, submit_for_review],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"submit_for_review": True})],
        checkpointer=InMemorySaver(),
    )
    handler = FairnessCallbackHandler.from_retriever(retriever)
    config = {"callbacks": [handler], "configurable": {"thread_id": "r"}}
    paused = agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)
    assert paused["__interrupt__"] and paused["messages"][-1].tool_calls[0]["args"]["citations"]
    assert handler.write_interrupted() == 1
    (record,) = handler.records
    assert record["framework"]["answer_status"] == "interrupted" and record["titles"]
    assert record.get("answer") is None and record.get("groundedness") is None


async def test_a_pause_resumed_by_astream_is_recorded_once_with_its_answer(retriever):
    graph = reviewed(retriever, InMemorySaver())
    handler = FairnessCallbackHandler.from_retriever(retriever)
    config = {"callbacks": [handler], "configurable": {"thread_id": "s"}}
    async for _ in graph.astream({"question": QUESTION}, config):
        pass
    assert handler.records == []
    answers = [
        update["generate"]["answer"]
        async for update in graph.astream(Command(resume=True), config)
        if "generate" in update
    ]
    (record,) = handler.records
    assert answers == [record["answer"]] and record["groundedness"] == 1.0


def answered(
    retriever: FairRetriever,
    saver: InMemorySaver | None = None,
    into: str = "answer",
    **breakpoint: list[str],
):
    """retrieve -> generate (its answer into ``into``), paused at a static breakpoint when
    given one (``interrupt_before`` or ``interrupt_after``, which raises nothing in a node)."""
    llm = FakeCitingChatModel()

    def retrieve(state: Reviewed) -> Reviewed:
        return {"documents": retriever.invoke(state["question"])}

    def generate(state: Reviewed) -> dict:
        context = "\n\n".join(d.page_content for d in state["documents"])
        return {into: llm.invoke(f"Context:\n{context}\nQuestion: {state['question']}").text}

    graph = StateGraph(Reviewed).add_sequence([retrieve, generate])
    graph.add_edge(START, "retrieve")
    return graph.compile(checkpointer=saver, **breakpoint)


BREAKPOINTS = {
    "before": {"interrupt_before": ["generate"]},
    "after": {"interrupt_after": ["retrieve"]},
}


@pytest.mark.parametrize("where", list(BREAKPOINTS))
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_run_paused_at_a_static_breakpoint_is_recorded_once_with_its_answer(
    retriever, where, mode
):
    """A static breakpoint pauses the graph between nodes: LangGraph tells only its graph
    callbacks (``on_interrupt``); before, the paused run was written at the pause, without the
    answer given after ``invoke(None)``, and the continuing run wrote nothing."""
    import asyncio

    graph = answered(retriever, strict_saver(), **BREAKPOINTS[where])
    handler = FairnessCallbackHandler.from_retriever(retriever)
    config = {"callbacks": [handler], "configurable": {"thread_id": "s"}}
    if mode == "sync":
        paused = graph.invoke({"question": QUESTION}, config)
        held = list(handler.records)
        done = graph.invoke(None, config)
    else:

        async def both() -> tuple[Any, list, Any]:
            paused = await graph.ainvoke({"question": QUESTION}, config)
            held = list(handler.records)
            return paused, held, await graph.ainvoke(None, config)

        paused, held, done = asyncio.run(both())
    assert "answer" not in paused and held == []  # held, not written at the pause
    (record,) = handler.records
    assert record["answer"] == done["answer"] and record["groundedness"] == 1.0
    assert record["query"] == QUESTION and record["framework"]["resumed_from"]
    assert record["titles"] == [d.metadata["title"] for d in done["documents"]]


def test_a_run_paused_at_a_static_breakpoint_never_continued_is_written_as_interrupted(
    retriever,
):
    graph = answered(retriever, InMemorySaver(), interrupt_before=["generate"])
    handler = FairnessCallbackHandler.from_retriever(retriever)
    graph.invoke(
        {"question": QUESTION}, {"callbacks": [handler], "configurable": {"thread_id": "n"}}
    )
    assert handler.records == [] and handler.write_interrupted() == 1
    (record,) = handler.records
    assert record["framework"]["answer_status"] == "interrupted" and record.get("answer") is None


def test_the_handler_is_a_graph_callback_handler_of_one_class(retriever):
    """It is one of LangGraph's graph callback handlers (LangGraph tells a static breakpoint to
    those alone), by its own class: a user's subclass stays that class, and the handler and
    the class pickle and copy (a first fix swapped the instance's class once LangGraph was
    loaded, and a review found ``type(h) is Mine`` false and the class unpicklable)."""
    import copy
    import pickle

    from langgraph.callbacks import GraphCallbackHandler

    class Mine(FairnessCallbackHandler):
        pass

    mine, plain = Mine.from_retriever(retriever), FairnessCallbackHandler.from_retriever(retriever)
    graph = answered(retriever, InMemorySaver(), interrupt_before=["generate"])
    config = {"callbacks": [mine, plain], "configurable": {"thread_id": "p"}}
    graph.invoke({"question": QUESTION}, config)
    graph.invoke(None, config)
    assert isinstance(mine, GraphCallbackHandler) and type(mine) is Mine
    assert len(mine.records) == len(plain.records) == 1  # each heard the pause
    assert pickle.loads(pickle.dumps(FairnessCallbackHandler)) is FairnessCallbackHandler
    for again in (pickle.loads(pickle.dumps(plain)), copy.deepcopy(plain)):
        assert type(again) is FairnessCallbackHandler
        assert again.records == plain.records and again.group_key == plain.group_key


@pytest.mark.parametrize(
    "said",
    ["yes", "Score: Yes.", '```json\n{"score": "yes"}\n```'],
    ids=["word", "labelled", "json"],
)
def test_a_grader_answering_in_text_is_never_the_answer(retriever, said):
    """Corrective RAG with a grader that answers in text (the local-model tutorials' JSON
    ``{"score": "yes"}`` or a bare "yes") and the answer under a key of its own: the grader's
    "yes" was recorded (groundedness 0) and the generator's real answer dropped. (A grader's
    "no" that ends the graph before any answer is recorded: docs/SPEC.md's limit.)"""
    grader = FakeListChatModel(responses=[said])
    out, record = corrective_rag(
        retriever, grader, lambda said: "yes" if "yes" in said.text.lower() else "no"
    )
    assert record["answer"] == out["reply"] and record["groundedness"] == 1.0
    assert record["framework"]["llm_runs"] == 2


def test_a_checker_after_the_generator_is_never_the_answer(retriever):
    """Self-RAG: the generator answers, then a checker reads the context and the answer and
    says "yes" in text (grounded), kept in the state under a name of its own. A guard: the
    grade rule must never let a later grade displace the answer."""
    generator, checker = FakeCitingChatModel(), FakeListChatModel(responses=["yes"])

    class Checked(Graded, total=False):
        grounded: str

    def retrieve(state: Checked) -> Checked:
        return {"documents": retriever.invoke(state["question"])}

    def generate(state: Checked) -> Checked:
        context = "\n\n".join(d.page_content for d in state["documents"])
        return {"reply": generator.invoke(f"Context:\n{context}\nQ: {state['question']}").text}

    def check(state: Checked) -> Checked:
        context = "\n\n".join(d.page_content for d in state["documents"])
        said = checker.invoke(f"Facts:\n{context}\nAnswer: {state['reply']}\nGrounded?").text
        return {"grounded": said}

    graph = StateGraph(Checked).add_sequence([retrieve, generate, check])
    graph.add_edge(START, "retrieve")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    out = graph.compile().invoke({"question": QUESTION}, {"callbacks": [handler]})
    (record,) = handler.records
    assert out["grounded"] == "yes"
    assert record["answer"] == out["reply"] and record["groundedness"] == 1.0


@pytest.mark.parametrize("said", ["Yes.", "3", '{"answer": "no", "confidence": 0.9}'])
def test_an_answer_shaped_like_a_grade_is_kept_when_nothing_else_answered(retriever, said):
    """A graph whose one model run answers a yes-or-no (or how-many) question, under a key of
    its own: the answer is kept. A first grade rule set every such answer aside in a graph (a
    review found "Yes.", "3" and an ``{"answer": ...}`` object recorded as no answer)."""
    llm = FakeListChatModel(responses=[said])

    def retrieve(state: Reviewed) -> Reviewed:
        return {"documents": retriever.invoke(state["question"])}

    def generate(state: Reviewed) -> Reviewed:
        context = "\n\n".join(d.page_content for d in state["documents"])
        return {
            "reply": llm.invoke(f"Context:\n{context}\nQuestion: Was Person 01 a pioneer?").text
        }

    graph = StateGraph(Reviewed).add_sequence([retrieve, generate])
    graph.add_edge(START, "retrieve")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    graph.compile().invoke({"question": QUESTION}, {"callbacks": [handler]})
    (record,) = handler.records
    if said.startswith("{"):  # JSON with an ``answer`` text: that text is the answer (SPEC)
        assert record["answer"] == "no" and record["framework"]["answer_format"] == "json"
    else:
        assert record["answer"] == said
