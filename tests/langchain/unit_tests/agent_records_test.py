"""Issue 32: an agent's record when its run fails after searching, and the handler's stated
source id base (fast: a fixed pool, fake tool-calling model)."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import create_retriever_tool
from langgraph.errors import GraphRecursionError
from langgraph.graph.message import add_messages
from pydantic import BaseModel

from fairrag_langchain import FairnessCallbackHandler, FairRetriever
from fairrag_langchain.fakes import FakeSearchingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool


def test_an_agent_that_fails_after_searching_writes_one_record_with_its_error():
    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()), group_key="gender", protected="female"
    )
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    agent = create_agent(FakeSearchingChatModel(searches=[["a"], ["b"], ["c"], ["d"]]), [tool])
    with pytest.raises(GraphRecursionError):
        agent.invoke(
            {"messages": [HumanMessage("who?")]},
            {"callbacks": [handler], "recursion_limit": 4},
        )
    [record] = handler.records
    assert record["error"].startswith("GraphRecursionError")
    assert "answer" not in record and record["query"] == "who?"
    assert len(record["framework"]["searches"]) >= 1 and record["exposure_share"] is not None


def test_the_source_id_base_is_stated_never_guessed():
    with pytest.raises(ValueError, match="source_id_base must be 0"):
        FairnessCallbackHandler(group_key="gender", protected="female", source_id_base=2)
    handler = FairnessCallbackHandler(group_key="gender", protected="female", source_id_base=1)
    assert handler.source_id_base == 1


def _small_retriever(n: int, *, female_every: int, seed: int, **fields) -> FairRetriever:
    """A fair retriever showing 4 of a fixed pool of ``n`` (one female in ``female_every``)."""
    return FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool(n, female_every=female_every)),
        group_key="gender",
        protected="female",
        pool_size=n,
        k=4,
        seed=seed,
        **fields,
    )


def _tool_titles(messages) -> list[str]:
    """The titles a turn's tool messages listed, in their order."""
    from langchain_core.messages import ToolMessage

    text = "\n".join(str(m.text) for m in messages if isinstance(m, ToolMessage))
    return [line[len("Title: ") :] for line in text.splitlines() if line.startswith("Title: ")]


class CitedAnswer(BaseModel):
    """LangChain's citation how-to schema: an answer and the source ids it cites."""

    answer: str
    citations: list[int]


@pytest.mark.parametrize("answer_format", ["text", "json", "tool_call"])
def test_a_later_turn_records_its_own_list_in_its_order(answer_format):
    """A user trial: in a checkpointed conversation, turn 2's search returned a document turn 1
    had shown too; the record placed it where turn 1's message held it (titles out of turn 2's
    order, ``reordered_after_ranking`` true, a JSON source id 0 read as another document).
    Another (``tool_call``): after a turn answered through ``ToolStrategy``, which ends on the
    answer's tool call, no earlier turn was found, so the same happened."""
    from langchain.agents.structured_output import ToolStrategy
    from langgraph.checkpoint.memory import InMemorySaver

    retriever = _small_retriever(8, female_every=3, seed=3)
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    model = FakeSearchingChatModel(
        searches=[["pioneers"]], answer_format=answer_format, max_citations=1
    )
    structured = (
        {"response_format": ToolStrategy(CitedAnswer)} if answer_format == "tool_call" else {}
    )
    agent = create_agent(model, [tool], checkpointer=InMemorySaver(), **structured)
    config = {"callbacks": [handler], "configurable": {"thread_id": "t"}}
    first = agent.invoke({"messages": [HumanMessage("Who are pioneers?")]}, config)
    second = agent.invoke({"messages": [HumanMessage("Name more pioneers.")]}, config)
    shown_one = _tool_titles(first["messages"])
    shown_two = _tool_titles(second["messages"][len(first["messages"]) :])
    assert set(shown_one) & set(shown_two) and shown_one != shown_two  # the case in question
    one, two = handler.records
    assert one["titles"] == shown_one and two["titles"] == shown_two
    assert two["reordered_after_ranking"] is False
    if answer_format == "tool_call":  # the structured response cites source id 0
        assert [c["title"] for c in two["citations"]] == shown_two[:1]
    else:
        assert shown_two[0] in two["answer"]  # the model cites its first entry (source id 0)


@pytest.mark.parametrize("rewriter", ["code", "model"])
def test_one_answer_from_a_question_and_its_rewrite_that_found_the_same_list_is_one_record(
    rewriter,
):
    """A user trial: a chain searching the question and a rewrite of it with one fair
    retriever (a deterministic ranker: the same list twice), both lists in one prompt, one
    answer: two records, one of them unanswered (a phantom question). One record now, of the
    user's question, with both searches."""
    from operator import itemgetter

    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnableLambda, RunnableParallel

    from fairrag_langchain.fakes import FakeCitingChatModel

    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()),
        group_key="gender",
        protected="female",
        ranker="standard",
    )
    text = RunnableLambda(lambda docs: "\n\n".join(d.page_content for d in docs))
    prompt = ChatPromptTemplate.from_template("Context:\n{a}\n\n{b}\nQuestion: {question}\n")
    rewrite = itemgetter("rewrite")
    if rewriter == "model":  # a review: a model's rewrite was a second answer, two records
        from langchain_core.language_models.fake_chat_models import FakeListChatModel

        rewrite = rewrite | FakeListChatModel(responses=["who else?"]) | StrOutputParser()
    chain = (
        RunnableParallel(
            a=itemgetter("question") | retriever | text,
            b=rewrite | retriever | text,
            question=itemgetter("question"),
        )
        | prompt
        | FakeCitingChatModel()
        | StrOutputParser()
    )
    handler = FairnessCallbackHandler.from_retriever(retriever)
    answer = chain.invoke({"question": "who?", "rewrite": "who else?"}, {"callbacks": [handler]})
    (record,) = handler.records
    assert record["answer"] == answer and record["query"] == "who?"
    # both lists at one place in the prompt: in the order the searches ended (in parallel)
    assert sorted(s["query"] for s in record["framework"]["searches"]) == ["who else?", "who?"]


class Joined(TypedDict, total=False):
    """A map-reduce's state: each branch's answer, and the answers joined."""

    answers: Annotated[list, operator.add]
    answer: str


def test_branches_answers_joined_by_code_are_one_record_with_every_search():
    """A user trial: a map-reduce (``Send``) whose branches are research agents, their
    answers joined by plain code into the graph's ``answer``: the one record kept one branch's
    answer and search (a different one from run to run), the other rankings in no record."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()), group_key="gender", protected="female"
    )
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    subs = ["computing", "tennis", "medicine"]

    def research(state: dict) -> dict:
        agent = create_agent(FakeSearchingChatModel(searches=[[state["sub"]]]), [tool])
        out = agent.invoke({"messages": [HumanMessage(state["sub"])]})
        return {"answers": [(state["sub"], out["messages"][-1].content)]}

    def combine(state: Joined) -> Joined:
        return {"answer": "\n".join(text for _, text in sorted(state["answers"]))}

    graph = StateGraph(Joined)
    graph.add_node("research", research)
    graph.add_node("combine", combine)
    graph.add_conditional_edges(START, lambda s: [Send("research", {"sub": q}) for q in subs])
    graph.add_edge("research", "combine")
    graph.add_edge("combine", END)
    handler = FairnessCallbackHandler.from_retriever(retriever)
    out = graph.compile().invoke({"answers": []}, {"callbacks": [handler]})
    (record,) = handler.records
    assert record["answer"] == out["answer"]
    assert sorted(s["query"] for s in record["framework"]["searches"]) == sorted(subs)
    assert record["n_citations"] == out["answer"].count("(DocTitle: ")


@pytest.mark.parametrize("parallel", [False, True])
def test_two_searches_of_one_turn_that_found_one_list_in_two_orders_keep_the_first(parallel):
    """A review of the multi-turn fix: two searches of one turn returning the same documents
    in other orders (a stochastic ranker re-draws) were read where the second search's message
    held them: the record out of order and flagged reordered. Within a turn each search is read
    where it is first held (as before the fix)."""
    from langchain_core.messages import ToolMessage

    retriever = _small_retriever(
        4, female_every=2, seed=1, ranker="stochastic", ranker_params={"alpha": 1.0}
    )
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    searches = [["first", "second"]] if parallel else [["first"], ["second"]]
    agent = create_agent(FakeSearchingChatModel(searches=searches), [tool])
    out = agent.invoke({"messages": [HumanMessage("Who are pioneers?")]}, {"callbacks": [handler]})
    first, second = (_tool_titles([m]) for m in out["messages"] if isinstance(m, ToolMessage))
    assert sorted(first) == sorted(second) and first != second  # the case in question
    (record,) = handler.records
    assert record["titles"] == first and record["reordered_after_ranking"] is False


def test_a_turn_whose_context_and_question_are_two_messages_is_read_from_its_context():
    """A review: a chat prompt [history..., human(context), human(question)], the history
    holding an earlier turn's context with the same documents in another order: the turn was
    taken to start at its last human message (the question), so the list was read from the
    earlier turn's copy. A turn starts after the last earlier answer."""
    from operator import itemgetter

    from langchain_core.messages import AIMessage
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables import RunnableLambda, RunnableParallel

    from fairrag_langchain.fakes import FakeCitingChatModel

    retriever = _small_retriever(40, female_every=5, seed=0, ranker="standard")
    documents = retriever.invoke("who?")
    join = RunnableLambda(lambda docs: "\n\n".join(d.page_content for d in docs))
    history = [
        HumanMessage("Context:\n" + join.invoke(list(reversed(documents)))),
        HumanMessage("Who pioneered it?"),
        AIMessage("Several people did."),
    ]
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "Context:\n{context}"), ("human", "{question}")]
    )
    chain = (
        RunnableParallel(
            context=itemgetter("question") | retriever | join,
            question=itemgetter("question"),
            history=itemgetter("history"),
        )
        | prompt
        | FakeCitingChatModel()
        | StrOutputParser()
    )
    handler = FairnessCallbackHandler.from_retriever(retriever)
    chain.invoke({"question": "And who else?", "history": history}, {"callbacks": [handler]})
    (record,) = handler.records
    assert record["titles"] == [d.metadata["title"] for d in documents]
    assert record["reordered_after_ranking"] is False


class _FailsOnItsSecondCall(FakeSearchingChatModel):
    """A searching model whose second call (after its first search) fails once."""

    calls: int = 0

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, *args, **kwargs):
        self.calls += 1
        if self.calls == 2:
            raise ConnectionError("a 500 from the server")
        return super()._generate(messages, *args, **kwargs)


@pytest.mark.parametrize("ranker", ["standard", "representative_stochastic"])
def test_an_agent_retried_whole_is_recorded_as_its_last_attempt(ranker):
    """``create_agent(...).with_retry()`` whose first attempt searched, then failed: the record
    counted the failed attempt's search and model runs (a review: ``llm_runs`` 4 where a run
    without a failure has 3, or 3 searches for 2)."""
    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()),
        group_key="gender",
        protected="female",
        ranker=ranker,
    )
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    searches = [["role models"], ["role models"]]
    records = []
    for model in (
        _FailsOnItsSecondCall(searches=searches),
        FakeSearchingChatModel(searches=searches),
    ):
        agent = create_agent(model, [tool])
        if isinstance(model, _FailsOnItsSecondCall):
            agent = agent.with_retry(stop_after_attempt=2, wait_exponential_jitter=False)
        handler = FairnessCallbackHandler.from_retriever(retriever)
        agent.invoke({"messages": [HumanMessage("who?")]}, {"callbacks": [handler]})
        [record] = handler.records
        records.append(record)
    retried, plain = (r["framework"] for r in records)
    assert retried["llm_runs"] == plain["llm_runs"]
    assert len(retried["searches"] or []) == len(plain["searches"] or [])


class _MessagesState(TypedDict):
    messages: Annotated[list, add_messages]


@pytest.mark.parametrize("tools_node", ["ToolNode", "hand-written"])
def test_a_rewrite_appended_after_a_search_is_no_new_turn(tools_node):
    """A review: the rule that ends an earlier turn at tool calls a human message follows
    (ToolStrategy's answer) read a rewrite node's user message after this question's own
    search as a turn when the tools ran in a hand-written node (LangGraph's quickstart
    ``BasicToolNode``, which passes no tool call id): the record took the second search's
    order (exposure 0.559 where the list the model was shown first gives 0.637)."""
    from langchain_core.messages import AIMessage, ToolCall, ToolMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import ToolNode

    from fairrag_core.citations import ContextDocument
    from fairrag_langchain.fakes import _TITLE_LINE, _ReplyingChatModel

    class Scripted(_ReplyingChatModel):
        """Searches twice (the first search's results followed by a rewrite), then answers
        with the titles it was shown (a test double)."""

        @property
        def _llm_type(self) -> str:
            return "scripted-test-double"

        def bind_tools(self, tools, **kwargs):
            return self

        def reply(self, messages):
            calls = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
            if calls < 2:
                call = ToolCall(name="search", args={"query": ["first", "second"][calls]})
                return AIMessage("", tool_calls=[{**call, "id": f"call_{calls}"}])
            shown = "\n".join(str(m.text) for m in messages if isinstance(m, ToolMessage))
            titles = list(dict.fromkeys(_TITLE_LINE.findall(shown)))[:4]
            lines = [f"- {ContextDocument(t).person} (DocTitle: {t})" for t in titles]
            return AIMessage("\n".join(lines))

    retriever = _small_retriever(
        4, female_every=2, seed=1, ranker="stochastic", ranker_params={"alpha": 1.0}
    )
    tool = create_retriever_tool(retriever, "search", "Search biographies.")
    model = Scripted()

    def hand_written(state):
        calls = state["messages"][-1].tool_calls
        return {
            "messages": [
                ToolMessage(tool.invoke(c["args"]), name=c["name"], tool_call_id=c["id"])
                for c in calls
            ]
        }

    def searches_done(state):
        return sum(isinstance(m, ToolMessage) for m in state["messages"])

    graph = StateGraph(_MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([tool]) if tools_node == "ToolNode" else hand_written)
    graph.add_node("rewrite", lambda state: {"messages": [HumanMessage("Which pioneers?")]})
    graph.add_edge(START, "agent")
    graph.add_conditional_edges(
        "agent", lambda state: "tools" if state["messages"][-1].tool_calls else END
    )
    graph.add_conditional_edges(
        "tools", lambda state: "rewrite" if searches_done(state) == 1 else "agent"
    )
    graph.add_edge("rewrite", "agent")
    handler = FairnessCallbackHandler.from_retriever(retriever)
    out = graph.compile().invoke(
        {"messages": [HumanMessage("Who are pioneers?")]}, {"callbacks": [handler]}
    )
    first, second = (_tool_titles([m]) for m in out["messages"] if isinstance(m, ToolMessage))
    assert set(first) == set(second) and first != second  # the case in question
    [record] = handler.records
    assert record["titles"] == first and record["reordered_after_ranking"] is False
