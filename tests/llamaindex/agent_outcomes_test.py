"""What a LlamaIndex agent's record says about how its run ended (docs/SPEC.md "Records" →
LlamaIndex Workflows), with LlamaIndex's own ``FunctionAgent`` calling a ``QueryEngineTool``
over the fair postprocessor, driven by a fake function-calling LLM named as such. Found by a
user trial; failed before the fix: an agent's structured response (``structured_output_fn``)
was ignored, the record reading the chat text "Done." with no citation; a run cancelled with
``handler.cancel_run()`` was recorded with no answer and no error, as a question answered."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.tools import QueryEngineTool

from fairrag_llamaindex import FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.llamaindex.pools import PoolRetriever, make_pool
from tests.llamaindex.structured_answers_test import Citation, CitedAnswer
from tests.llamaindex.tool_calling_llm import fake_tool_caller, tool_messages

QUESTION = "Who are pioneers of medicine?"
PLAN = [("people", {"input": "pioneers of medicine"})]


def agent_and_recorder(**agent_fields: Any) -> tuple[FunctionAgent, FairnessEventHandler]:
    fair = FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0, top_n=3
    )
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(30)), llm=CitingMockLLM(), node_postprocessors=[fair]
    )
    tool = QueryEngineTool.from_defaults(engine, name="people", description="People.")
    agent = FunctionAgent(
        tools=[tool], llm=fake_tool_caller(PLAN, lambda m: "Done."), **agent_fields
    )
    return agent, FairnessEventHandler.from_postprocessor(fair)


def cite_the_first_two(messages: Sequence[ChatMessage]) -> dict[str, Any]:
    """A structured output function (as a user writes one): cites the tool's first two."""
    titles = re.findall(r"\(DocTitle: ([^)]+)\)", "\n".join(tool_messages(messages)))[:2]
    cited = [Citation(title=t, person=t) for t in titles]
    return CitedAnswer(answer="These people.", citations=cited).model_dump()


async def test_an_agents_structured_response_is_its_answer():
    agent, recorder = agent_and_recorder(structured_output_fn=cite_the_first_two)
    with recorder:
        output = await agent.run(user_msg=QUESTION)
    assert output.response.content == "Done." and output.structured_response is not None
    (record,) = recorder.records
    cited = [c["title"] for c in output.structured_response["citations"]]
    assert len(cited) == 2 and set(cited) <= set(record["titles"])
    assert record["framework"]["answer_format"] == "structured_response"  # before: "text"
    assert record["n_citations"] == record["n_valid_citations"] == 2  # before: 0
    assert record["answer"].startswith("These people.")
    assert all(f"(DocTitle: {title})" in record["answer"] for title in cited)


async def test_a_cancelled_agent_run_is_recorded_as_failed():
    agent, recorder = agent_and_recorder()
    with recorder:
        handler = agent.run(user_msg=QUESTION)
        async for event in handler.stream_events():
            if isinstance(event, ToolCallResult):  # searched, not answered
                await handler.cancel_run()
                break
        for _ in range(100):
            if recorder.records:
                break
            await asyncio.sleep(0.01)
    (record,) = recorder.records
    assert record.get("answer") is None and record["framework"]["n_reranks"] == 1
    assert record.get("error") == "WorkflowCancelledByUser: "  # before: no error
    assert record["ranker"] == "representative_stochastic" and len(record["titles"]) == 3


def cite_nothing(messages: Sequence[ChatMessage]) -> dict[str, Any]:
    """A structured output function whose answer cites no document."""
    return CitedAnswer(answer="No sources.", citations=[]).model_dump()


async def test_an_agents_structured_response_citing_nothing_leaves_its_message_the_answer():
    """An empty ``citations`` list: the chat message is the answer (the empty structured
    response won over it, whatever the message cited). Found by a review."""
    agent, recorder = agent_and_recorder(structured_output_fn=cite_nothing)
    with recorder:
        output = await agent.run(user_msg=QUESTION)
    (record,) = recorder.records
    assert output.structured_response["citations"] == []
    assert record["answer"] == output.response.content
    assert record["framework"]["answer_format"] == "text"


def answer_in_text(messages: Sequence[ChatMessage]) -> dict[str, Any]:
    """A structured output function whose schema has no citations list: the answer's text
    cites the tool's first two, as the paper's format writes them."""
    titles = re.findall(r"\(DocTitle: ([^)]+)\)", "\n".join(tool_messages(messages)))[:2]
    return {"answer": "\n".join(f"- {t} (DocTitle: {t})" for t in titles)}


async def test_an_agents_structured_response_without_a_citations_list_is_its_answer_text():
    """A user trial: ``structured_output_fn`` returning ``{"answer": ...}`` (a schema
    ``Answer(answer: str)``) was ignored, the record reading the chat message "Done."."""
    agent, recorder = agent_and_recorder(structured_output_fn=answer_in_text)
    with recorder:
        output = await agent.run(user_msg=QUESTION)
    (record,) = recorder.records
    assert output.response.content == "Done."
    assert record["answer"] == output.structured_response["answer"]
    assert record["framework"]["answer_format"] == "text"
    assert record["n_citations"] == record["n_valid_citations"] == 2


async def test_an_agent_given_the_conversation_records_its_last_user_message_as_the_query():
    """A user trial: ``agent.run(chat_history=[...])`` with the question as the last user
    message, and no ``user_msg``, recorded the tool's search string (``pioneers of
    medicine``) as the question."""
    agent, recorder = agent_and_recorder()
    history = [
        ChatMessage(role="user", content="Hello."),
        ChatMessage(role="assistant", content="Hello! Ask me about people."),
        ChatMessage(role="user", content=QUESTION),
    ]
    with recorder:
        await agent.run(chat_history=history)
    (record,) = recorder.records
    assert record["query"] == QUESTION
