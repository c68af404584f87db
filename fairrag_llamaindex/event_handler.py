"""An instrumentation event handler that writes one fairness record per answered LlamaIndex
question (docs/SPEC.md, "Records"), built by :func:`fairrag_core.kit.run_record`.

This module only finds, for each question, which nodes the LLM was shown, what the answer said
and which fair re-ranking placed them; every number and every field comes from the core kit.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import inspect
import json
import logging
import os
import re
import threading
import weakref
from collections.abc import AsyncIterator, Hashable, Iterable, Iterator, Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.llms.types import ChatResponse, CompletionResponse, MessageRole
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.bridge.pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)
from llama_index.core.chat_engine.types import BaseChatEngine, StreamingAgentChatResponse
from llama_index.core.instrumentation import Dispatcher, get_dispatcher, root_manager
from llama_index.core.instrumentation.dispatcher import active_instrument_tags
from llama_index.core.instrumentation.event_handlers.base import BaseEventHandler
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
    LLMPredictStartEvent,
)
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.workflow import StopEvent
from pydantic import AliasChoices  # not re-exported by LlamaIndex's bridge (pydantic 2)

from fairrag_core import FairnessAuditor, JsonLinesLog, Target, group_labels
from fairrag_core.citations import renumber_citations
from fairrag_core.exposure import ExposureModel, make_exposure_model
from fairrag_core.kit import (
    DEFAULT_MAX_RECORDS,
    KeptSinks,
    RecordKeeper,
    ShownDocument,
    check_group_key,
    check_max_records,
    collapsed,
    document_title,
    entries_by_label,
    held_order,
    located,
    place_in,
    ranked_for,
    refuse_bools,
    search_entry,
    search_start,
    shown_once,
    shown_record,
    unaudited_record,
)
from fairrag_core.kit.component import known_arguments
from fairrag_core.structured_citations import (
    CITATION_FIELDS,
    Entry,
    citation_list,
    read_structured_answer,
    written_answer,
)

from . import _private as private
from .postprocessor import (
    CONTEXT_HEADER_KEY,
    MODEL_NAME_PREFIX,
    EmptyRankingEvent,
    FairRerankPostprocessor,
    lineage_of,
)
from .spans import (
    ENTERED_HANDLERS,
    QUESTION_METHODS,
    SPANS,
    OpenSpan,
    ensure_registered,
    is_workflow_run,
)

__all__ = ["FairnessEventHandler"]

logger = logging.getLogger(__name__)

RUN_METHODS = QUESTION_METHODS
"""Engine methods that answer one question: the span of the outermost one is a run."""

CANCELLED = "WorkflowCancelledByUser: "
"""The ``error`` of a Workflow run the user cancelled (``handler.cancel_run()``), written as
every failure is (``<exception class>: <message>``; the exception LlamaIndex raises to the
caller has no message), as LangChain's handler writes a cancelled run's
(``CancelledError: ``): a record with an ``error`` is never an answered question."""

_CANCELLED_EVENT = "SpanCancelledEvent"
"""The event LlamaIndex's workflows send, in the run's span, just before ending a cancelled
run's span cleanly (by name: it lives in a private module of ``workflows``)."""


@dataclass
class _Rerank:
    """What one FairRerankPostprocessor call showed."""

    query: str | None
    postprocessor: Any
    nodes: list[NodeWithScore] = field(default_factory=list)
    ranking: dict[str, Any] | None = None
    """The ranking's keys when it placed no node (an empty pool: ``EmptyRankingEvent``)."""
    entered: tuple[Any, ...] = ()
    """The handlers whose ``with`` block the call ran in (for a call outside any engine)."""


NOT_FROM_A_MODEL = "not_from_a_model"
"""``framework.answer_status`` of a run that returned an answer no LLM call gave."""
UNCONSUMED = "unconsumed"
"""``framework.answer_status`` of a streaming answer nobody read when its record was written
(collected, flushed), or that the handler cannot follow (a workflow returning an LLM's own
token generator)."""


def _trimmed(text: str) -> str:
    """``text`` whitespace collapsed, case-folded, without punctuation at its ends (what
    :meth:`_Run.gave` compares)."""
    return collapsed(text).casefold().strip(" .,;:!?\"'`*_-")


def _llm_generator(result: Any) -> bool:
    """Whether a workflow's result is (or its ``StopEvent`` holds) a generator: an LLM's own
    ``stream_complete``/``astream_chat`` tokens, which only its caller reads."""
    payload = getattr(result, "result", None) if isinstance(result, StopEvent) else result
    return inspect.isgenerator(payload) or inspect.isasyncgen(payload)


@dataclass
class _Run:
    """A question being answered: its engine span and the fair re-rankings made in it."""

    span: OpenSpan
    query: str | None = None
    reranks: list[_Rerank] = field(default_factory=list)
    model: str | None = None
    engine_model: str | None = None
    """The LLM of a query or chat engine that ran inside this run (a workflow's step): the
    model when no call of the run gave the answer (a stream the caller reads after the run
    ended, whose call no span leads to the run: a user trial found ``model`` null)."""
    calls: list[_Call] = field(default_factory=list)
    """The run's LLM calls, in start order (a call's output is read when it ends, streamed or
    not: the handler finds a call by its span even after that span closed)."""
    calls_since_rerank: int = 0
    """LLM calls since the last fair re-ranking ended (a refine synthesis makes several)."""
    prompt: str | None = None
    """The answering call's prompt (:meth:`answered`), whitespace collapsed: which
    re-rankings' lists it held."""
    turn: int = 0
    """Where in :attr:`prompt` a conversation's current turn (its last user message) begins;
    0 for a prompt of one turn (:func:`fairrag_core.kit.search_start`)."""
    cancelled: bool = False
    """A Workflow run the user cancelled (``handler.cancel_run()``): LlamaIndex ends its span
    as if it had returned nothing; its record is a failed run's (:data:`CANCELLED`)."""

    def gave(self, answer: str) -> bool:
        """Whether ``answer`` is an LLM call's output of this run, or that output as a later
        step changed it (one holds the other, ignoring case and the ends' punctuation:
        ``"Answer: " + output``, ``str(chat_response)``'s ``"assistant: ..."``, a period cut),
        or the run called no LLM (its record says so: no model). A canned closing text
        (``"Workflow complete."`` after the tokens were written to the event stream), which
        holds no output and no output holds, is none."""
        if not self.calls:
            return True
        forms = [_trimmed(form) for form in _output_forms(answer)]
        for call in self.calls:
            output = _trimmed(call.output or "")
            if output and any(said and (output in said or said in output) for said in forms):
                return True
        return False

    def answered(self, answer: Any) -> None:
        """Take the call that gave ``answer`` (its output holds the answer's text; the last
        such) as the answering one: its model and prompt; else the first call's model, as
        before, and the last call's prompt. A call after the answer (an evaluator's, a
        follow-up's) is never the answer's model."""
        text = _answer_text(answer)
        forms = [] if text is None else [collapsed(form) for form in _output_forms(_raw(answer))]
        given = [
            call
            for call in self.calls
            if call.output and any(f and (f in call.output or call.output in f) for f in forms)
        ]
        if given:
            self.model = given[-1].model or self.model
            self.prompt, self.turn = given[-1].prompt, given[-1].turn
        elif self.calls:
            self.model = self.model or self.calls[0].model
            self.prompt, self.turn = self.calls[-1].prompt, self.calls[-1].turn


@dataclass(eq=False)
class _Call:
    """One LLM call of a run: its model, prompt and output (whitespace collapsed). A streamed
    call's output is its whole text, read from its end event, which comes once the stream is
    read, after the call's own span closed."""

    model: str | None
    prompt: str | None
    turn: int = 0
    """Where the prompt's current turn begins (:attr:`_Run.turn`)."""
    output: str | None = None


def _raw(answer: Any) -> str:
    """An answer's text as given (a text, or a response's ``response``)."""
    text = answer if isinstance(answer, str) else getattr(answer, "response", None)
    return text if isinstance(text, str) else ""


def _output_forms(text: str) -> list[str]:
    """``text`` as an LLM's output may hold it: as it is, and as the content of a JSON string
    (a structured output's field, its newlines and quotes escaped; a user trial found a
    workflow's two-line ``Answer(answer=...)`` recorded as given by no model)."""
    return list(
        dict.fromkeys([text, json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1]])
    )


def _answer_text(answer: Any) -> str | None:
    """An answer's text, whitespace collapsed (a text, or a response's ``response``)."""
    text = _raw(answer)
    return collapsed(text) if text.strip() else None


@dataclass(eq=False)
class _Stream:
    """A streaming answer whose record is not written yet: written when its stream ends, or
    with ``answer_status: "unconsumed"`` when its stream is collected (or the handler flushed)
    before anyone started reading it."""

    run: _Run
    sources: list[NodeWithScore] | None
    tags: dict[str, Any]
    started: bool = False
    done: bool = False


def _is_run(span: OpenSpan) -> bool:
    return (
        span.method in RUN_METHODS and isinstance(span.instance, (BaseQueryEngine, BaseChatEngine))
    ) or is_workflow_run(span.instance, span.method)


_ANSWER_FIELDS = ("answer", "response")
"""The fields a workflow's result (a mapping, or its custom StopEvent) holds its answer in."""


def _text(value: Any) -> str | None:
    """``value`` as answer text: a string, a message's string ``content``, an LLM's own
    response (a ``CompletionResponse``'s ``text``, a ``ChatResponse``'s message) or a query
    engine's ``Response`` (its ``response`` text)."""
    if isinstance(value, str):
        return value
    text: Any
    if isinstance(value, CompletionResponse):
        text = value.text
    elif isinstance(value, ChatResponse):
        text = value.message.content
    elif isinstance(value, Response):
        text = value.response
    elif isinstance(value, (StreamingResponse, AsyncStreamingResponse)):
        text = value.response_txt  # a stream already read (None: not yet)
    elif isinstance(value, StreamingAgentChatResponse):
        text = value.response if value.is_done else None
    elif value is None or isinstance(value, (bytes, Mapping)):
        return None
    else:
        text = getattr(value, "content", None)  # a message
    return text if isinstance(text, str) else None


def _field(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _cites(value: Any) -> Sequence[Any] | None:
    """A structured answer's citations list
    (:func:`~fairrag_core.structured_citations.citation_list`: ``citations``, else a
    ``sources`` or ``source_ids`` list of citations beside an answer text; an
    ``AgentChatResponse``'s ``sources``, tool outputs, are none), else None."""
    names = (*CITATION_FIELDS, "answer", "response")
    return citation_list({name: _field(value, name) for name in names})


CLOSED_EARLY = "GeneratorExit: the stream was closed before its end"
"""The ``error`` of a streamed answer its reader stopped reading (the text it read is kept)."""

SOURCE_ID_BASE = 1
"""LlamaIndex records read a structured answer's source ids from 1, as its context numbers
its entries (``[1]`` first, docs/SPEC.md "Context text"; CitationQueryEngine's ``Source 1``)."""


def workflow_answer(result: Any) -> tuple[Any, list[NodeWithScore] | None]:
    """The answer and the shown nodes of a Workflow's result (docs/SPEC.md, "Records" →
    LlamaIndex Workflows): the ``StopEvent``'s ``result`` (a custom StopEvent with none: the
    event itself); an agent's ``structured_response`` (``AgentOutput``, built with
    ``structured_output_fn`` or ``output_cls``) when it is a structured answer, beside
    whatever its chat message says; else the result read as a structured answer (an object
    or mapping with a ``citations`` list, returned as it is: the record writes its citations
    as text), as text, as a ``Response`` (``response``, ``source_nodes``), or as a mapping or
    object with an ``answer`` or ``response`` text, message or structured answer and optional
    ``source_nodes``. (None, None) when it holds no answer that can be read."""
    payload = getattr(result, "result", None) if isinstance(result, StopEvent) else result
    if payload is None:
        payload = result
    nodes = _field(payload, "source_nodes")
    sources = list(nodes) if isinstance(nodes, Sequence) and not isinstance(nodes, str) else None
    if _streams(payload):  # its text when read (in a step, or a chat stream written) already
        return _text(payload), sources
    structured = _field(payload, "structured_response")
    cites = _cites(structured)
    if _structured(structured) and cites:  # an agent's (structured_output_fn, output_cls)
        # citing something: the answer (an empty list leaves the chat message the answer)
        return structured, sources or _tool_sources(payload)
    if structured is not None and _cites(structured) is None:
        # a schema with no citations list (``Answer(answer: str)``): its text is the answer,
        # citing as text does (a user trial found the chat message "Done." recorded instead)
        said = _field_text(structured)
        if said is not None and said.strip():
            return said, sources or _tool_sources(payload)
    answer: Any = _text(payload)
    if answer is None and _structured(payload):
        answer = payload
    if answer is None:
        answer = next(
            (v for name in _ANSWER_FIELDS if _structured(v := _field(payload, name))), None
        )
    if answer is None:
        answer = _field_text(payload)
    return answer, sources or _tool_sources(payload)


def _field_text(value: Any) -> str | None:
    """The text an object holds in an answer field (:data:`_ANSWER_FIELDS`): a schema
    ``Answer(answer: str)`` with no citations list, a workflow's result mapping."""
    texts = (_text(_field(value, name)) for name in _ANSWER_FIELDS)
    return next((text for text in texts if text is not None), None)


def _workflow_stream(result: Any) -> Any:
    """The streaming response a Workflow's result is or holds (its ``StopEvent``'s ``result``,
    or that result's ``answer`` or ``response`` field), when its caller has not read it yet: a
    query engine's or synthesizer's stream, or a chat stream still writing its answer; else
    None (a stream a step already read gives its text: :func:`_text`)."""
    payload = getattr(result, "result", None) if isinstance(result, StopEvent) else result
    if payload is None:
        payload = result
    for value in (payload, *(_field(payload, name) for name in _ANSWER_FIELDS)):
        if isinstance(value, (StreamingResponse, AsyncStreamingResponse)):
            return value if value.response_txt is None else None
        if isinstance(value, StreamingAgentChatResponse):
            return None if value.is_done else value
    return None


def _tool_sources(payload: Any) -> list[NodeWithScore] | None:
    """The nodes an agent's tool calls showed it (an ``AgentOutput``'s ``tool_calls``, each
    tool output's response's ``source_nodes``: a ``QueryEngineTool``'s search; a
    ``RetrieverTool``'s nodes), in call order, a node shown again kept at its first place;
    but a node two calls showed under their own entry labels (the fair postprocessor's context
    header) once per call: the record keeps it once, with both labels (:func:`_shown_once`).
    None when it made no such call."""
    calls = _field(payload, "tool_calls")
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
        return None
    shown: list[NodeWithScore] = []
    seen: set[str] = set()
    for call in calls:
        raw = getattr(getattr(call, "tool_output", None), "raw_output", None)
        nodes = getattr(raw, "source_nodes", None)
        if nodes is None and isinstance(raw, Sequence) and not isinstance(raw, str):
            nodes = raw  # a RetrieverTool's: the nodes themselves
        for node in nodes or []:
            if not isinstance(node, NodeWithScore):
                continue
            if node.node.node_id in seen and _label(node) is None:
                continue
            seen.add(node.node.node_id)
            shown.append(node)
    return shown or None


def _structured(value: Any) -> bool:
    """Whether ``value`` is a structured answer (docs/SPEC.md "Structured citations")."""
    if value is None or isinstance(value, (str, bytes)) or _streams(value):
        return False
    try:
        found = read_structured_answer(value, source_id_base=SOURCE_ID_BASE)
    except TypeError:  # an object that cannot be copied (it holds a generator, a lock)
        return False
    # a citations list: an ``{"answer": text}`` alone is text, read as the answer's text
    return found is not None and _cites(value) is not None


def _streams(value: Any) -> bool:
    """Whether ``value`` is a streaming response (its text comes from a generator): by type,
    since ``PydanticResponse.__getattr__`` answers every name."""
    return isinstance(
        value, (StreamingResponse, AsyncStreamingResponse, StreamingAgentChatResponse)
    )


def _outermost_run(span_id: str | None) -> OpenSpan | None:
    runs = [span for span in SPANS.ancestors(span_id) if _is_run(span)]
    return runs[-1] if runs else None


def _model_name(llm: Any) -> str | None:
    """The LLM's model name (``metadata.model_name``), else its class name."""
    if llm is None:
        return None
    try:
        name = llm.metadata.model_name
    except Exception:  # an LLM whose metadata needs a connection: fall back to its class
        name = None
    if isinstance(name, str) and name and name != "unknown":
        return name
    class_name = getattr(llm, "class_name", None)
    return class_name() if callable(class_name) else type(llm).__name__


_SCOPED = (BaseQueryEngine, BaseChatEngine, BaseNodePostprocessor)
"""What a handler's ``scope`` holds, besides workflows (:func:`_is_workflow`)."""


def _is_workflow(value: Any) -> bool:
    """Whether ``value`` is a LlamaIndex Workflow (an agent too), as :func:`is_workflow_run`
    tells a workflow's run."""
    return is_workflow_run(value, "run")


def _engine_model(engine: Any) -> str | None:
    return _model_name(private.engine_llm(engine))


def _source_nodes(response: Any) -> list[NodeWithScore] | None:
    """The nodes a response says the LLM was shown: its ``source_nodes``, else those of its
    tool outputs' responses.

    A chat engine that answers through a query engine (``condense_question``) keeps the
    query engine's response in ``sources``; LlamaIndex copies its nodes into ``source_nodes``
    for a ``Response`` or ``StreamingResponse`` but not for the ``AsyncStreamingResponse`` of
    ``astream_chat``, whose ``source_nodes`` stay empty although the LLM saw them.
    """
    nodes = getattr(response, "source_nodes", None)
    if not nodes:  # None, or empty: the tool outputs may hold what was shown
        nodes = [
            node
            for output in getattr(response, "sources", None) or []
            for node in getattr(getattr(output, "raw_output", None), "source_nodes", None) or []
        ] or nodes
    return None if nodes is None else _once(nodes)


def _output_text(event: BaseEvent) -> str | None:
    """An LLM call's output text, whitespace collapsed."""
    response = getattr(event, "response", None)
    if isinstance(event, LLMChatEndEvent):
        message = getattr(response, "message", None)
        text = getattr(message, "content", None)
    else:
        text = getattr(response, "text", None)
    return collapsed(text) if isinstance(text, str) else None


def _prompt_text(event: BaseEvent) -> tuple[str | None, int]:
    """An LLM call's prompt (a completion's text, a chat's messages), whitespace collapsed,
    and where a conversation's current turn begins in it (after its last earlier answer; 0
    for a prompt of one turn)."""
    if isinstance(event, LLMCompletionStartEvent):
        text = event.prompt
        return (collapsed(text) if isinstance(text, str) else None), 0
    if not isinstance(event, LLMChatStartEvent):
        return None, 0
    messages = list(event.messages)
    parts = [collapsed(str(message.content or "")) for message in messages]
    # the current turn: what follows the last earlier answer (an assistant message without
    # tool calls that a user message follows)
    users = [i for i, m in enumerate(messages) if m.role == MessageRole.USER]
    answers = [
        i
        for i, m in enumerate(messages[: users[-1]] if users else [])
        if m.role == MessageRole.ASSISTANT and not m.additional_kwargs.get("tool_calls")
    ]
    turn = sum(len(part) + 1 for part in parts[: answers[-1] + 1] if part) if answers else 0
    return " ".join(part for part in parts if part), turn


def _held_lists(run: _Run) -> list[NodeWithScore]:
    """The shown list of a run whose result names no source nodes, read from the answering
    LLM call's prompt (docs/SPEC.md, "Adapters" → Which list is audited): the re-rankings whose
    every node's text it held, in the order it held them, a node shown again kept at its first
    place (a workflow that re-ranks per sub-question and answers once); else the last
    re-ranking's nodes as the one LLM call after it held them
    (:func:`fairrag_core.kit.held_order`: a step that reordered or dropped some), or as they
    were when that reading would be a guess or several calls followed it."""
    last = list(run.reranks[-1].nodes)
    prompt = run.prompt
    if prompt is None:
        return last
    texts = [[located(_node_text(node)) for node in rerank.nodes] for rerank in run.reranks]
    # a conversation's list where its current turn holds it (kit.search_start)
    starts = [search_start(prompt, run.turn, found) for found in texts]
    places = [
        [place_in(prompt, *pair, start) for pair in found]
        for found, start in zip(texts, starts, strict=True)
    ]
    whole = [
        order
        for order, at in enumerate(places)
        if at and all(place >= 0 for place in at) and all(text for text, _ in texts[order])
    ]
    if len(whole) >= 2:
        held = sorted(
            (place, order, index) for order in whole for index, place in enumerate(places[order])
        )
        return _once([run.reranks[order].nodes[index] for _, order, index in held])
    if run.calls_since_rerank != 1 or not all(text for text, _ in texts[-1]):
        return last  # several calls (a refine synthesis), or a blank node: as it was
    order = held_order(places[-1], [len(text) for text, _ in texts[-1]])
    return last if order is None else [last[index] for index in order]


def _node_text(node: NodeWithScore) -> str:
    return node.node.get_content(metadata_mode=MetadataMode.NONE)


def _once(nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
    """``nodes`` with a node given again (same id and text: a ``RouterQueryEngine`` that
    selected several engines over one index concatenates their source nodes) kept at its first
    place; chunks of one node (same id, other text) all kept."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for node in nodes:
        key = (node.node.node_id, _node_text(node))
        if key not in seen:
            seen.add(key)
            kept.append(node)
    return kept


def _engine_postprocessors(engine: Any) -> list[Any]:
    """The node postprocessors of a query or chat engine (a chat engine's own, or those of
    the query engine it answers through)."""
    found: list[Any] = []
    for holder in (engine, private.query_engine_of(engine)):
        found += list(private.node_postprocessors(holder) or [])
    return found


def _query_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, QueryBundle):
        return value.query_str
    return str(value)


def _sub_question_nodes(run: _Run, shown: Sequence[NodeWithScore]) -> list[NodeWithScore]:
    """The synthetic nodes a ``SubQuestionQueryEngine`` answers from ("Sub question: ...
    Response: ...", one per sub-question, with no metadata): its sub-engines' answers, not
    documents (docs/SPEC.md, "Records" → sub-questions). Empty for any other engine."""
    if type(run.span.instance).__name__ != "SubQuestionQueryEngine":
        return []
    return [
        n
        for n in shown
        if not n.node.metadata
        and n.node.get_content(metadata_mode=MetadataMode.NONE).startswith("Sub question: ")
    ]


def _sub_question_order(
    reranks: Sequence[_Rerank],
    sub_answers: Sequence[NodeWithScore],
    shown: Sequence[NodeWithScore],
) -> list[_Rerank]:
    """``reranks`` in the order of the sub-questions they answered, as the response lists its
    synthetic nodes ("Sub question: <q>\nResponse: ..."): a ``SubQuestionQueryEngine`` with
    ``use_async`` answers them concurrently, so their rankings end in any order. Rankings of
    one question text (asked twice, or of two tools) take its places in the order of their
    documents' places in ``shown`` (the response's order); a ranking whose query is no listed
    sub-question keeps its place after them (a stable sort)."""
    place: dict[str, int] = {}
    for index, node in enumerate(shown):
        place.setdefault(node.node.node_id, index)
    by_place = sorted(
        reranks,
        key=lambda r: (
            sorted(place[n.node.node_id] for n in r.nodes if n.node.node_id in place)
            or [len(shown)]
        ),
    )
    places: dict[str, list[int]] = {}
    for order, node in enumerate(sub_answers):
        text = node.node.get_content(metadata_mode=MetadataMode.NONE)
        question = text.removeprefix("Sub question: ").split("\nResponse:", 1)[0]
        places.setdefault(collapsed(question), []).append(order)

    def claim(rerank: _Rerank) -> int:  # the next place of its question not taken yet
        free = places.get(collapsed(rerank.query or ""))
        return free.pop(0) if free else len(sub_answers)

    taken = {id(rerank): claim(rerank) for rerank in by_place}
    return sorted(by_place, key=lambda r: taken[id(r)])


def _search_lists(
    auditor: FairnessAuditor,
    reranks: Sequence[_Rerank],
    group_key: str,
    title_key: str,
    follow: bool,
    shown: Sequence[NodeWithScore] = (),
) -> list[dict[str, Any]]:
    """Each fair re-ranking's list (a sub-question's, an agent's search), in the order given,
    as :func:`~fairrag_core.kit.search_entry` writes one list's own exposure
    (``SEARCH_FIELDS``, as LangChain's ``framework.searches``): the record of that list alone,
    audited by ``auditor`` (by the ranking that made it when ``follow``), and ``held``:
    whether the answer's ``shown`` list holds any of its nodes (as LangChain's)."""
    held = {_placement(n) for n in shown} - {None}
    lists = []
    for rerank in reranks:
        metadatas = [n.node.metadata for n in rerank.nodes]
        own = shown_record(
            ranked_for(auditor, metadatas) if follow else auditor,
            source="llamaindex",
            shown=_shown_documents(rerank.nodes, group_key, title_key),
            metadatas=metadatas,
            ranked=metadatas,
            ranking=rerank.ranking,
            query=rerank.query,
        )
        lists.append(search_entry(own, held=any(_placement(n) in held for n in rerank.nodes)))
    return lists


def _shown_documents(
    nodes: Sequence[NodeWithScore],
    group_key: str,
    title_key: str,
    labels: Sequence[int | None] | None = None,
    also_numbered: Sequence[tuple[int, ...]] | None = None,
) -> list[ShownDocument]:
    """The shown nodes as the record needs them: id, title, group, text, the entry number
    each was labelled with (``labels``, :func:`_entry_labels`; None: numbered as shown) and
    the labels later searches showed it under (``also_numbered``, :func:`_shown_once`)."""
    groups = group_labels([n.node.metadata for n in nodes], group_key, require_present=False)
    if labels is None:
        labels = [None] * len(nodes)
    if also_numbered is None:
        also_numbered = [()] * len(nodes)
    documents = []
    for node, group, label, also in zip(nodes, groups, labels, also_numbered, strict=True):
        text = node.node.get_content(metadata_mode=MetadataMode.NONE)
        title = _title(node, title_key)
        documents.append(ShownDocument(node.node.node_id, title, group, text, label, also))
    return documents


def _shown_once(
    nodes: Sequence[NodeWithScore],
) -> tuple[list[NodeWithScore], list[tuple[int, ...]]]:
    """``nodes`` with a node shown again under an entry label of its own (same id and text;
    its context header's label, :func:`_label`) kept at its first place, with the other labels
    its copies were shown under (:func:`fairrag_core.kit.shown_once`); a copy without a label
    stays where it is (the record numbers it by its place, as before); chunks of one node
    (same id, other text) are all kept."""
    keys = [(node.node.node_id, _node_text(node)) for node in nodes]
    kept, also = shown_once(keys, [_label(node) for node in nodes], keep_unlabelled_copies=True)
    return [nodes[index] for index in kept], also


_LABEL = re.compile(r"\[([1-9][0-9]{0,5})\]")
"""The entry label the postprocessor's context header opens with (``[3]``)."""


def _entry_labels(nodes: Sequence[NodeWithScore]) -> list[int | None] | None:
    """The entry number the LLM saw before each node: the ``[n]`` its context header
    (:data:`~fairrag_llamaindex.postprocessor.CONTEXT_HEADER_KEY`, the fair rank the
    postprocessor placed it at) opens with, None for a node without one; None when they number
    the nodes as shown (no header, or ``[1]`` to ``[n]`` in order) so the record numbers them by
    place. A later step that reorders the nodes (LongContextReorder) or drops some leaves each
    label on its document, and the answer's ``[n]`` cites the document labelled ``n``
    (docs/SPEC.md, "Attribution": entry numbers as the LLM saw them)."""
    labels = [_label(node) for node in nodes]
    if all(label in (None, place) for place, label in enumerate(labels, start=1)):
        return None
    return labels


def _label(node: NodeWithScore) -> int | None:
    """The ``[n]`` a node's context header opens with (None: no header, or none there)."""
    header = node.node.metadata.get(CONTEXT_HEADER_KEY)
    found = _LABEL.match(header) if isinstance(header, str) else None
    return int(found.group(1)) if found else None


def _title(node: NodeWithScore, title_key: str) -> str | None:
    """A shown node's title (:func:`fairrag_core.kit.document_title`)."""
    text = node.node.get_content(metadata_mode=MetadataMode.NONE)
    return document_title(node.node.metadata, text, title_key)


def _placement(node: NodeWithScore) -> tuple[Any, ...] | None:
    """Which placed document a node is (None for a node no fair ranking placed): its whole
    metadata, placement included, which a chunk copies from its document and two placed
    documents never share (another rank, seed, score or title)."""
    metadata = node.node.metadata
    if "fair_rank" not in metadata:
        return None
    return tuple(sorted((key, _hashable(value)) for key, value in metadata.items()))


def _hashable(value: Any) -> Any:
    return value if isinstance(value, Hashable) else repr(value)


def _source_documents(
    shown: list[NodeWithScore], reranks: Sequence[_Rerank]
) -> tuple[list[NodeWithScore], list[int] | None]:
    """The shown documents, with the chunks a later step split one placed document into
    (CitationQueryEngine's "Source n" nodes, each a copy of the placed node's metadata over a
    piece of its text) taken back to that document (docs/SPEC.md, "Records" → chunks): one
    entry per document, where its first chunk was, as the fair re-ranking returned it. Also
    the document number (1-based) of each shown node, or None when nothing was split."""
    placed = {_placement(n): n for rerank in reranks for n in rerank.nodes}
    documents: list[NodeWithScore] = []
    numbers: list[int] = []
    first: dict[tuple[Any, ...], int] = {}
    for node in shown:
        key = _placement(node)
        if key is not None and key in first:
            numbers.append(first[key])
            continue
        documents.append(placed.get(key, node) if key is not None else node)
        numbers.append(len(documents))
        if key is not None:
            first[key] = len(documents)
    if len(documents) == len(shown):
        return shown, None
    return documents, numbers


def _cited_documents(answer: str | None, numbers: list[int] | None) -> str | None:
    """``answer`` with each entry number that numbers a shown chunk read as the number of the
    document the chunk belongs to (:func:`fairrag_core.citations.renumber_citations`:
    ``[n]``, ``[1, 3]``, ``[1-3]``, ``[Source n]``...; ``answer`` itself when nothing was
    split)."""
    if answer is None or numbers is None:
        return answer
    return renumber_citations(answer, numbers)


class _Live:
    """A handler's state in flight, in one plain object (locks, runs and streams belong to the
    process that made them: never pickled nor copied)."""

    __slots__ = (
        "busy",
        "calls",
        "chat_streams",
        "collected",
        "lock",
        "open_reranks",
        "runs",
        "streams",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[str, _Run] = {}
        self.open_reranks: dict[str | None, _Rerank] = {}
        self.calls: weakref.WeakValueDictionary[str, _Call] = weakref.WeakValueDictionary()
        """The LLM calls not ended yet, by their span id: a streamed call ends (its end event)
        when its stream is read, after its span closed, when the span tree no longer leads to
        its run; held weakly, so a call whose run was recorded or dropped is forgotten."""
        self.chat_streams: dict[int, tuple[Any, _Run, dict[str, Any]]] = {}
        self.streams: dict[int, _Stream] = {}
        self.collected: collections.deque[_Stream] = collections.deque()
        self.busy = threading.local()
        """``depth``: how deep this thread is inside the handler's own work."""


class FairnessEventHandler(KeptSinks, BaseEventHandler):
    """One fairness record per answered question, on every LlamaIndex path.

    Records are :func:`fairrag_core.kit.run_record` dicts (docs/SPEC.md, "Records"), kept in
    :attr:`records` and, with ``log_path``, appended as JSON lines
    (:class:`fairrag_core.JsonLinesLog`).

    **What is one question.** The outermost query or chat engine call (``query``, ``aquery``,
    ``chat``, ``achat``, ``stream_chat``, ``astream_chat``), found through LlamaIndex's
    instrumentation spans: query engines (sync, async, streaming) and chat engines (``context``,
    ``condense_plus_context``, ``condense_question``, ...). A streaming answer is recorded when
    its stream has been consumed (query engines) or written to the chat memory (chat engines);
    a query engine's stream nobody starts reading is recorded without an answer, with
    ``framework["answer_status"] == "unconsumed"``, when it is garbage-collected or at
    :meth:`flush` (when a ``with`` block exits): every ranking has its record.
    A failed call is recorded with its ``error``, and so is a Workflow run (an agent's) the
    user cancelled (``handler.cancel_run()``: ``error`` :data:`CANCELLED`); an agent's
    ``structured_response`` holding citations is its answer. The record's ``model`` is the
    LLM of the last call whose output holds the answer, streamed or not (an agent repeating
    its tool engine's answer: the agent's LLM; a chat engine's condensing call: never); a
    ``SubQuestionQueryEngine``'s ``framework["sub_questions"]`` are in the sub-questions'
    order. A fair re-ranking outside any engine (a
    direct ``postprocess_nodes`` call) is recorded on its own, without an answer. With
    ``record_queries_without_reranker`` (default), a question answered without any fair
    re-ranking is recorded too (``ranker: null``): the baseline of a plain engine.

    **What is audited.** The nodes the LLM was shown (the response's ``source_nodes``, after
    every postprocessor; for a chat engine answering through a query engine, that engine's
    response's), in that order; :func:`fairrag_core.kit.shown_provenance` says which fair
    ranking placed them and whether a later step reordered or dropped some, or all of them.
    Titles follow :func:`fairrag_core.kit.document_title`; groups are ``metadata[group_key]``.

    **Registration.** ``get_dispatcher().add_event_handler(handler)``, :meth:`attach` or
    ``with handler:`` all work: the span tree the handler needs is registered on the root
    dispatcher when the handler is built. ``scope`` restricts the handler to the engines or
    postprocessors it names; a handler built by :meth:`from_postprocessor` records only the
    questions that postprocessor or a copy of it ranked. Entered as a context manager, a
    handler records only the questions of its block's context (its thread or task and what
    they start with the context), never one asked inside other handlers' blocks only;
    questions asked where no handler's block is open (a ``ThreadPoolExecutor``'s workers) are
    recorded by every registered handler (docs/SPEC.md, "Records").

    **Against what target.** A handler built by :meth:`from_postprocessor` follows that
    postprocessor: each record is computed with the target and exposure model its ranker has
    when the question ends, and its group key (unless the handler is given ``protected``,
    ``target_share``, ``target`` or ``exposure`` of its own); a list ranked by a copy of it for
    another target (``model_copy(update=...)``) is audited against the target it was ranked
    for, which its nodes' ``fair_target`` metadata holds. Any other handler uses its own
    fields. Every record states the ``target``, ``protected`` and ``exposure_model`` it was
    computed with.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    group_key: str = Field(description="Node metadata field holding each node's group label.")
    protected: Hashable | None = Field(
        default=None, description="The protected group of the binary target (e.g. 'female')."
    )
    target_share: float | None = Field(
        default=None, description="Exposure share owed to the protected group (default 0.5)."
    )
    target: Target | dict[Hashable, float] | None = Field(
        default=None, description="Exposure share per group, summing to 1 (several groups)."
    )
    exposure: str | ExposureModel | None = Field(
        default=None, description="Position-weight model of the exposure metrics (default dcg)."
    )
    title_key: str = Field(
        default="title", description="Node metadata field holding the document title."
    )
    log_path: str | None = Field(
        default=None,
        validation_alias=AliasChoices("log_path", "path"),
        description=(
            "File the records are appended to as JSON lines (optional; also accepted as path=, "
            "the name LangChain's FairnessCallbackHandler uses)."
        ),
    )
    log_errors: Literal["count", "raise"] = Field(
        default="count",
        description=(
            "On a failed log write: 'count' (log.errors, log.last_error, and an ERROR log "
            "line) or 'raise' (where LlamaIndex lets it through; its dispatcher swallows "
            "event-handler exceptions)."
        ),
    )
    max_records: int | None = Field(
        default=DEFAULT_MAX_RECORDS,
        description=(
            f"Records kept in memory (the latest; default {DEFAULT_MAX_RECORDS}, with or "
            "without log_path; None keeps all): the kit's RecordKeeper, every handler's rule."
        ),
    )
    sinks: list[Any] = Field(
        default_factory=list,
        exclude=True,
        description=(
            "Callables each record is also handed to, e.g. "
            "fairrag_core.telemetry.OpenTelemetrySink() (metrics and span attributes)."
        ),
    )
    record_queries_without_reranker: bool = Field(
        default=True,
        description="Also record questions with no fair re-ranking, from their source nodes.",
    )
    postprocessor: FairRerankPostprocessor | None = Field(
        default=None,
        exclude=True,
        description="The postprocessor whose target, exposure and group key records follow.",
    )
    scope: list[Any] = Field(
        default_factory=list,
        exclude=True,
        description="Engines or postprocessors to record (default: all of them).",
    )

    _auditor: FairnessAuditor | None = PrivateAttr(default=None)
    _own_exposure: ExposureModel | None = PrivateAttr(default=None)
    """The handler's own exposure model when it follows a postprocessor's target."""
    _kept: RecordKeeper = PrivateAttr()
    _live_state: _Live = PrivateAttr(default_factory=_Live)
    _dispatchers: list[Dispatcher] = PrivateAttr(default_factory=list)
    _entered: list[contextvars.Token] = PrivateAttr(default_factory=list)
    _scoped: bool = PrivateAttr(default=False)
    """Whether the handler was ever entered as a block: it then records only its blocks'
    questions, also those still running after its blocks closed."""

    @property
    def _live(self) -> _Live:
        # read from pydantic's dict of private values: ``self._name`` goes through the model's
        # ``__getattr__``, microseconds on each of the process's events this handler sees
        return self.__pydantic_private__["_live_state"]  # type: ignore[index]  # set by pydantic

    @model_validator(mode="before")
    @classmethod
    def _known_arguments(cls, data: Any) -> Any:
        """An unknown argument names itself, a close match and every accepted argument (it
        was pydantic's bare "Extra inputs are not permitted")."""
        return known_arguments(cls, data)

    @field_validator("target_share", "target", mode="before")
    @classmethod
    def _no_bools(cls, value: Any, info: Any) -> Any:
        return refuse_bools(value, info.field_name)

    @field_validator("group_key", mode="before")
    @classmethod
    def _check_group_key(cls, value: Any) -> Any:
        return check_group_key(value)

    @field_validator("scope", mode="before")
    @classmethod
    def _check_scope(cls, value: Any) -> Any:
        """Every entry is something a run or a ranking is recorded by: an engine, a chat
        engine, a workflow (an agent) or a postprocessor; anything else can never match, and
        the handler would record nothing (a user trial: an index given, no record, no
        warning)."""
        if value is None or isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise ValueError(
                f"scope must be a list of engines, chat engines, workflows or postprocessors, "
                f"got {value!r:.80}"
            )
        value = list(value)
        for item in value:
            if not isinstance(item, _SCOPED) and not _is_workflow(item):
                raise ValueError(
                    f"scope holds a {type(item).__name__} ({item!r:.60}), which no question is "
                    "recorded by: give the query engines, chat engines, workflows (agents) or "
                    "postprocessors to record (for an index: the engine index.as_query_engine() "
                    "returns, or its postprocessor)"
                )
        return value

    @field_validator("log_path", mode="before")
    @classmethod
    def _path_text(cls, value: Any) -> Any:
        # a path object as LangChain's handler takes it (pathlib.Path, any os.PathLike)
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("max_records", mode="before")
    @classmethod
    def _check_max_records(cls, value: Any) -> Any:
        return check_max_records(value)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        own_target = (self.protected, self.target_share, self.target) != (None, None, None)
        self._auditor = self._own_exposure = None
        if self.postprocessor is None or own_target:
            self._auditor = FairnessAuditor.create(
                protected=self.protected,
                target_share=self.target_share,
                target=self.target,
                exposure=self.exposure,
            )
        elif self.exposure is not None:  # the postprocessor's target, under this model
            self._own_exposure = make_exposure_model(self.exposure)
        self._kept = RecordKeeper(
            self.log_path, max_records=self.max_records, on_error=self.log_errors, sinks=self.sinks
        )
        ensure_registered().add_listener(self)

    _KEPT_BY_RECORDS: ClassVar[tuple[str, ...]] = ("log_path", "log_errors", "max_records", "sinks")
    """Fields read once, into the handler's record keeper: assigning one later is refused (it
    would do nothing); ``sinks.append(...)`` works, the keeper holds the same list."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._KEPT_BY_RECORDS and "_kept" in (self.__pydantic_private__ or {}):
            raise AttributeError(
                f"{name} is set when the handler is built (its records, log file and sinks are "
                f"kept from then on): build a new FairnessEventHandler with {name}=..."
            )
        super().__setattr__(name, value)

    _TRAVELLING: ClassVar[tuple[str, ...]] = ("_auditor", "_own_exposure", "_scoped", "_kept")
    """Private state a pickled handler takes along (its records, log file and sinks); locks,
    runs in flight and registrations belong to the process that made them."""

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        private = state.get("__pydantic_private__") or {}
        state["__pydantic_private__"] = {k: private[k] for k in self._TRAVELLING if k in private}
        return state

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> FairnessEventHandler:
        # pydantic deep-copies private attributes one by one (a lock among them): copy as a
        # pickle does, through the state a handler takes along
        copy = type(self).__new__(type(self))
        copy.__setstate__(deepcopy(self.__getstate__(), memo))
        return copy

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for name, attribute in type(self).__private_attributes__.items():
            if name not in self._TRAVELLING:
                setattr(self, name, attribute.get_default())
        ensure_registered().add_listener(self)

    @classmethod
    def class_name(cls) -> str:
        return "FairnessEventHandler"

    @classmethod
    def from_postprocessor(
        cls, postprocessor: FairRerankPostprocessor, **fields: Any
    ) -> FairnessEventHandler:
        """A handler whose records follow ``postprocessor``'s target, exposure model and group
        key (read when each question ends, so later changes of its fields are followed), and
        that records only the questions ``postprocessor`` or a copy of it ranked."""
        if not isinstance(postprocessor, FairRerankPostprocessor):
            raise TypeError(
                "from_postprocessor needs the FairRerankPostprocessor whose rankings to record, "
                f"got {type(postprocessor).__name__}: {postprocessor!r:.80}"
            )
        given = fields.get("group_key", postprocessor.group_key)
        if given != postprocessor.group_key:
            # records group by the postprocessor's key, read at each question's end: a key of
            # the handler's own was accepted and never used (a user trial)
            raise ValueError(
                f"group_key {given!r}: a handler from a postprocessor groups its records by the "
                f"postprocessor's group_key ({postprocessor.group_key!r}, followed when it "
                "changes); leave group_key out, or build FairnessEventHandler(group_key=...) "
                "without a postprocessor"
            )
        defaults: dict[str, Any] = {
            "group_key": postprocessor.group_key,
            "title_key": postprocessor.title_key,
            "postprocessor": postprocessor,
        }
        return cls(**{**defaults, **fields})

    # -- registration -----------------------------------------------------------------------

    def attach(self, dispatcher: Dispatcher | None = None) -> FairnessEventHandler:
        """Register on ``dispatcher`` (default: the root one, which sees every LlamaIndex event).

        Idempotent; returns ``self``, so ``with FairnessEventHandler(...).attach():`` works.
        """
        dispatcher = dispatcher or get_dispatcher()
        ensure_registered()
        if not any(h is self for h in dispatcher.event_handlers):
            dispatcher.add_event_handler(self)
        if not any(d is dispatcher for d in self._dispatchers):
            self._dispatchers.append(dispatcher)
        return self

    def detach(self) -> None:
        """Unregister from every dispatcher :meth:`attach` registered on."""
        for dispatcher in self._dispatchers:
            dispatcher.event_handlers = [h for h in dispatcher.event_handlers if h is not self]
        self._dispatchers.clear()

    def __enter__(self) -> FairnessEventHandler:
        """Attach, and scope the handler to this block's context (docs/SPEC.md, "Records")."""
        handler = self.attach() if not self._dispatchers else self
        self._scoped = True
        self._entered.append(ENTERED_HANDLERS.set((*ENTERED_HANDLERS.get(), self)))
        return handler

    def __exit__(self, *exc_info: object) -> None:
        """Leave the block: :meth:`flush`, then detach once no block of the handler is open."""
        if self._entered:
            token = self._entered.pop()
            try:
                ENTERED_HANDLERS.reset(token)
            except ValueError:  # left in another context than it was entered in
                ENTERED_HANDLERS.set(tuple(h for h in ENTERED_HANDLERS.get() if h is not self))
        self.flush()
        if not self._entered:
            self.detach()

    def flush(self) -> None:
        """Write the record of every streaming answer nobody has started reading (``answer``
        null, ``answer_status: "unconsumed"``): its ranking happened (an amortized ledger
        counted it), so it gets its record now; reading the stream later writes no second one.
        Called when a ``with handler:`` block exits; a stream collected unread is recorded the
        same way without it."""
        with self._working():
            with self._live.lock:
                unread = [s for s in self._live.streams.values() if not s.started]
            for stream in unread:
                self._settle(stream, None, None, UNCONSUMED)

    @property
    def span_handler(self) -> BaseSpanHandler:
        """The span tree the handler relies on (registered on the root dispatcher)."""
        return SPANS

    @property
    def auditor(self) -> FairnessAuditor:
        """The core auditor the next record is computed with."""
        own = self.__pydantic_private__.get("_auditor")  # type: ignore[union-attr]
        if self.postprocessor is None or own is not None:
            if own is None:
                raise ValueError("FairnessEventHandler has no fairness target")
            return own
        auditor = self.postprocessor.auditor  # one object per configuration of its ranker
        if auditor is None:
            raise ValueError(
                f"the postprocessor's ranker {self.postprocessor.ranker_name!r} has no fairness "
                "target to audit against: give the handler protected=<group> (or target=...)"
            )
        if self._own_exposure is not None:
            return FairnessAuditor(auditor.target, self._own_exposure)
        return auditor

    @property
    def log(self) -> JsonLinesLog | None:
        """The JSON-lines log (``log_path``), with its write-failure counters."""
        return self._kept.log

    @property
    def records(self) -> list[dict[str, Any]]:
        """The records so far (the latest ``max_records``), in the order the questions ended."""
        return self._kept.records

    def _registered(self) -> bool:
        dispatchers = list(root_manager.dispatchers.values())
        return any(h is self for d in dispatchers for h in d.event_handlers)

    def _in_scope(self, run: _Run | None, rerank: _Rerank | None = None) -> bool:
        """Whether this handler records the run (docs/SPEC.md, "Records" → which handler
        records a question): by the context it ran in, then by ``scope`` or, for a handler
        built from a postprocessor, by that postprocessor's lineage."""
        entered = run.span.entered if run is not None else rerank.entered if rerank else ()
        if entered and self._scoped and not any(h is self for h in entered):
            # asked inside other handlers' blocks only (also once this handler's blocks
            # closed: a question still running in another block is that block's)
            return False
        reranks = [rerank] if rerank is not None else []
        if run is not None:
            reranks += run.reranks
        if self.scope:
            members = [r.postprocessor for r in reranks]
            if run is not None:
                members.append(run.span.instance)
            return any(m is s for m in members for s in self.scope)
        if self.postprocessor is not None:
            own = lineage_of(self.postprocessor)
            # the rankings it made, or, for a question that failed before any ranking (the
            # store down), the engine that holds it: a failed run is recorded, never lost
            candidates = [r.postprocessor for r in reranks]
            if run is not None and not reranks:
                candidates += _engine_postprocessors(run.span.instance)
            return any(
                isinstance(p, FairRerankPostprocessor) and lineage_of(p) is own for p in candidates
            )
        return True

    # -- events -----------------------------------------------------------------------------

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        # The dispatcher swallows handler exceptions silently; log them instead.
        try:
            with self._working():
                self._handle(event)
        except Exception:
            logger.exception("FairnessEventHandler failed on %s", type(event).__name__)

    def _handle(self, event: BaseEvent) -> None:
        span_id = event.span_id
        if isinstance(event, ReRankStartEvent):
            if event.model_name.startswith(MODEL_NAME_PREFIX):
                span = SPANS.get(span_id)
                instance = None if span is None else span.instance
                opened = _Rerank(_query_text(event.query), instance, entered=ENTERED_HANDLERS.get())
                with self._live.lock:
                    self._live.open_reranks[span_id] = opened
        elif isinstance(event, EmptyRankingEvent):
            with self._live.lock:
                heard = self._live.open_reranks.get(span_id)
            if heard is not None:
                heard.ranking = dict(event.ranking)
        elif isinstance(event, ReRankEndEvent):
            with self._live.lock:
                rerank = self._live.open_reranks.pop(span_id, None)
            if rerank is None:  # another reranker's events
                return
            rerank.nodes = list(event.nodes)
            run_span = _outermost_run(span_id)
            if run_span is None:  # a direct postprocess_nodes call: recorded on its own
                if self._in_scope(None, rerank):
                    tags = dict(event.tags)
                    self._finish(
                        _Run(OpenSpan("", None, None, ""), rerank.query, [rerank]),
                        None,
                        None,
                        tags,
                        run_id=None,
                    )
                return
            with self._live.lock:
                run = self._live.runs.setdefault(run_span.id_, _Run(run_span))
                run.reranks.append(rerank)
                run.calls_since_rerank = 0
                run.query = run.query or rerank.query
        elif type(event).__name__ == _CANCELLED_EVENT:
            span = SPANS.get(span_id)
            if span is not None and is_workflow_run(span.instance, span.method):
                with self._live.lock:
                    self._live.runs.setdefault(span.id_, _Run(span)).cancelled = True
        elif isinstance(event, (LLMPredictStartEvent, LLMCompletionStartEvent, LLMChatStartEvent)):
            span = SPANS.get(span_id)
            run_span = _outermost_run(span_id)
            streamed = None if run_span is not None else self._streamed_run(span_id)
            if span is not None and (run_span is not None or streamed is not None):
                with self._live.lock:
                    # a call made inside another open call (CustomLLM's chat runs its own
                    # complete) is that call, not a second one
                    inner = any(a.id_ in self._live.calls for a in SPANS.ancestors(span.parent_id))
                    owner = streamed
                    if run_span is not None:
                        owner = self._live.runs.setdefault(run_span.id_, _Run(run_span))
                    if (
                        owner is not None
                        and not inner
                        and not isinstance(event, LLMPredictStartEvent)
                    ):
                        call = _Call(_model_name(span.instance), *_prompt_text(event))
                        owner.calls.append(call)
                        if span_id is not None:
                            self._live.calls[span_id] = call
                        owner.calls_since_rerank += 1
        elif isinstance(event, (LLMCompletionEndEvent, LLMChatEndEvent)):
            # by the call's span id, not the span tree: a streamed call's end event comes when
            # its stream was read, after its span (and maybe its run's) closed
            with self._live.lock:
                ended = self._live.calls.pop(span_id or "", None)
                if ended is not None:
                    ended.output = _output_text(event)

    def _streamed_run(self, span_id: str | None) -> _Run | None:
        """The run whose streaming chat answer the open span ``span_id`` is writing to the chat
        memory: LlamaIndex starts the answering LLM call of ``astream_chat`` there, in a task
        of its own, after the engine's span closed."""
        if not self._live.chat_streams:
            return None
        for span in SPANS.ancestors(span_id):
            if span.method.endswith("write_response_to_history"):
                with self._live.lock:
                    stream = self._live.chat_streams.get(id(span.instance))
                if stream is not None and stream[0] is span.instance:
                    return stream[1]
        return None

    # -- spans ------------------------------------------------------------------------------

    def span_ended(self, span: OpenSpan, result: Any, error: BaseException | None) -> None:
        """Called by the span tree when any span ends: finishes the runs of this handler."""
        try:
            with self._working():
                self._span_ended(span, result, error)
        except Exception:
            logger.exception("FairnessEventHandler failed at the end of span %s", span.id_)

    def _chat_stream_written(self, response: Any) -> None:
        """A chat stream's history writer ended: record its turn (the whole answer, or the
        stream's error), once: whoever takes it from the watched streams records it."""
        with self._live.lock:
            stream = self._live.chat_streams.get(id(response))
            if stream is None or stream[0] is not response:
                return
            del self._live.chat_streams[id(response)]
        _, streamed, tags = stream
        failure = getattr(response, "exception", None)
        self._finish(
            streamed,
            response.response if failure is None else None,
            _source_nodes(response),
            tags,
            error=None if failure is None else f"{type(failure).__name__}: {failure}",
        )

    def _span_ended(self, span: OpenSpan, result: Any, error: BaseException | None) -> None:
        stream = self._live.chat_streams and self._live.chat_streams.get(id(span.instance))
        if (
            stream
            and stream[0] is span.instance
            and span.method.endswith("write_response_to_history")
        ):
            self._chat_stream_written(span.instance)
            return
        if not _is_run(span):
            return
        with self._live.lock:
            run: _Run | None = self._live.runs.pop(span.id_, None)
        outer = _outermost_run(span.parent_id)
        if outer is not None:  # an engine called by another engine, or by a workflow's step:
            # the outer one answers the question; this engine's LLM is its model if no call
            # of the outer run is found to give the answer
            model = _engine_model(span.instance)
            if model is not None:
                with self._live.lock:
                    kept = self._live.runs.setdefault(outer.id_, _Run(outer))
                    kept.engine_model = kept.engine_model or model
            return
        if run is None:
            run = _Run(span)
        if not run.reranks and not (self.record_queries_without_reranker and self._registered()):
            return
        if not self._in_scope(run):
            return
        run.model = run.model or _engine_model(span.instance) or run.engine_model
        tags = dict(active_instrument_tags.get())
        if error is not None:
            self._finish(run, None, None, tags, error=f"{type(error).__name__}: {error}")
        elif run.cancelled:  # its span ended "cleanly", with no result: a failed run
            self._finish(run, None, None, tags, error=CANCELLED)
        elif isinstance(result, StreamingAgentChatResponse):
            self._watch_chat_stream(result, run, tags)
        elif (
            isinstance(result, (StreamingResponse, AsyncStreamingResponse))
            and result.response_txt is None
        ):  # by type: a PydanticResponse answers any attribute (response_gen too) with None
            self._watch_stream(result, run, tags)
        elif is_workflow_run(span.instance, span.method):
            answer, sources = workflow_answer(result)
            if not (run.reranks or sources):
                return  # a workflow that ranked or showed nothing: no question
            stream = _workflow_stream(result)
            if isinstance(stream, StreamingAgentChatResponse):  # recorded once written
                self._watch_chat_stream(stream, run, tags)
            elif stream is not None:  # recorded when its caller has read it, as an engine's
                self._watch_stream(stream, run, tags, sources)
            elif _llm_generator(result):  # an LLM's own token stream: not followed
                self._finish(run, None, sources, tags, answer_status=UNCONSUMED)
            elif isinstance(answer, str) and not run.gave(answer):  # "Workflow complete."
                self._finish(run, None, sources, tags, answer_status=NOT_FROM_A_MODEL)
            else:
                self._finish(run, answer, sources, tags)
        else:
            answer = (
                result.response_txt  # a stream already read
                if isinstance(result, (StreamingResponse, AsyncStreamingResponse))
                else getattr(result, "response", result)  # a PydanticResponse's: its object
            )
            if not (isinstance(answer, str) or _structured(answer)):
                answer = _field_text(answer)  # output_cls=Answer(answer: str): its text
            self._finish(run, answer, _source_nodes(result), tags)

    def _watch_chat_stream(self, response: Any, run: _Run, tags: dict[str, Any]) -> None:
        """Record a chat stream's turn when its history writer ends (:meth:`_span_ended`)."""
        with self._live.lock:
            self._live.chat_streams[id(response)] = (response, run, tags)
        # a stream that failed at once, or was written before the run ended: its history
        # writer ended before this, finding nothing to finish (its turn would stay held)
        thread = getattr(response, "write_response_to_history_thread", None)
        task = getattr(response, "awrite_response_to_history_task", None)
        if (
            response.is_done
            or (thread is not None and not thread.is_alive())
            or (task is not None and task.done())
        ):
            self._chat_stream_written(response)

    def _watch_stream(
        self, response: Any, run: _Run, tags: dict[str, Any], shown: Any = None
    ) -> None:
        """Record a streaming query's answer once the caller has consumed its stream; a stream
        nobody starts reading is recorded ``"unconsumed"`` when it is collected or at
        :meth:`flush` (every ranking gets its record: an amortized ledger counted it).
        ``shown``: the nodes the answer was given (a Workflow result's ``source_nodes``),
        else the stream's own."""
        tokens = response.response_gen
        sources = getattr(response, "source_nodes", None) if shown is None else shown
        stream = _Stream(run, None if sources is None else list(sources), tags)
        with self._live.lock:
            self._live.streams[id(stream)] = stream
        handler = self
        watched: AsyncIterator[str] | Iterator[str]

        if hasattr(tokens, "__anext__"):

            async def watched_async() -> AsyncIterator[str]:
                stream.started = True
                parts: list[str] = []
                failure: str | None = CLOSED_EARLY
                try:
                    async for token in tokens:
                        parts.append(token)
                        yield token
                    failure = None
                except GeneratorExit:
                    raise  # its reader stopped: CLOSED_EARLY, the text it delivered kept
                except BaseException as exc:  # a failure, or a cancelled task: no answer
                    failure = f"{type(exc).__name__}: {exc}"
                    raise
                finally:
                    # a stream its reader stopped keeps what it delivered (as LangChain's does)
                    kept = failure is None or failure == CLOSED_EARLY
                    handler._settle(stream, "".join(parts) if kept else None, failure)

            response.response_gen = watched = watched_async()
        else:

            def watched_sync() -> Iterator[str]:
                stream.started = True
                parts: list[str] = []
                failure: str | None = CLOSED_EARLY
                try:
                    for token in tokens:
                        parts.append(token)
                        yield token
                    failure = None
                except GeneratorExit:
                    raise  # its reader stopped: CLOSED_EARLY, the text it delivered kept
                except BaseException as exc:  # a failure, or a cancelled task: no answer
                    failure = f"{type(exc).__name__}: {exc}"
                    raise
                finally:
                    # a stream its reader stopped keeps what it delivered (as LangChain's does)
                    kept = failure is None or failure == CLOSED_EARLY
                    handler._settle(stream, "".join(parts) if kept else None, failure)

            response.response_gen = watched = watched_sync()
        # A generator collected unstarted runs no finally: its record is written from here.
        weakref.finalize(watched, self._stream_collected, stream)

    def _stream_collected(self, stream: _Stream) -> None:
        """The watched stream was garbage-collected. Unstarted, its record is written now, or
        at the handler's next call when the collection interrupted the handler's own work in
        this thread (whose locks it may hold)."""
        if stream.started or stream.done:
            return  # a started stream records itself when it closes
        self._live.collected.append(stream)
        if not getattr(self._live.busy, "depth", 0):
            with self._working():
                pass

    @contextlib.contextmanager
    def _working(self) -> Iterator[None]:
        """Mark this thread as inside the handler; on leaving, write the records of streams
        collected meanwhile."""
        depth = getattr(self._live.busy, "depth", 0)
        self._live.busy.depth = depth + 1
        try:
            yield
        finally:
            try:
                while depth == 0 and self._live.collected:
                    self._settle(self._live.collected.popleft(), None, None, UNCONSUMED)
            finally:
                self._live.busy.depth = depth

    def _settle(
        self, stream: _Stream, answer: str | None, error: str | None, status: str | None = None
    ) -> None:
        """Write a streaming answer's record, once."""
        with self._live.lock:
            if stream.done:
                return
            stream.done = True
            self._live.streams.pop(id(stream), None)
        with self._working():
            self._finish(
                stream.run, answer, stream.sources, stream.tags, error=error, answer_status=status
            )

    # -- records ----------------------------------------------------------------------------

    def _finish(
        self,
        run: _Run,
        answer: Any,
        sources: Sequence[NodeWithScore] | None,
        tags: dict[str, Any],
        error: str | None = None,
        run_id: str | None = "",
        answer_status: str | None = None,
    ) -> None:
        run.answered(answer)  # the answering LLM call: its model, and the prompt it read
        if sources is not None:
            shown = list(sources)
        elif run.reranks:
            shown = _held_lists(run)
        else:
            shown = []
        if not shown and not run.calls and answer is not None and error is None:
            # nothing shown and no LLM called: the synthesizer's canned "Empty Response" is no
            # model's answer (as LangChain's handler says of a graph's canned reply)
            answer, run.model = None, None
            answer_status = answer_status or NOT_FROM_A_MODEL
        sub_answers = _sub_question_nodes(run, shown)
        if sub_answers:
            shown = [n for n in shown if not any(n is a for a in sub_answers)]
        given = shown  # as shown: a node two searches showed, once per search
        shown, also_numbered = _shown_once(shown)
        shown, chunk_documents = _source_documents(shown, run.reranks)
        # a structured answer (an object, JSON text) written as the text the rules read; its
        # source ids number the entries the LLM was shown, chunks when a step split documents
        titles = [_title(n, self.title_key) for n in shown]
        labels = _entry_labels(shown) if chunk_documents is None else None
        entries: list[Entry] = list(titles)
        if chunk_documents is not None:
            entries = [titles[number - 1] for number in chunk_documents]
        elif labels is not None or any(also_numbered):  # the entry numbers the LLM saw, a
            # later step's order aside, a node a later search showed again under its own
            entries = entries_by_label(titles, labels, also_numbered)
        answer, answer_format = written_answer(answer, entries, source_id_base=SOURCE_ID_BASE)
        audited_answer = _cited_documents(answer, chunk_documents)
        query = run.span.query if run.span.query is not None else run.query
        try:
            auditor = self.auditor
            follow = self.postprocessor is not None and self._auditor is None
            if follow:  # following it
                auditor = ranked_for(auditor, [n.node.metadata for n in shown])
            group_key = (
                self.postprocessor.group_key if self.postprocessor is not None else self.group_key
            )
            metadatas = [n.node.metadata for n in shown]
            documents = _shown_documents(
                shown,
                group_key,
                self.title_key,
                labels,
                None if chunk_documents is not None else also_numbered,
            )
            # Nothing is known to have been shown when a failed run had neither source nodes
            # nor a re-ranking: its record keeps no metrics (docs/SPEC.md, "Records").
            unknown = error is not None and sources is None and not run.reranks
            record = shown_record(
                auditor,
                source="llamaindex",
                shown=None if unknown else documents,
                metadatas=metadatas,
                ranked=[n.node.metadata for n in run.reranks[-1].nodes] if run.reranks else None,
                ranking=run.reranks[-1].ranking if run.reranks else None,
                query=query,
                run_id=run.span.id_ if run_id == "" else run_id,
                model=run.model,
                metadata=tags,
                answer=audited_answer,
                error=error,
                framework={
                    "n_reranks": len(run.reranks),
                    "answer_format": None if answer is None else answer_format,
                    "source_id_base": SOURCE_ID_BASE,
                    **(
                        {
                            "sub_questions" if sub_answers else "searches": _search_lists(
                                self.auditor,
                                _sub_question_order(run.reranks, sub_answers, shown)
                                if sub_answers
                                else run.reranks,
                                group_key,
                                self.title_key,
                                follow,
                                given,
                            )
                        }
                        if sub_answers or len(run.reranks) > 1
                        else {}
                    ),
                    # a streaming answer nobody read (its ranking was made): "unconsumed"
                    **({"answer_status": answer_status} if answer_status else {}),
                },
            )
            if audited_answer is not answer:
                record["answer"] = answer  # the answer as given; its [n] were read as documents
        except (KeyError, ValueError, TypeError) as exc:
            logger.warning("FairnessEventHandler could not audit %r: %s", query, exc)
            record = unaudited_record(
                source="llamaindex",
                query=query,
                run_id=run.span.id_ if run_id == "" else run_id,
                error=f"{type(exc).__name__}: {exc}",
            )
        if not self._kept.add([record]):  # the file keeps the order of the in-memory records
            logger.error(
                "FairnessEventHandler could not write a record to %s: %s",
                self.log_path,
                self.log.last_error if self.log is not None else None,
            )
