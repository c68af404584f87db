"""A record's ``model`` is the LLM whose output holds the answer, streamed or not (docs/SPEC.md
"Records" → LlamaIndex Workflows, "Which answer is recorded"), with LlamaIndex's own classes:
a ``CondenseQuestionChatEngine`` (a condensing LLM, the query engine's answering one) through
``stream_chat`` and ``astream_chat``, and ``FunctionAgent`` and ``ReActAgent`` with
``streaming=True`` calling a ``QueryEngineTool``. Found by a user trial; failed before the fix:
a streamed LLM call's end event comes after its span closed, so its output was never read and
the record named the condensing LLM, or the tool engine's LLM that answered the search."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.chat_engine import CondenseQuestionChatEngine
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.tools import QueryEngineTool

from fairrag_llamaindex import FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex.fakes import CitingMockLLM, cite_context
from tests.llamaindex.agent_searches_test import QUERIES, FakeReActLLM
from tests.llamaindex.pools import PoolRetriever, make_pool
from tests.llamaindex.replying_llm import ReplyingMockLLM
from tests.llamaindex.tool_calling_llm import fake_tool_caller, tool_messages


class FakeCondensingLLM(ReplyingMockLLM):
    """A mock LLM (a test double) that condenses every conversation to one question."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="fake-condenser")

    def reply(self, prompt: str) -> str:
        return "Who are pioneers of medicine?"


def fair() -> FairRerankPostprocessor:
    return FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0, top_n=3
    )


def condensing_engine(
    llm: Any, postprocessor: FairRerankPostprocessor, streaming: bool
) -> CondenseQuestionChatEngine:
    """A chat engine that condenses each turn (the fake condenser) before a query engine over
    a 30-node pool answers it with ``llm``, ``postprocessor`` re-ranking."""
    return CondenseQuestionChatEngine.from_defaults(
        query_engine=RetrieverQueryEngine.from_args(
            PoolRetriever(make_pool(30)),
            llm=llm,
            node_postprocessors=[postprocessor],
            streaming=streaming,
        ),
        llm=FakeCondensingLLM(),
    )


@pytest.mark.parametrize("method", ["chat", "stream_chat", "astream_chat"])
async def test_a_condensing_chat_engine_names_the_query_engines_llm(method):
    postprocessor = fair()
    engine = condensing_engine(CitingMockLLM(), postprocessor, streaming=method != "chat")
    recorder = FairnessEventHandler.from_postprocessor(postprocessor)
    with recorder:
        for asked, turn in enumerate(("Who are pioneers?", "And in medicine?"), 1):
            # the second turn is condensed (by the condensing LLM) before it is answered
            if method == "chat":
                engine.chat(turn)
            elif method == "stream_chat":
                "".join(engine.stream_chat(turn).response_gen)
            else:
                streamed = await engine.astream_chat(turn)
                async for _ in streamed.async_response_gen():
                    pass
                for _ in range(50):  # the history is written by a task of its own
                    if len(recorder.records) == asked:
                        break
                    await asyncio.sleep(0.01)
    assert [r["model"] for r in recorder.records] == ["citing-mock", "citing-mock"]
    assert all(r["n_valid_citations"] == 3 for r in recorder.records)


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_function_agent_relaying_its_tools_answer_names_the_agents_llm(streaming):
    postprocessor = fair()
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(30)), llm=CitingMockLLM(), node_postprocessors=[postprocessor]
    )
    tool = QueryEngineTool.from_defaults(engine, name="people", description="People.")
    # the agent repeats the tool's answer word for word: both LLMs' outputs hold the answer
    llm = fake_tool_caller(
        [("people", {"input": "pioneers of medicine"})], lambda m: tool_messages(m)[-1]
    )
    agent = FunctionAgent(tools=[tool], llm=llm, streaming=streaming)
    recorder = FairnessEventHandler.from_postprocessor(postprocessor)
    with recorder:
        output = await agent.run(user_msg="Who are role models in medicine?")
    (record,) = recorder.records
    assert record["answer"] == output.response.content
    assert record["model"] == "fake-tool-caller"  # before, streamed: "citing-mock"
    assert record["n_valid_citations"] == 3


async def test_a_streaming_react_agent_names_the_agents_llm():
    postprocessor = fair()
    pools = {q: make_pool(30, prefix=f"s{i}") for i, q in enumerate(QUERIES)}
    retriever = PoolRetriever(pool_for=lambda q: pools[next(k for k in QUERIES if k in q)])
    engine = RetrieverQueryEngine.from_args(
        retriever, llm=CitingMockLLM(), node_postprocessors=[postprocessor]
    )
    tool = QueryEngineTool.from_defaults(engine, name="people", description="People.")
    agent = ReActAgent(tools=[tool], llm=FakeReActLLM())  # streaming, LlamaIndex's default
    recorder = FairnessEventHandler.from_postprocessor(postprocessor)
    with recorder:
        await agent.run(user_msg="Who are role models in medicine?")
    (record,) = recorder.records
    assert record["model"] == "fake-react"  # before: "citing-mock"
    assert record["n_valid_citations"] == 6


class FailingStreamLLM(CitingMockLLM):
    """A mock LLM (a test double) whose stream breaks after its first chunk, as a client that
    sends its request on the first read fails on a refused key or a dropped connection."""

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        text = cite_context(prompt)
        yield CompletionResponse(text=text[:10], delta=text[:10])
        raise RuntimeError("stream broke")


def test_a_chat_stream_that_fails_at_once_is_recorded_with_its_error_every_turn(monkeypatch):
    """Its history writer ended before the stream_chat span did and found nothing to finish:
    the turn was never recorded and stayed held (100 turns: 3 records, 97 held). Found by a
    review."""
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the writer re-raises
    postprocessor = fair()
    engine = condensing_engine(FailingStreamLLM(), postprocessor, streaming=True)
    recorder = FairnessEventHandler.from_postprocessor(postprocessor)
    turns = 20
    with recorder:
        for _ in range(turns):
            engine.reset()
            streamed = engine.stream_chat("Who are pioneers?")
            with contextlib.suppress(RuntimeError):
                for _ in streamed.response_gen:
                    pass
            thread = streamed.write_response_to_history_thread
            if thread is not None:
                thread.join(30)
    assert len(recorder.records) == turns
    assert all(r["error"] == "RuntimeError: stream broke" for r in recorder.records)
    assert not recorder._live.chat_streams and not recorder._live.runs
