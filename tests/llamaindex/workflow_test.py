"""A LlamaIndex Workflow's answer is recorded with its retrieval (docs/SPEC.md, "Records" →
LlamaIndex Workflows): a real ``Workflow`` whose step calls ``apostprocess_nodes`` and then an
LLM (the citing mock) gets one record with the workflow's answer, numbered as the same question
through a query engine is."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from llama_index.core import get_response_synthesizer
from llama_index.core.base.llms.types import ChatMessage, CompletionResponse, LLMMetadata
from llama_index.core.base.response.schema import Response
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.prompts import PromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step

from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex import query_seed as seeded
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.llamaindex.pools import PoolRetriever, make_pool
from tests.llamaindex.structured_answers_test import JsonAnsweringMockLLM, TextAnswer

QUESTION = "influential people in medicine"
COMPARED = (
    "query",
    "answer",
    "model",
    "k",
    "doc_ids",
    "query_seed",
    "exposure_share",
    "groundedness",
    "generation_parity",
    "attributed_generation_parity",
    "n_valid_citations",
)


def fair() -> FairRerankPostprocessor:
    return FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0
    )


def prompt(question: str, nodes) -> str:
    context = "\n\n".join(n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes)
    return PAPER_QA_TEMPLATE.format(context_str=context, query_str=question)


class FairRAG(Workflow):
    """Retrieve, re-rank fairly, answer: the answer is the StopEvent's result (text)."""

    def __init__(self, postprocessor: FairRerankPostprocessor, result: str = "text", **kw: Any):
        super().__init__(**kw)
        self.postprocessor = postprocessor
        self.result = result
        self.llm = CitingMockLLM()

    @step
    async def answer(self, ctx: Context, ev: StartEvent) -> StopEvent:
        pool = await PoolRetriever(make_pool(50)).aretrieve(ev.query)
        nodes = await self.postprocessor.apostprocess_nodes(pool, query_str=ev.query)
        reply = await self.llm.acomplete(prompt(ev.query, nodes))
        if self.result == "response":  # a Response keeping only the first three nodes
            return StopEvent(result=Response(response=reply.text, source_nodes=nodes[:3]))
        if self.result == "mapping":
            return StopEvent(result={"answer": reply.text, "source_nodes": nodes})
        if self.result == "completion":  # the LLM's own response object
            return StopEvent(result=reply)
        if self.result == "chat":
            said = await self.llm.achat([ChatMessage(role="user", content=prompt(ev.query, nodes))])
            return StopEvent(result=said)
        if self.result == "response-in-a-mapping":
            return StopEvent(result={"response": Response(response=reply.text)})
        if self.result == "streaming":  # a streaming synthesizer's response, read by the caller
            synthesizer = get_response_synthesizer(llm=self.llm, streaming=True)
            return StopEvent(result=await synthesizer.asynthesize(ev.query, nodes=nodes))
        if self.result in ("streaming-in-a-mapping", "streamed-in-the-step"):
            synthesizer = get_response_synthesizer(llm=self.llm, streaming=True)
            streamed = await synthesizer.asynthesize(ev.query, nodes=nodes)
            if self.result == "streaming-in-a-mapping":  # the guide's mapping, a stream in it
                return StopEvent(result={"answer": streamed, "source_nodes": nodes[:3]})
            async for token in streamed.async_response_gen():  # streamed out of the step
                ctx.write_event_to_stream(Token(delta=token))
            return StopEvent(result=streamed)
        if self.result == "llm-generator":  # the LLM's own token stream, read by the caller
            return StopEvent(result=await self.llm.astream_complete(prompt(ev.query, nodes)))
        if self.result == "closing-text":  # LlamaIndex's streaming how-to: tokens out, then
            async for token in await self.llm.astream_complete(prompt(ev.query, nodes)):
                ctx.write_event_to_stream(Token(delta=token.delta or ""))
            return StopEvent(result="Workflow complete.")
        if self.result == "chat-streaming":  # a chat engine's stream, read by the caller
            chat = ContextChatEngine.from_defaults(
                retriever=PoolRetriever(make_pool(50)), llm=self.llm, node_postprocessors=[]
            )
            return StopEvent(result=await chat.astream_chat(ev.query))
        return StopEvent(result=reply.text)


class Token(Event):
    delta: str


class Routed(Event):
    question: str


class Chatty(Workflow):
    """A workflow that ranks nothing and shows nothing (an agent's small talk)."""

    @step
    async def route(self, ctx: Context, ev: StartEvent) -> Routed:
        return Routed(question=ev.query)

    @step
    async def reply(self, ev: Routed) -> StopEvent:
        return StopEvent(result=f"Hello! You asked {ev.question!r}.")


def handler() -> FairnessEventHandler:
    return FairnessEventHandler(group_key="gender", protected="female")


async def test_a_workflows_answer_is_recorded_as_a_query_engines_is():
    recorder = handler()
    with recorder, seeded(11):
        answer = await FairRAG(fair()).run(query=QUESTION)
    (record,) = recorder.records  # today's main: the record has answer None, no generation
    assert record["answer"] == answer and record["run_id"].startswith("FairRAG.run-")
    assert record["model"] == "citing-mock" and record["groundedness"] == 1.0
    assert record["generation_parity"] is not None

    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(50)),
        llm=CitingMockLLM(),
        node_postprocessors=[fair()],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    reference = handler()
    with reference, seeded(11):
        await engine.aquery(QUESTION)
    (expected,) = reference.records
    assert {k: record[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}


async def test_a_response_or_mapping_result_gives_its_source_nodes_and_answer():
    recorder = handler()
    with recorder:
        response = await FairRAG(fair(), result="response").run(query=QUESTION)
        mapping = await FairRAG(fair(), result="mapping").run(query=QUESTION)
    first, second = recorder.records
    assert first["answer"] == response.response and first["dropped_after_ranking"] == 2
    assert first["doc_ids"] == [n.node.metadata["doc_id"] for n in response.source_nodes]
    assert second["answer"] == mapping["answer"] and second["dropped_after_ranking"] == 0
    # text under "answer", no citations list: text (a review found it structured_response)
    assert second["framework"]["answer_format"] == "text"


@pytest.mark.parametrize("result", ["completion", "chat", "response-in-a-mapping"])
async def test_a_result_that_is_the_llms_own_response_gives_its_answer(result):
    """``StopEvent(result=await llm.acomplete(...))`` (or ``achat``, or a ``Response`` under
    ``response``): the record had no answer and said nothing (a LlamaIndex user trial)."""
    recorder = handler()
    with recorder:
        await FairRAG(fair(), result=result).run(query=QUESTION)
    (record,) = recorder.records
    assert record["answer"] and record["answer"].startswith("- ") and record["groundedness"] == 1.0


@pytest.mark.parametrize("result", ["streaming", "chat-streaming"])
async def test_a_streaming_result_read_after_the_run_gets_its_record_with_its_answer(
    caplog, result
):
    """A step returning a streaming synthesizer's response (LlamaIndex's own RAG workflow
    example: ``CompactAndRefine(streaming=True)``, read by the caller after the run): the
    handler failed at the run's end (``cannot pickle 'async_generator'``) and wrote no record;
    then it wrote one without the answer. The record waits for the stream, as a query
    engine's does, and holds the text the caller read."""
    recorder = handler()
    with recorder:
        streamed = await FairRAG(fair(), result=result).run(query=QUESTION)
        assert recorder.records == []  # not read yet: no answer to record
        text = "".join([token async for token in streamed.async_response_gen()])
        task = getattr(streamed, "awrite_response_to_history_task", None)
        if task is not None:  # a chat stream's turn ends when its history is written
            await task
    assert text.startswith("- ")
    (record,) = recorder.records
    assert record["titles"] and "failed" not in caplog.text
    assert record["answer"] == text and record["groundedness"] is not None


async def test_a_stream_in_the_results_mapping_or_read_in_the_step_is_the_answer():
    """A review: a step that streams its tokens out (``ctx.write_event_to_stream``) and returns
    the stream it read, and the guide's mapping holding a stream under ``answer``, were
    recorded without an answer (the mapping without even ``answer_status``)."""
    recorder = handler()
    with recorder:
        run = FairRAG(fair(), result="streamed-in-the-step").run(query=QUESTION)
        tokens = [ev.delta async for ev in run.stream_events() if isinstance(ev, Token)]
        await run
        held = await FairRAG(fair(), result="streaming-in-a-mapping").run(query=QUESTION)
        text = "".join([t async for t in held["answer"].async_response_gen()])
    streamed, mapped = recorder.records
    assert streamed["answer"] == "".join(tokens) and streamed["groundedness"] == 1.0
    assert mapped["answer"] == text and len(mapped["titles"]) == 3  # its source_nodes


async def test_an_llms_own_stream_or_a_closing_text_is_no_answer_and_says_so():
    """A user trial: a workflow returning the LLM's own token generator was recorded with no
    answer and no word why; one streaming its tokens out and returning a fixed
    ``"Workflow complete."`` (LlamaIndex's streaming how-to) had that text recorded as the
    model's answer (no bullet, parity n/a) though the model's answer cited four documents."""
    recorder = handler()
    with recorder:
        generator = await FairRAG(fair(), result="llm-generator").run(query=QUESTION)
        text = "".join([r.delta or "" async for r in generator])
        run = FairRAG(fair(), result="closing-text").run(query=QUESTION)
        tokens = [ev.delta async for ev in run.stream_events() if isinstance(ev, Token)]
        assert await run == "Workflow complete."
    streamed, closed = recorder.records
    assert text.startswith("- ") and "".join(tokens).startswith("- ")
    assert streamed.get("answer") is None
    assert streamed["framework"]["answer_status"] == "unconsumed"
    assert closed.get("answer") is None
    assert closed["framework"]["answer_status"] == "not_from_a_model"
    # an answer a later step changed is still the model's (a wrapper added)
    wrapped = FairRAG(fair(), result="text")
    with recorder:
        await wrapped.run(query=QUESTION)
    assert recorder.records[-1]["answer"].startswith("- ")


async def test_a_streaming_result_nobody_reads_is_recorded_unconsumed():
    """Every ranking has a record: a workflow's stream nobody reads is written at the block's
    end without an answer (``answer_status: "unconsumed"``), and only once."""
    recorder = handler()
    with recorder:
        streamed = await FairRAG(fair(), result="streaming").run(query=QUESTION)
    (record,) = recorder.records
    assert record.get("answer") is None and record["framework"]["answer_status"] == "unconsumed"
    assert "".join([token async for token in streamed.async_response_gen()]).startswith("- ")
    assert len(recorder.records) == 1


async def test_a_workflow_that_ranks_and_shows_nothing_writes_no_record():
    recorder = handler()
    with recorder:
        await Chatty().run(query=QUESTION)
    assert recorder.records == []


async def test_a_handler_from_the_postprocessor_records_its_workflows_only():
    postprocessor = fair()
    own = FairnessEventHandler.from_postprocessor(postprocessor)
    with own:
        await FairRAG(postprocessor).run(query=QUESTION)
        await FairRAG(fair()).run(query=QUESTION)  # another postprocessor's
    (record,) = own.records
    assert record["answer"] and record["query"] == QUESTION


class Answering(Workflow):
    """A workflow with a fair postprocessor and the citing mock LLM."""

    def __init__(self, postprocessor: FairRerankPostprocessor, **kw: Any):
        super().__init__(**kw)
        self.postprocessor = postprocessor
        self.llm = CitingMockLLM()


class TwoSearches(Answering):
    """Re-ranks one pool per sub-question, then answers once from both lists (text result);
    ``RejectedFirstSearch``: from the second only (a grader rejected the first)."""

    shows_first = True

    @step
    async def answer(self, ctx: Context, ev: StartEvent) -> StopEvent:
        lists = []
        for prefix in ("a", "b"):
            pool = await PoolRetriever(make_pool(20, prefix=prefix)).aretrieve(ev.query)
            lists.append(await self.postprocessor.apostprocess_nodes(pool, query_str=ev.query))
        shown = lists[0] + lists[1] if self.shows_first else lists[1]
        reply = await self.llm.acomplete(prompt(ev.query, shown))
        return StopEvent(result=reply.text)


class RejectedFirstSearch(TwoSearches):
    shows_first = False


class CutBeforeTheLLM(Answering):
    """Re-ranks, then a step reverses the list and drops its last node before the LLM."""

    @step
    async def answer(self, ctx: Context, ev: StartEvent) -> StopEvent:
        pool = await PoolRetriever(make_pool(20)).aretrieve(ev.query)
        nodes = await self.postprocessor.apostprocess_nodes(pool, query_str=ev.query)
        reply = await self.llm.acomplete(prompt(ev.query, list(reversed(nodes))[:-1]))
        return StopEvent(result=reply.text)


async def test_a_workflow_answering_from_two_lists_is_audited_on_both():
    """Only the last re-ranking's list was audited: 4 of the 8 citations counted invalid."""
    recorder = handler()
    with recorder:
        await TwoSearches(fair()).run(query=QUESTION)
    (record,) = recorder.records
    assert len(record["titles"]) == 10 and record["groundedness"] == 1.0
    assert record["merged_rankings"] == 2
    assert [len(s["titles"]) for s in record["framework"]["searches"]] == [5, 5]
    assert [s["held"] for s in record["framework"]["searches"]] == [True, True]


async def test_a_list_the_llm_never_saw_is_listed_not_held():
    """Every ranking has a record, as in LangChain: a re-ranking the answering LLM never saw
    (a grader rejected it) is in ``searches`` with ``held`` false; the record's list is the
    other."""
    recorder = handler()
    with recorder:
        await RejectedFirstSearch(fair()).run(query=QUESTION)
    (record,) = recorder.records
    searches = record["framework"]["searches"]
    assert [s["held"] for s in searches] == [False, True]
    assert record["doc_ids"] == searches[1]["doc_ids"] != searches[0]["doc_ids"]


async def test_a_step_that_reorders_and_cuts_the_list_before_the_llm_is_audited_as_held():
    """The fair list was audited in its own order, whole, though the LLM saw four of its five
    nodes reversed."""
    recorder = handler()
    with recorder, seeded(3):
        await CutBeforeTheLLM(fair()).run(query=QUESTION)
    (record,) = recorder.records
    with seeded(3):
        placed = await fair().apostprocess_nodes(
            await PoolRetriever(make_pool(20)).aretrieve(QUESTION), query_str=QUESTION
        )
    expected = [n.node.metadata["title"] for n in reversed(placed)][:-1]
    assert record["titles"] == expected
    assert record["reordered_after_ranking"] is True and record["dropped_after_ranking"] == 1


class Conversation(Workflow):
    """A chat Workflow keeping its history: each turn's user message holds that turn's fair
    context, and the LLM is asked once with the whole conversation."""

    def __init__(self, postprocessor: FairRerankPostprocessor, **kw: Any):
        super().__init__(**kw)
        self.postprocessor = postprocessor
        self.llm = CitingMockLLM()
        self.history: list[ChatMessage] = []
        self.shown: list[list[str]] = []

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        pool = await PoolRetriever(make_pool(8)).aretrieve(ev.query)
        nodes = await self.postprocessor.apostprocess_nodes(pool, query_str=ev.query)
        if ev.get("reorder"):  # a later step moves the first document last
            nodes = nodes[1:] + nodes[:1]
        self.shown.append([n.node.metadata["title"] for n in nodes])
        if ev.get("split"):  # the turn in two user messages: the context, then the question
            context = "\n\n".join(n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes)
            self.history.append(ChatMessage(role="user", content=f"Context:\n{context}"))
            self.history.append(ChatMessage(role="user", content=ev.query))
        else:
            self.history.append(ChatMessage(role="user", content=prompt(ev.query, nodes)))
        reply = await self.llm.achat(self.history)
        self.history.append(reply.message)
        return StopEvent(result=reply.message.content)


@pytest.mark.parametrize("split", [False, True])
async def test_a_later_turn_of_a_conversation_records_its_own_list_in_its_order(split):
    """A LlamaIndex trial (the LangChain multi-turn defect again): turn 2's list, sharing
    documents with turn 1's in another order, was read where turn 1's message held them:
    titles out of order, reordered_after_ranking true, exposure share off by 20 points."""
    postprocessor = FairRerankPostprocessor(
        group_key="gender",
        protected="female",
        relevance="similarity",
        seed=3,
        top_n=4,
        ranker="stochastic",
        ranker_params={"alpha": 1.0},
    )
    flow = Conversation(postprocessor)
    recorder = handler()
    with recorder:
        for _ in range(2):  # split: a review found the context before the last user message
            await flow.run(query=QUESTION, split=split)
    first, second = flow.shown
    assert set(first) & set(second) and first != second  # the case in question
    assert [r["titles"] for r in recorder.records] == [first, second]
    assert recorder.records[1]["reordered_after_ranking"] is False


async def test_a_custom_llms_chat_is_one_call_so_a_reorder_before_it_is_seen():
    """A LlamaIndex trial: ``CustomLLM.chat`` runs its own ``complete`` (two LLM events for one
    call), so the run counted two calls after the re-ranking and kept the list as ranked: a
    step's reorder before the one call went unseen."""
    flow = Conversation(fair())
    recorder = handler()
    with recorder:
        await flow.run(query=QUESTION, reorder=True)
    (record,) = recorder.records
    assert record["titles"] == flow.shown[0] and record["reordered_after_ranking"] is True


class ShortAnswerLLM(CitingMockLLM):
    """Answers ``Marie Curie [1].`` whatever it is asked (a test double)."""

    @classmethod
    def class_name(cls) -> str:
        return "ShortAnswerLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="short-answer-mock")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="Marie Curie [1].")


class ShortAnswer(Workflow):
    """Answers with the LLM's short answer as a later step changed it."""

    def __init__(self, how: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.how = how
        self.llm = ShortAnswerLLM()
        self.postprocessor = fair()

    @step
    async def answer(self, ctx: Context, ev: StartEvent) -> StopEvent:
        pool = await PoolRetriever(make_pool(50)).aretrieve(ev.query)
        nodes = await self.postprocessor.apostprocess_nodes(pool, query_str=ev.query)
        said = await self.llm.achat([ChatMessage(role="user", content=prompt(ev.query, nodes))])
        text = str(said.message.content)
        if self.how == "chat-str":  # str(ChatResponse): "assistant: ..."
            return StopEvent(result=str(said))
        return StopEvent(result="Answer: " + text if self.how == "prefixed" else text.rstrip("."))


@pytest.mark.parametrize("how", ["prefixed", "no-period", "chat-str"])
async def test_a_short_answer_a_later_step_changed_is_still_the_models(how):
    """A review: a short answer (under 20 characters) with a prefix, a period cut or written
    as ``str(ChatResponse)`` was recorded ``not_from_a_model`` with no answer."""
    recorder = handler()
    with recorder:
        result = await ShortAnswer(how).run(query=QUESTION)
    (record,) = recorder.records
    assert record["model"] == "short-answer-mock"  # the LLM call was seen
    assert record["answer"] == result and "answer_status" not in record["framework"]


async def test_a_query_engines_stream_a_step_returns_is_recorded_with_the_engines_model():
    """A user trial: a step returning a streaming query engine's response (read by the caller
    after the run, so its LLM call starts when no span leads to the run) was recorded with
    ``model`` null; the engine called alone records its LLM. The engine's LLM is now the run's
    model when no call of the run gave the answer. (Limit: a streaming synthesizer's response
    returned by a step holds no LLM to fall back to: ``model`` stays null.)"""

    class EngineStep(Workflow):
        def __init__(self, engine: RetrieverQueryEngine, **kw: Any):
            super().__init__(**kw)
            self.engine = engine

        @step
        async def answer(self, ev: StartEvent) -> StopEvent:
            return StopEvent(result=await self.engine.aquery(ev.query))

    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(50)),
        llm=CitingMockLLM(),
        node_postprocessors=[fair()],
        text_qa_template=None,
        streaming=True,
    )
    records = []
    for run in (lambda: EngineStep(engine).run(query=QUESTION), lambda: engine.aquery(QUESTION)):
        recorder = handler()
        with recorder, seeded(7):
            streamed = await run()
            text = "".join([token async for token in streamed.async_response_gen()])
        (record,) = recorder.records
        assert record["answer"] == text
        records.append(record)
    in_a_step, alone = records
    assert alone["model"] is not None and in_a_step["model"] == alone["model"]


class QuotingMockLLM(JsonAnsweringMockLLM):
    """A test double answering ``{"answer": "- <title 1>, \\"a true pioneer\\"\\n- <title 2>"}``."""

    def reply(self, prompt: str) -> str:
        titles = re.findall(r"^Title: (.+)$", prompt, re.M)[:2]
        return json.dumps({"answer": f'- {titles[0]}, "a true pioneer"\n- {titles[1]}'})


class QuotedLines(Answering):
    """Answers with a structured LLM's ``TextAnswer`` (``answer: str``): two lines, a quote."""

    @step
    async def answer(self, ctx: Context, ev: StartEvent) -> StopEvent:
        pool = await PoolRetriever(make_pool(20)).aretrieve(ev.query)
        nodes = await self.postprocessor.apostprocess_nodes(pool, query_str=ev.query)
        answer = await QuotingMockLLM().astructured_predict(
            TextAnswer, PromptTemplate("{context}"), context=prompt(ev.query, nodes)
        )
        return StopEvent(result=answer)


async def test_a_structured_answer_text_with_lines_and_quotes_is_the_models():
    """A user trial: a workflow's ``Answer(answer=...)`` holding a newline or a quote was
    recorded as given by no model (``not_from_a_model``, no answer): the model's output is JSON,
    where both are escaped."""
    recorder = handler()
    with recorder:
        result = await QuotedLines(fair()).run(query=QUESTION)
    (record,) = recorder.records
    assert record["answer"] == result.answer and "\n" in record["answer"]
    assert "answer_status" not in record["framework"]
    assert len(record["attributed_sources"]) == 2
