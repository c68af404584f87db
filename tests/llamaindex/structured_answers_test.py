"""LlamaIndex structured answers and merged rankings (docs/SPEC.md "Citations" → Structured
citations, "Adapters" → Which list is audited), with LlamaIndex's own classes: a query engine
built with ``output_cls`` (its ``PydanticResponse``), an LLM answering in JSON, a ``Workflow``
returning a pydantic object, and a workflow that ranks twice inside one ``query_seed`` block.
Found by trying the adapter as a user; every test here failed before the fix (the structured
answer recorded as an unread stream with no answer, and ``response_gen`` set on the user's
response; no citation read from JSON or an object; two rankings under one seed recorded as one
with that seed, which cannot re-draw the list)."""

from __future__ import annotations

import json
import re
from typing import Any

from llama_index.core.base.llms.types import LLMMetadata
from llama_index.core.base.response.schema import PydanticResponse
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode
from llama_index.core.workflow import StartEvent, StopEvent, Workflow, step
from pydantic import BaseModel

from fairrag_llamaindex import FairnessEventHandler, FairRerankPostprocessor, query_seed
from tests.llamaindex.pools import PoolRetriever, make_pool
from tests.llamaindex.replying_llm import ReplyingMockLLM

QUESTION = "influential people in medicine"
_TITLE = re.compile(r"^Title: (.+)$", re.MULTILINE)


class Citation(BaseModel):
    title: str
    person: str


class CitedAnswer(BaseModel):
    answer: str
    citations: list[Citation]


class JsonCitingMockLLM(ReplyingMockLLM):
    """A mock LLM (a test double) that answers in JSON, citing the first two titles of its
    prompt: ``{"answer": ..., "citations": [{"title", "person"}, ...]}``."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="json-citing-mock")

    def reply(self, prompt: str) -> str:
        titles = _TITLE.findall(prompt)[:2]
        cited = [{"title": t, "person": t} for t in titles]
        return json.dumps({"answer": "These people.", "citations": cited})


def fair() -> FairRerankPostprocessor:
    return FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0, top_n=4
    )


def cited_by_hand(record: dict) -> None:
    """The record reads the two citations of the first two shown titles: both valid, parity
    the female share of those two (groups from the record's own shown list)."""
    assert record["n_citations"] == 2 and record["n_valid_citations"] == 2
    assert record["groundedness"] == 1.0
    female = sum(group == "female" for group in record["groups"][:2])
    assert record["generation_parity"] == female / 2


def _queried(llm: Any, output_cls: type[BaseModel]) -> tuple[Any, dict]:
    """A query engine over a pool of 50 with the fair postprocessor and ``output_cls``, asked
    ``QUESTION`` once: its response and its one record."""
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(50)),
        llm=llm,
        node_postprocessors=[fair()],
        output_cls=output_cls,
    )
    recorder = FairnessEventHandler(group_key="gender", protected="female")
    with recorder, query_seed(3):
        response = engine.query(QUESTION)
    (record,) = recorder.records
    return response, record


def test_a_query_engine_with_output_cls_records_its_structured_answer():
    response, record = _queried(JsonCitingMockLLM(), CitedAnswer)
    assert isinstance(response, PydanticResponse)
    assert "response_gen" not in vars(response)  # the user's response is left as it came
    assert record["answer"].startswith("These people.\n- ")
    assert record["framework"]["answer_format"] == "structured_response"
    assert "answer_status" not in record["framework"]
    cited_by_hand(record)
    titles = [c.title for c in response.response.citations]
    assert record["titles"][:2] == titles


class TextAnswer(BaseModel):
    answer: str


class ResponseAnswer(BaseModel):
    response: str
    citations: list[Citation]


class JsonAnsweringMockLLM(ReplyingMockLLM):
    """A mock LLM (a test double) answering ``{"answer": "- <title 1>\n- <title 2>"}`` (and
    ``{"response": ..., "citations": [...]}`` as :meth:`reply_with_response`)."""

    with_response: bool = False

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="json-answering-mock")

    def reply(self, prompt: str) -> str:
        titles = _TITLE.findall(prompt)[:2]
        if self.with_response:
            cited = [{"title": t, "person": t} for t in titles]
            return json.dumps({"response": "These two.", "citations": cited})
        return json.dumps({"answer": "\n".join(f"- {t}" for t in titles)})


def test_a_query_engine_whose_output_cls_holds_only_a_text_records_that_text():
    """A user trial: ``output_cls=Answer(answer: str)`` (no citations list) gave a record with
    no answer and every generation metric null, with no error or status; and a
    ``{response, citations}`` schema lost its prose."""
    for with_response, schema in ((False, TextAnswer), (True, ResponseAnswer)):
        engine = RetrieverQueryEngine.from_args(
            PoolRetriever(make_pool(50)),
            llm=JsonAnsweringMockLLM(with_response=with_response),
            node_postprocessors=[fair()],
            output_cls=schema,
        )
        recorder = FairnessEventHandler(group_key="gender", protected="female")
        with recorder, query_seed(3):
            response = engine.query(QUESTION)
        assert isinstance(response, PydanticResponse)
        (record,) = recorder.records
        if with_response:
            assert record["answer"].startswith("These two.\n- ")
            cited_by_hand(record)
        else:
            assert record["answer"] == "\n".join(f"- {t}" for t in record["titles"][:2])
            female = sum(group == "female" for group in record["groups"][:2])
            assert record["attributed_generation_parity"] == female / 2


class SourcedAnswer(BaseModel):
    answer: str
    sources: list[int]


class SourceIdsMockLLM(ReplyingMockLLM):
    """A mock LLM (a test double) answering ``{"answer": "These people.", "sources": [1, 2]}``:
    source ids from 1, as LlamaIndex's context numbers its entries."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="source-ids-mock")

    def reply(self, prompt: str) -> str:
        return json.dumps({"answer": "These people.", "sources": [1, 2]})


def test_an_output_cls_naming_its_citations_sources_records_them():
    """A user trial: ``output_cls`` with ``sources: list[int]`` (not ``citations``) was
    recorded as its text alone, its two sources silently ignored."""
    _, record = _queried(SourceIdsMockLLM(), SourcedAnswer)
    assert record["answer"].startswith("These people.\n- ")
    cited_by_hand(record)


def test_an_answer_written_as_json_is_read_as_its_citations():
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(50)), llm=JsonCitingMockLLM(), node_postprocessors=[fair()]
    )
    recorder = FairnessEventHandler(group_key="gender", protected="female")
    with recorder, query_seed(3):
        engine.query(QUESTION)
    (record,) = recorder.records
    assert record["framework"]["answer_format"] == "json"
    cited_by_hand(record)


class Ranking(Workflow):
    """A workflow whose steps re-rank with ``postprocessor``."""

    def __init__(self, postprocessor: FairRerankPostprocessor, **kw: Any) -> None:
        super().__init__(**kw)
        self.postprocessor = postprocessor


class ObjectAnswer(Ranking):
    """Retrieve, re-rank, answer with a pydantic object (a structured LLM's ``raw``)."""

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        pool = await PoolRetriever(make_pool(50)).aretrieve(ev.query)
        nodes = await self.postprocessor.apostprocess_nodes(pool, query_str=ev.query)
        context = "\n".join(n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes)
        structured = JsonCitingMockLLM().as_structured_llm(CitedAnswer)
        reply = await structured.acomplete(context)
        return StopEvent(result=reply.raw)


async def test_a_workflow_answering_with_a_pydantic_object_is_read_as_its_citations():
    postprocessor = fair()
    recorder = FairnessEventHandler.from_postprocessor(postprocessor)
    with recorder, query_seed(3):
        result = await ObjectAnswer(postprocessor, timeout=30).run(query=QUESTION)
    assert isinstance(result, CitedAnswer)
    (record,) = recorder.records
    assert record["framework"]["answer_format"] == "structured_response"
    cited_by_hand(record)


class TwoRankings(Ranking):
    """Ranks two pools (the question, then a rewrite) and shows the union of both lists."""

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        shown: list = []
        for seed, prefix in enumerate(("first", "rewrite")):  # two queries: other scores
            pool = await PoolRetriever(make_pool(20, prefix=prefix, seed=seed)).aretrieve(ev.query)
            shown += await self.postprocessor.apostprocess_nodes(pool, query_str=ev.query)
        answer = "\n".join(f"- {n.node.metadata['title']}" for n in shown)
        return StopEvent(result={"answer": answer, "source_nodes": shown})


async def test_two_rankings_under_one_query_seed_are_recorded_as_merged():
    postprocessor = fair()
    records = []
    for seeded in (False, True):
        recorder = FairnessEventHandler.from_postprocessor(postprocessor)
        with recorder:
            if seeded:
                with query_seed(5):
                    await TwoRankings(postprocessor, timeout=30).run(query=QUESTION)
            else:
                await TwoRankings(postprocessor, timeout=30).run(query=QUESTION)
        (record,) = recorder.records
        records.append(record)
    for record in records:
        assert len(record["titles"]) == 8 and record["k"] == 8
        assert record["merged_rankings"] == 2 and record["ranker"] == "representative_stochastic"
        assert record["query_seed"] is None and record["pool_size"] is None


class Chunked(Ranking):
    """Re-ranks, splits each node in two chunks (as CitationQueryEngine does: each copies its
    node's metadata), and answers with an object citing sources 3 and 4: both chunks of the
    second document."""

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        pool = await PoolRetriever(make_pool(50)).aretrieve(ev.query)
        nodes = await self.postprocessor.apostprocess_nodes(pool, query_str=ev.query)
        chunks = []
        for node in nodes:
            text = node.node.get_content()
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                chunk = TextNode(text=piece, metadata=dict(node.node.metadata))
                chunks.append(NodeWithScore(node=chunk, score=node.score))
        cited = SourceIds(answer="They.", citations=[3, 4])
        return StopEvent(result={"answer": cited, "source_nodes": chunks})


class SourceIds(BaseModel):
    answer: str
    citations: list[int]


async def test_source_ids_of_chunks_cite_the_documents_the_chunks_come_from():
    """Source ids number the entries the LLM was shown: chunks, when a step split the
    documents (they were read against the documents: sources 3 and 4 became documents 3 and
    4, both valid, where both chunks are of document 2)."""
    postprocessor = fair()
    recorder = FairnessEventHandler.from_postprocessor(postprocessor)
    with recorder, query_seed(3):
        await Chunked(postprocessor, timeout=30).run(query=QUESTION)
    (record,) = recorder.records
    second = record["titles"][1]
    assert record["answer"].count(f"(DocTitle: {second})") == 2
    assert record["n_valid_citations"] == 2


class EngineInside(Ranking):
    """A workflow whose step returns an ``output_cls`` query engine's ``PydanticResponse``."""

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        engine = RetrieverQueryEngine.from_args(
            PoolRetriever(make_pool(50)),
            llm=JsonCitingMockLLM(),
            node_postprocessors=[self.postprocessor],
            output_cls=CitedAnswer,
        )
        return StopEvent(result=await engine.aquery(ev.query))


async def test_a_workflow_returning_a_pydantic_response_keeps_its_answer():
    """``PydanticResponse`` answers every attribute name: a streaming check by ``hasattr`` took
    it for a stream and recorded no answer (a review)."""
    postprocessor = fair()
    recorder = FairnessEventHandler.from_postprocessor(postprocessor)
    with recorder, query_seed(3):
        await EngineInside(postprocessor, timeout=30).run(query=QUESTION)
    (record,) = recorder.records
    assert record["answer"] and record["groundedness"] == 1.0


class ChatFlow(Workflow):
    """A workflow returning a chat engine's reply (``AgentChatResponse``: its ``sources`` are
    LlamaIndex tool outputs, not citations)."""

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        from llama_index.core.chat_engine import ContextChatEngine

        from fairrag_llamaindex.fakes import CitingMockLLM

        chat = ContextChatEngine.from_defaults(
            retriever=PoolRetriever(make_pool(50)),
            llm=CitingMockLLM(),
            node_postprocessors=[ev.fair],
        )
        return StopEvent(result=await chat.achat(ev.query))


async def test_a_chat_engines_sources_are_no_citations():
    """A review: once ``sources`` was read as a citations list, a chat engine's reply (its
    ``sources``: tool outputs) was recorded as a structured answer with one "unreadable
    citation" bullet per source (groundedness 1.0 -> 0.83). Its text is the answer."""
    fair = FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0
    )
    recorder = FairnessEventHandler.from_postprocessor(fair)
    with recorder:
        out = await ChatFlow().run(query="influential people in medicine", fair=fair)
    assert len(out.sources) >= 1
    (record,) = recorder.records
    assert record["framework"]["answer_format"] == "text"
    assert "unreadable citation" not in record["answer"]
    assert record["groundedness"] == 1.0 and record["n_valid_citations"] == 5
