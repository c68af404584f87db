"""FairnessCallbackHandler: one fairness record per answered question (docs/SPEC.md, "Records"),
computed by the core's :class:`~fairrag_core.FairnessAuditor` through the adapter kit, kept in
memory and optionally appended to a JSON-lines file."""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from pydantic import BaseModel

from fairrag_core import ExposureModel, FairnessAuditor, summarize_records
from fairrag_core.kit import (
    DEFAULT_MAX_RECORDS,
    KeptSinks,
    RecordKeeper,
    check_group_key,
    collapsed,
    held_order,
    is_placed,
    is_verdict,
    located,
    place_in,
    ranked_for,
    search_entry,
    search_start,
    shown_once,
)
from fairrag_core.structured_citations import check_source_id_base

from ._answers import answer_text, content_text, message_text, read_answer
from ._compose import CompositionError, fair_component_of
from ._documents import shown_record
from ._fields import (
    EMPTY_RANKING_EVENT,
    NUMBERED_TOOL_KEY,
    FairRankingFields,
    reported_model_name,
)

__all__ = ["FairnessCallbackHandler"]


@dataclass
class _Retrieval:
    """One outermost retriever run of a root run, and the generation linked to it."""

    run_id: UUID
    query: str | None = None
    name: str | None = None
    documents: list[Document] | None = None
    """What it returned (what the LLM is shown); None until the retriever ends."""
    ranked: list[Document] | None = None
    """The list a retriever nested in it returned last (a compression retriever's base): the
    fair ranking its own list came from, when a later step dropped all of it."""
    ranking: dict[str, Any] | None = None
    """The keys of its last fair ranking when that ranking placed no document (an empty pool:
    :data:`~fairrag_langchain._fields.EMPTY_RANKING_EVENT`), which no document carries."""
    model_runs: list[_ModelRun] = field(default_factory=list)
    """The model runs linked to it, in start order."""
    by_tool: bool = False
    """Whether a tool ran it (``create_retriever_tool``: an agent's search)."""
    numbered: bool = False
    """Whether a numbered tool (:func:`~fairrag_langchain.tools.fair_retriever_tool`) ran it:
    the model saw each document under ``[n]``, its 1-based place in :attr:`documents`."""
    _texts: tuple[str, ...] | None = None
    _located: tuple[tuple[str, str], ...] | None = None

    def texts(self) -> tuple[str, ...]:
        """Each shown document's text, whitespace collapsed (empty texts left out): what a
        model prompt must contain to be linked to this retrieval by content. Worked out when a
        model run first asks (a run with no model never pays for it)."""
        if self._texts is None:
            self._texts = _document_texts(self.documents or [])
        return self._texts

    def located(self) -> tuple[tuple[str, str], ...]:
        """Each shown document's ``(text, first line)``, whitespace collapsed, in the list's
        order: what tells where a prompt holds it, or that it holds part of it
        (:func:`~fairrag_core.kit.place_in`); empty when a document is blank (it cannot be
        found)."""
        if self._located is None:
            located = tuple(_text_and_first_line(d) for d in self.documents or [])
            self._located = located if all(text for text, _ in located) else ()
        return self._located


@dataclass
class _ModelRun:
    """A model run linked to a retrieval, and what it generated."""

    run_id: UUID
    order: int
    """Its start order in the root run."""
    by_content: bool
    """Whether its prompt held every shown document's text (else linked by the run tree)."""
    model: str | None = None
    answer: str | None = None
    """Its first generation's text; None until it ends (and for ever when it fails)."""
    seen: tuple[UUID, ...] = ()
    """The ended retrievals whose every shown document's text its prompt held, in the order
    its prompt holds them (parallel searches end in any order)."""
    message: BaseMessage | None = None
    """Its first generation's message (a chat model's), once it ended."""
    said: str | None = None
    """Its answer, whitespace collapsed (what the root's output holds of it)."""
    places: dict[UUID, tuple[int, ...]] = field(default_factory=dict)
    """For each retrieval ended before it started: where its prompt holds each document's
    whole text (:func:`~fairrag_core.kit.place_in`: -1 nowhere,
    :data:`~fairrag_core.kit.PARTLY` only in part)."""
    streamed: list[str] = field(default_factory=list)
    """The text of the tokens it streamed so far (``on_llm_new_token``)."""
    ended: bool = False
    """Whether it ended (with an output or an error)."""

    def stopped(self, generated: str | None = None) -> None:
        """Its stream was closed before its end (the consumer stopped reading): its answer is
        what it generated until then, ``generated`` when LangChain gives it, else its streamed
        tokens (docs/SPEC.md "Records", ``error``)."""
        self.answer = generated if generated else "".join(self.streamed)
        self.said = _collapsed(self.answer)

    def held_at(self, retrieval: UUID) -> tuple[int, ...]:
        """Where its prompt holds each of ``retrieval``'s documents (none when it ended
        after this run started)."""
        return self.places.get(retrieval, ())


@dataclass
class _RootRun:
    """What the handler holds for one root run until it ends."""

    members: list[UUID] = field(default_factory=list)
    retrievals: dict[UUID, _Retrieval] = field(default_factory=dict)
    nested: set[UUID] = field(default_factory=set)
    """Retriever runs inside another retriever run (an ensemble's members): not recorded."""
    ended: list[UUID] = field(default_factory=list)
    """The outermost retriever runs that have ended, in the order they ended."""
    llm_links: dict[UUID, _ModelRun] = field(default_factory=dict)
    """Model run -> its link to a retrieval."""
    models: dict[UUID, _ModelRun] = field(default_factory=dict)
    """Every model run of the root run (linked to a retrieval or not)."""
    tools: set[UUID] = field(default_factory=set)
    """The tool runs of the root run."""
    numbered_tools: set[UUID] = field(default_factory=set)
    """Its tool runs that show each document under its entry number (their metadata's
    :data:`~fairrag_langchain.tools.NUMBERED_TOOL_KEY`)."""
    tool_call_ids: set[str] = field(default_factory=set)
    """The tool calls its tool runs answered (their ``ToolMessage``'s ``tool_call_id``)."""
    question: str | None = None
    """The user's question, when the root run's input holds messages (the last human one)."""
    model_starts: int = 0
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    """Whether a node of it paused the graph (LangGraph's ``GraphInterrupt``)."""
    continued: bool = False
    """Whether its input was a LangGraph ``Command`` or None: it continued a thread (a resume,
    a run after ``interrupt_before``, a replay), whose question is in the state it returns."""
    resumed_from: str | None = None
    """The run id of the run a LangGraph ``interrupt()`` paused that this run resumed."""
    graph: bool = False
    """Whether a LangGraph node ran in it (a run's metadata names ``langgraph_node``): a
    graph's root run that returns a model's answer writes one record, whatever else its state
    holds."""
    retried: set[UUID] = field(default_factory=set)
    """Retrievals and model runs of an attempt that failed and was retried (``with_retry``:
    LangChain tags a later attempt's run ``retry:attempt:N``): no question of their own."""


if TYPE_CHECKING:
    _Handler = BaseCallbackHandler
else:
    try:  # LangGraph tells a graph's pauses only to its graph callback handlers
        from langgraph.callbacks import GraphCallbackHandler as _Handler
    except ImportError:  # no LangGraph (or one before its graph callbacks): no graph to pause
        _Handler = BaseCallbackHandler


class FairnessCallbackHandler(KeptSinks, _Handler):
    """One fairness record per answered question: exposure of what was shown, and the answer.

    Pass it in a run's config (``chain.invoke(q, config={"callbacks": [handler]})``) or with
    ``with_config(callbacks=[...])`` on the outermost runnable, so that it sees the retrieval
    and the model run of each question: LangChain hands a component's own callbacks (a chat
    model's ``callbacks=``, a ``with_config`` on the retriever alone) to that component's runs
    only, and a record then lacks what the handler did not see (the answer; a bare model run
    without a retrieval writes nothing). One handler serves any number of concurrent runs, sync
    or async: its state is keyed by run id under a lock.

    Build it from the component it audits, so it measures against the same target and exposure
    model as the ranker (and follows later changes of its fields):
    ``FairnessCallbackHandler.from_retriever(retriever, path="fairness.jsonl")``. Built by hand
    from ``protected``/``target_share``/``target``/``exposure`` it uses those; every record
    states the ``target``, ``protected`` and ``exposure_model`` it was computed with.

    What is recorded (:func:`fairrag_core.kit.run_record`, docs/SPEC.md "Records"): per
    outermost retriever run of a root run, the list it returned, in order (titles, groups,
    document ids, exposure share and disparity, exposure per group), the fair ranking it came
    from (``ranker``, ``query_seed``, ``pool_size``, ``k`` from the documents' placement
    metadata, by :func:`fairrag_core.kit.shown_provenance`: ``ranker`` is None when the list was
    not made by one fair ranking, e.g. an ``EnsembleRetriever``'s fused list, flagged
    ``mixed_after_ranking``), the answer of the chat model (or LLM) run linked to it, parsed and
    grounded by the core's one rule, the model's name, the root run's tags and metadata, a
    timestamp. Retriever runs nested in another retriever run (the members of an ensemble, the
    base retriever of a compression retriever) are part of the outer run's record, never
    records of their own: one record per answered question.

    The answer is what was generated from the shown list (docs/SPEC.md, "Adapters" → Which
    answer is recorded). A model run is linked, when it starts, to a retrieval of its root run
    that has ended: by content, the one whose every shown document's text its prompt holds
    (whitespace runs compared as one space; of several, the one with the most documents), so a
    model run on something else (a moderation of the answer, follow-up questions) is never
    taken for the answer; when no prompt holds a retrieval's documents (it showed none, or a
    custom prompt shortens them), by the run tree, the one closest to the model run (their
    nearest common ancestor the deepest: its own chain's, not a parallel branch's), of those
    the one that ended last. The record's answer is the first (in start order) model run on
    its context that ended with an output; ``llm_runs`` counts those runs, ``llm_run_ids``
    lists them (the answer's first, ``llm_run_id``) and ``answer_link`` says how they were
    linked (``"content"`` or ``"run_tree"``; None without a model run). A record
    is written when its root run ends; a root run that fails still writes what it retrieved,
    with its ``error``, and so does one whose retrieval itself failed (then without metrics). A
    root run without any retrieval (a bare model call) writes nothing.

    Agents and graphs (docs/SPEC.md, "Adapters" → Agents and graphs): a root run whose output
    is a graph's state (``create_agent``, ``create_react_agent``, a LangGraph graph) or whose
    searches ran in tools (``create_retriever_tool``) writes one record, of the answer the user
    receives (its structured response, else its last message when that is a model's answer),
    against every document of the searches the answering model saw; each search's own ranking
    and exposure are in ``framework["searches"]``. Structured answers (tool-call arguments,
    ``with_structured_output``, JSON content, provider citation blocks) are recorded as the
    same citations in text (:mod:`fairrag_core.structured_citations`); their source ids count
    from ``source_id_base`` (default: 0, as LangChain's citation how-to numbers sources, and 1
    for the documents of a :func:`~fairrag_langchain.fair_retriever_tool`, which shows them as
    ``[1]``, ``[2]``...: the labels the model cites; a base given is used for both).

    Records are kept in :attr:`records` (the last ``max_records``, default 1,000, None for
    all: the kit's :class:`~fairrag_core.kit.RecordKeeper`, the rule of every handler) and,
    with ``path``, appended to that file by the core's :class:`~fairrag_core.JsonLinesLog`.
    A record that cannot be written (a full disk)
    raises ``fairrag_core.jsonl.LogWriteError`` in the run that produced it (``raise_error``),
    never only a warning; with ``log_errors="count"`` the run goes on and ``log.errors`` /
    ``log.last_error`` count the failures (the record stays in :attr:`records`). ``sinks``
    receive every record too: :class:`fairrag_core.telemetry.OpenTelemetrySink` (metrics and
    span attributes) and :class:`fairrag_core.telemetry.LangSmithFeedbackSink` (the record's
    metrics as feedback on its LangSmith run), or any callable.
    """

    run_inline = True
    """Bookkeeping is quick: run on the caller's thread or event loop, in event order."""
    raise_error = True
    """A record that cannot be computed or written fails the run instead of vanishing."""

    def __init__(
        self,
        *,
        group_key: str,
        protected: Any = None,
        target_share: float | None = None,
        target: Any = None,
        exposure: Any = None,
        title_key: str = "title",
        path: str | os.PathLike[str] | None = None,
        max_records: int | None = DEFAULT_MAX_RECORDS,
        log_errors: Literal["raise", "count"] = "raise",
        sinks: Sequence[Callable[[dict[str, Any]], Any]] = (),
        source_id_base: int | None = None,
    ) -> None:
        self.group_key = check_group_key(group_key)
        self._base_given = source_id_base is not None
        """Whether the source ids' base was given (else: 0, and 1 for a numbered tool's)."""
        self.source_id_base = check_source_id_base(0 if source_id_base is None else source_id_base)
        self.title_key = title_key
        self._auditor = FairnessAuditor.create(
            protected=protected, target_share=target_share, target=target, exposure=exposure
        )
        self._source: FairRankingFields | None = None
        self._own_exposure: ExposureModel | None = None
        """The exposure model ``from_retriever(..., exposure=)`` gave: records follow the
        component's target under it (as LlamaIndex's handler does)."""
        self._kept = RecordKeeper(path, max_records=max_records, on_error=log_errors, sinks=sinks)
        self.log = self._kept.log
        self._lock = threading.Lock()
        self._parent: dict[UUID, UUID | None] = {}
        self._root_of: dict[UUID, UUID] = {}
        self._roots: dict[UUID, _RootRun] = {}
        self._paused: OrderedDict[str, tuple[UUID, _RootRun, Any, float]] = OrderedDict()
        """Runs a LangGraph ``interrupt()`` paused, by thread id, oldest first: the run that
        resumes the thread completes their record (:meth:`_write`)."""
        self._late: list[tuple[UUID, _RootRun, Any]] = []
        """Paused runs a new question on their thread ended: written at the next run's end."""

    _IN_FLIGHT = ("_parent", "_root_of", "_roots", "_paused", "_late")
    """The run tree of the questions this process is answering: never pickled."""

    def __getstate__(self) -> dict[str, Any]:
        # Pickled (a ProcessPool, Ray or Dask worker), the handler keeps its configuration, the
        # component it follows, its records, log file and sinks; runs in flight stay here.
        state = {k: v for k, v in self.__dict__.items() if k not in ("_lock", *self._IN_FLIGHT)}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # pickled before the default followed a numbered tool: a base other than the default
        # was given (a review: True kept such a handler's off-by-one)
        state.setdefault("_base_given", state.get("source_id_base", 0) != 0)
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._parent, self._root_of, self._roots = {}, {}, {}
        self._paused, self._late = OrderedDict(), []

    @classmethod
    def from_retriever(cls, retriever: Any, **fields: Any) -> FairnessCallbackHandler:
        """A handler auditing with ``retriever``'s group key, target and exposure model.

        ``retriever`` is a :class:`FairRetriever`, a :class:`FairReranker`, or any composition
        in which one can be seen (docs/SPEC.md "Adapters" → Composition: ``with_config``,
        ``configurable_fields``, ``configurable_alternatives``, ``with_fallbacks``, a
        compression retriever; :func:`fairrag_langchain._compose.fair_component_of`); a wrapper
        whose fair members disagree on the group key or exposure model is a ``ValueError``
        naming the fix. The handler reads the target and exposure model from the component at
        every record, so a later change of its fields is audited with the new values; a list
        one fair ranking drew for another target (a per-call copy: LangChain's
        ``configurable_fields`` builds one for each call, ``model_copy`` makes one; another
        alternative or fallback) is audited against the target it was ranked for, which its
        documents' ``fair_target`` metadata holds. ``exposure=`` audits the component's
        target under another exposure model (a DCG ranker measured under the generator's
        fitted curve), as LlamaIndex's ``from_postprocessor`` does (a user trial found it
        ignored). ``fields`` are the other constructor arguments.
        """
        try:
            component = fair_component_of(retriever)
        except CompositionError as exc:
            raise CompositionError(
                f"{exc}; or build the handler with group_key= and protected=/target="
            ) from None
        if component is None:
            raise TypeError(
                "from_retriever takes a FairRetriever, a FairReranker or a composition in "
                f"which one can be seen, got {type(retriever).__name__}; build the handler "
                "with group_key= and protected=/target= instead"
            )
        clash = sorted(set(fields) & {"group_key", "protected", "target_share", "target"})
        if clash:
            raise ValueError(f"{clash} come from the retriever; leave them out of from_retriever")
        if component.fairness_target is None:
            raise ValueError(
                f"{type(component).__name__} ranks with {component.ranker_name!r} and no "
                "fairness target: give it protected= or target=, or build the handler with them"
            )
        own = fields.pop("exposure", None)
        handler = cls(
            group_key=component.group_key,
            target=component.fairness_target,
            exposure=component.fairness_exposure if own is None else own,
            **fields,
        )
        handler._source = component
        if own is not None:  # the component's target, audited under this model
            handler._own_exposure = handler._auditor.exposure
        return handler

    @property
    def auditor(self) -> FairnessAuditor:
        """The auditor of the next record (the audited component's current target, if any)."""
        audited = None if self._source is None else self._source.auditor
        if audited is None:
            return self._auditor
        if self._own_exposure is not None:
            return FairnessAuditor(audited.target, self._own_exposure)
        return audited

    @property
    def records(self) -> list[dict[str, Any]]:
        """The completed records so far, in completion order (a copy of the list)."""
        return self._kept.records

    def summary(self) -> dict[str, dict[str, object]]:
        """Mean of each metric per ranker, with counts (NaN values counted, never dropped)."""
        return summarize_records(self.records, by="ranker")

    # -- run tree ---------------------------------------------------------------------------

    def _start(
        self, run_id: UUID, parent_run_id: UUID | None, kwargs: Mapping[str, Any]
    ) -> tuple[UUID, _RootRun]:
        """Register a run under its root; caller holds the lock."""
        root = None if parent_run_id is None else self._root_of.get(parent_run_id)
        if root is None or root not in self._roots:
            root = run_id
            tags, metadata = list(kwargs.get("tags") or []), dict(kwargs.get("metadata") or {})
            paused = self._resumed(metadata, kwargs.get("inputs")) if self._paused else None
            if paused is not None:  # the run resuming a paused thread: its record goes on
                paused.members, paused.tags, paused.metadata = [], tags, metadata
                self._roots[root] = paused
            else:
                inputs = kwargs.get("inputs")
                self._roots[root] = _RootRun(
                    tags=tags,
                    metadata=metadata,
                    question=_question_of(inputs),
                    continued=inputs is None or _is_command(inputs),
                )
        self._root_of[run_id] = root
        self._parent[run_id] = parent_run_id
        state = self._roots[root]
        state.members.append(run_id)
        if parent_run_id is not None and any(
            isinstance(tag, str) and tag.startswith(RETRY_TAG) for tag in kwargs.get("tags") or ()
        ):  # a later attempt of a run retried: the earlier attempts' searches and model runs
            state.retried.update(  # are no part of what the user received
                run
                for run in (*state.retrievals, *state.models)
                if parent_run_id in self._ancestors(state, self._parent.get(run))
            )
        if not state.graph and "langgraph_node" in (kwargs.get("metadata") or {}):
            state.graph = True
        return root, state

    def _resumed(self, metadata: Mapping[str, Any], inputs: Any) -> _RootRun | None:
        """The paused run a new root run resumes: one on the same thread whose input is a
        ``Command`` or None (a new question on the thread ends a paused run unanswered: its
        record is written, ``answer_status: "interrupted"``); caller holds the lock."""
        thread = _thread_of(metadata)
        if thread is None or thread not in self._paused:
            return None
        root, state, outputs, _ = self._paused.pop(thread)
        if not self._paused:
            _holding(self, False)
        if inputs is None or _is_command(inputs):
            state.resumed_from = state.resumed_from or str(root)
            state.interrupted = False
            return state
        self._late.append((root, state, outputs))
        return None

    def write_interrupted(self, older_than: float | None = None) -> int:
        """Write the record of every run still paused at a LangGraph ``interrupt()`` (answer
        null, ``answer_status: "interrupted"``), as at exit; with ``older_than``, only those
        paused that many seconds ago or more. Returns how many."""
        now = time.monotonic()
        with self._lock:
            due = [
                thread
                for thread, (*_, since) in self._paused.items()
                if older_than is None or now - since >= older_than
            ]
            paused = [self._paused.pop(thread) for thread in due]
            if not self._paused:
                _holding(self, False)
        for root, state, outputs, _ in paused:
            self._write(root, state, outputs, None, pause=False)
        return len(paused)

    def _ancestors(self, state: _RootRun, parent_run_id: UUID | None) -> Iterator[UUID]:
        """``parent_run_id`` and the runs above it, nearest first; bounded by the root run's
        size (caller holds the lock)."""
        for _ in range(len(state.members)):
            if parent_run_id is None:
                return
            yield parent_run_id
            parent_run_id = self._parent.get(parent_run_id)

    def _inside_retriever(self, state: _RootRun, parent_run_id: UUID | None) -> bool:
        """Whether a run started under ``parent_run_id`` is inside a retriever run."""
        return any(
            run in state.retrievals or run in state.nested
            for run in self._ancestors(state, parent_run_id)
        )

    def _outer_retrieval(self, state: _RootRun, run_id: UUID) -> _Retrieval | None:
        """The outermost retriever run a nested retriever run belongs to."""
        ancestors = self._ancestors(state, self._parent.get(run_id))
        return next((state.retrievals[run] for run in ancestors if run in state.retrievals), None)

    def _ended(self, run_id: UUID, error: BaseException | None = None, outputs: Any = None) -> None:
        """A run ended: when it is a root, write its records (``outputs``: a chain's)."""
        with self._lock:
            late, self._late = self._late, []
            if self._root_of.get(run_id) != run_id:
                state = None
            else:
                state = self._roots.pop(run_id)
                for member in state.members:
                    self._root_of.pop(member, None)
                    self._parent.pop(member, None)
                # a model still streaming when its root ended: what read its stream stopped
                # (a consumer of the root's stream, or a step that broke off its own); its
                # answer is what it streamed, with the error LangChain gave the root, if any
                # (none for a sync stream: nothing tells a consumer gone from a step done)
                for run in state.models.values():
                    if not run.ended and run.streamed:
                        run.stopped()
        for root, paused, paused_outputs in late:  # paused runs a new question ended
            self._write(root, paused, paused_outputs, None, pause=False)
        if state is not None:
            self._write(run_id, state, outputs, error)

    def _write(
        self,
        run_id: UUID,
        state: _RootRun,
        outputs: Any,
        error: BaseException | None,
        pause: bool = True,
    ) -> None:
        """Write the records of the root run ``run_id`` (``state``), or, with ``pause``, hold
        a run a LangGraph ``interrupt()`` paused on a thread until the run resuming it ends
        (docs/SPEC.md, "Records" → Interrupted runs)."""
        thread = _thread_of(state.metadata)
        interrupted = state.interrupted or (
            isinstance(outputs, Mapping) and INTERRUPT_KEY in outputs
        )
        if pause and interrupted and thread is not None and state.retrievals:
            with self._lock:
                # another run paused on the thread (two runs on one thread at once): written
                before = self._paused.pop(thread, None)
                evicted = [] if before is None or before[1] is state else [before]
                self._paused[thread] = (run_id, state, outputs, time.monotonic())
                while len(self._paused) > MAX_PAUSED:
                    evicted.append(self._paused.popitem(last=False)[1])
                _holding(self, True)
            for root, paused, paused_outputs, _ in evicted:
                self._write(root, paused, paused_outputs, None, pause=False)
            _write_expired()
            return
        if state.question is None and state.continued:  # the question the state holds
            state.question = _question_of(outputs)
        final = _final_output(outputs)
        returned = _Returned.of(outputs)
        # a graph paused at interrupt() returns what it holds so far and the interrupts
        status = "interrupted" if interrupted else None
        done = sorted(
            (
                run
                for run in state.models.values()
                if run.answer is not None and run.run_id not in state.retried
            ),
            key=lambda run: run.order,
        )
        # one answer from several retrievals: several lists in its prompt, or the one model
        # run whose prompt held a list several searches returned (the question and a rewrite
        # of it, the rewrite a model's or not)
        seeing = [run for run in done if run.seen]  # a rewriter's prompt holds no document
        several = [
            run
            for run in done
            if self._lists(state, run.seen) > 1 or (seeing == [run] and len(set(run.seen)) > 1)
        ]
        # a graph without messages in its state is told by what it returns: a model's answer
        # under an answer key (a node running a chain per question returns none: its own rule)
        # (a graph paused and never resumed is one question too, unless its model runs answered
        # from lists of their own: a node running a chain per question, each question a record)
        answered_lists = {tuple(run.seen) for run in done if run.seen}
        graph = state.graph and (
            (interrupted and len(answered_lists) <= 1)
            or any(returned.holds(run) or returned.changed(run) is not None for run in done)
        )
        if final is not None or graph or any(r.by_tool for r in state.retrievals.values()):
            # an agent or a graph: one record, of the answer the user receives
            if state.retrievals:
                answering, answer = _final_answer(final, done, returned, interrupted)
                if _failed(error):  # the user received an error, not an answer
                    answering, answer = None, None
                if answer is None and final is not None and _answers(final.message):
                    status = status or "not_from_a_model"
                record = self._answer_record(
                    run_id, state, done, answering, answer, "final_output", error, status
                )
                self._kept.add([record])
            return
        if several:  # one answer from several retrievals (a search per sub-question)
            most = max(self._lists(state, run.seen) for run in several)
            held = [run for run in several if self._lists(state, run.seen) == most]
            answering = None if _failed(error) else _chosen(held, returned)
            answer = None
            if answering is not None:
                answer = answering.message if answering.message is not None else answering.answer
            record = self._answer_record(
                run_id, state, done, answering, answer, "content", error, status
            )
            self._kept.add([record])
            return
        # A retrieval that failed has no documents, but its root's error is logged: a failed
        # run is never silently missing from the log. A search of an attempt retried is no
        # question of its own: the later attempt's record is the user's.
        records = [
            self._final_record(run_id, state, retrieval, returned, error, status)
            for retrieval in state.retrievals.values()
            if (retrieval.documents is not None or error is not None)
            and retrieval.run_id not in state.retried
        ]
        if not records:
            return
        self._kept.add(records)  # the file keeps the in-memory order

    @staticmethod
    def _lists(state: _RootRun, seen: Sequence[UUID]) -> int:
        """How many different lists the retrievals ``seen`` showed (two searches that
        returned the same documents are one list: a prompt holding it holds both)."""
        return len({state.retrievals[run].texts() for run in seen})

    def _final_record(
        self,
        root: UUID,
        state: _RootRun,
        retrieval: _Retrieval,
        returned: _Returned,
        error: BaseException | None,
        status: str | None = None,
    ) -> dict[str, Any]:
        answer, links = _answer_of(retrieval, returned)
        if _failed(error):  # the user received an error: no model's output is the answer
            answer = None
        # the list the answering model was handed: a later step may have reordered or dropped
        # some of the retriever's documents (docs/SPEC.md "Which list is audited")
        documents = _as_held(answer, retrieval)
        auditor = self.auditor
        if self._source is not None and documents:  # following a component
            auditor = ranked_for(auditor, [d.metadata for d in documents])
        base = self._ids_base(retrieval.numbered)
        text, form = (None, None) if answer is None else self._answer_text(answer, documents, base)
        return self._record(
            root,
            state,
            auditor,
            documents,
            retrieval=retrieval,
            ranked=retrieval.ranked,
            ranking=retrieval.ranking,
            query=retrieval.query,
            answering=answer,
            answer=(text, form),
            error=error,
            runs=links,
            link=None if answer is None else _LINKS[answer.by_content],
            source_id_base=base,
            **({"answer_status": status} if status else {}),
            **({"resumed_from": state.resumed_from} if state.resumed_from else {}),
        )

    def _record(
        self,
        root: UUID,
        state: _RootRun,
        auditor: FairnessAuditor,
        documents: Sequence[Document] | None,
        numbers: Numbers | None = None,
        /,
        *,
        retrieval: _Retrieval,
        ranked: Sequence[Document] | None,
        ranking: Mapping[str, Any] | None,
        query: str | None,
        answering: _ModelRun | None,
        answer: tuple[str | None, str | None],
        error: BaseException | None,
        runs: Sequence[_ModelRun],
        link: str | None,
        **framework: Any,
    ) -> dict[str, Any]:
        """A record of the root run (docs/SPEC.md, "Records"), LangChain's fields under
        ``framework``: ``retrieval`` is the (first) search, ``runs`` the model runs counted;
        ``numbers``: the entry numbers the model saw the documents under (:func:`_numbered`)."""
        text, form = answer
        return shown_record(
            auditor,
            documents,
            self.group_key,
            self.title_key,
            numbers=numbers,
            ranked=ranked,
            ranking=ranking,
            query=query,
            run_id=str(root),
            model=None if answering is None else answering.model,
            tags=state.tags,
            metadata=state.metadata,
            answer=text,
            error=None if error is None else f"{type(error).__name__}: {error}",
            framework={
                "retriever_run_id": str(retrieval.run_id),
                "llm_run_id": None if answering is None else str(answering.run_id),
                "retriever": retrieval.name,
                "llm_runs": len(runs),
                "llm_run_ids": [str(run.run_id) for run in runs],
                "answer_link": None if text is None else link,
                "answer_format": form,
                "source_id_base": self.source_id_base,
                **framework,
            },
        )

    def _answer_record(
        self,
        root: UUID,
        state: _RootRun,
        done: Sequence[_ModelRun],
        answering: _ModelRun | None,
        answer: Any,
        link: str,
        error: BaseException | None,
        status: str | None = None,
    ) -> dict[str, Any]:
        """The one record of an agent's or a graph's root run, or of a chain's answer from
        several retrievals (docs/SPEC.md, "Records" → Agents and graphs): the ``answer`` of
        the ``answering`` model run, against every document it saw, each search's ranking in
        ``searches``; ``done``: the root's model runs that ended with an output."""
        seen = state.ended if answering is None or not answering.seen else answering.seen
        if answering is not None and not answering.seen:  # a step kept part of a list
            partly = [run for run in state.ended if any(at >= 0 for at in answering.held_at(run))]
            seen = partly or state.ended
        # a retried attempt's searches are not the user's (the later attempt drew the same list)
        seen = [run for run in seen if run not in state.retried] or seen
        searches = [state.retrievals[run] for run in seen]
        # each search's documents as the answering prompt held them ("Which list is audited"),
        # with the entry numbers a numbered tool showed them under
        documents, numbers = _numbered([(s, _as_held(answering, s) or []) for s in searches])
        auditor = self.auditor
        if self._source is not None and documents:  # following a component
            auditor = ranked_for(auditor, [d.metadata for d in documents])
        entries = []
        # every ranking has its record: a search the answering model never saw (one a grader
        # rejected before a rewrite, a tool that ranked and then failed) is listed after those
        # it saw, ``held`` false (an amortized ledger counted its ranking)
        unseen = [
            state.retrievals[run]
            for run in state.ended
            if run not in seen and run not in state.retried
        ]
        for search in [*searches, *unseen]:
            own = shown_record(
                auditor
                if self._source is None
                else ranked_for(self.auditor, [d.metadata for d in search.documents or []]),
                search.documents,
                self.group_key,
                self.title_key,
                ranked=search.ranked,
                ranking=search.ranking,
                query=search.query,
            )
            entries.append(
                search_entry(
                    own,
                    retriever_run_id=str(search.run_id),
                    held=not any(search is other for other in unseen),
                )
            )
        first = searches[0] if searches else next(iter(state.retrievals.values()))
        text, form = (None, None)
        base = self._ids_base(any(search.numbered for search in searches))
        if answer is not None:
            text, form = answer_text(
                answer,
                documents,
                source_id_base=base,
                title_key=self.title_key,
                fallback=answer if isinstance(answer, str) else getattr(answering, "answer", None),
                numbers=numbers,
            )
        failed = all(search.documents is None for search in state.retrievals.values())
        return self._record(
            root,
            state,
            auditor,
            None if failed else documents,
            numbers,
            retrieval=first,
            ranked=first.ranked if len(searches) == 1 else None,
            ranking=first.ranking if len(searches) == 1 else None,
            query=state.question if state.question is not None else first.query,
            answering=answering,
            answer=(text, form),
            error=error,
            runs=done,
            link=link,
            source_id_base=base,
            searches=entries,
            **({"answer_status": status} if status else {}),
            **({"resumed_from": state.resumed_from} if state.resumed_from else {}),
        )

    def _ids_base(self, numbered: bool) -> int:
        """The base structured source ids are read from: the one given, else 1 for documents a
        numbered tool showed (``[1]`` first: a user trial found every id read one entry off,
        parity 0.33 where the same ``[n]`` in text gave 0.5), else 0."""
        return 1 if numbered and not self._base_given else self.source_id_base

    def _answer_text(
        self, run: _ModelRun, documents: Sequence[Document] | None, base: int
    ) -> tuple[str | None, str]:
        """A model run's answer as the citation rules read it (structured citations written as
        text against the shown ``documents``, their source ids counted from ``base``)."""
        return answer_text(
            run.message if run.message is not None else run.answer,
            documents or [],
            source_id_base=base,
            title_key=self.title_key,
            fallback=run.answer,
        )

    # -- chains and tools: only the run tree --------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self._start(run_id, parent_run_id, {**kwargs, "inputs": inputs})

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, outputs=outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if _interrupts(error):  # a node paused the graph (``interrupt()``): not a failure
            with self._lock:
                root = self._root_of.get(run_id)
                state = None if root is None else self._roots.get(root)
                if state is not None:
                    state.interrupted = True
                if root != run_id:
                    return
        self._ended(run_id, error)

    def on_interrupt(self, event: Any) -> None:
        """LangGraph's graph callback (``langgraph.callbacks.GraphCallbackHandler``): the graph
        ``event.run_id`` paused, at ``interrupt()`` or at a static breakpoint
        (``interrupt_before``/``interrupt_after``), which raises nothing in a node and is told
        only here. Its root run is held like one a node's ``interrupt()`` paused."""
        with self._lock:
            root = self._root_of.get(getattr(event, "run_id", None))  # type: ignore[arg-type]
            state = None if root is None else self._roots.get(root)
            if state is not None:
                state.interrupted = True

    def on_resume(self, event: Any) -> None:
        """LangGraph's graph callback: a run resumed a checkpoint. The resuming run is known
        from its input (a ``Command`` or None) on the thread (:meth:`_resumed`)."""

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            _, state = self._start(run_id, parent_run_id, kwargs)
            state.tools.add(run_id)
            if (kwargs.get("metadata") or {}).get(NUMBERED_TOOL_KEY) is True:
                state.numbered_tools.add(run_id)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        call_id = getattr(output, "tool_call_id", None)
        if isinstance(call_id, str):
            with self._lock:
                root = self._root_of.get(run_id)
                state = None if root is None else self._roots.get(root)
                if state is not None:
                    state.tool_call_ids.add(call_id)
        self._ended(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, error)

    # -- retrievers -----------------------------------------------------------------------------

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name")
        with self._lock:
            _, state = self._start(run_id, parent_run_id, kwargs)
            if self._inside_retriever(state, parent_run_id):
                state.nested.add(run_id)
            else:
                by_tool = any(run in state.tools for run in self._ancestors(state, parent_run_id))
                state.retrievals[run_id] = _Retrieval(
                    run_id,
                    query=query,
                    name=name,
                    by_tool=by_tool,
                    numbered=parent_run_id in state.numbered_tools,  # the tool's own search
                )

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            root = self._root_of.get(run_id)
            if root is None:  # its start was not seen (handler added mid-run): standalone
                root, state = self._start(run_id, None, kwargs)
                state.retrievals[run_id] = _Retrieval(run_id)
            else:
                state = self._roots[root]
            retrieval = state.retrievals.get(run_id)
            if retrieval is not None:
                retrieval.documents = list(documents)
                state.ended.append(run_id)
            elif run_id in state.nested and any(is_placed(d.metadata) for d in documents):
                outer = self._outer_retrieval(state, run_id)
                if outer is not None:
                    outer.ranked, outer.ranking = list(documents), None
        self._ended(run_id)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A fair component's ranking placed no document (:data:`EMPTY_RANKING_EVENT`, sent
        to the retriever run that ranked): the record names that ranking all the same."""
        if name != EMPTY_RANKING_EVENT or not isinstance(data, Mapping):
            return
        with self._lock:
            root = self._root_of.get(run_id)
            state = None if root is None else self._roots.get(root)
            if state is None:
                return
            retrieval = state.retrievals.get(run_id)
            if retrieval is None and run_id in state.nested:
                retrieval = self._outer_retrieval(state, run_id)
            if retrieval is not None:
                retrieval.ranked, retrieval.ranking = None, dict(data)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, error)

    # -- language models --------------------------------------------------------------------------

    def _model_start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        serialized: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
        parts: Sequence[str],
        turn: int | None = None,
        ended_on_tools: Sequence[tuple[int, set[str]]] = (),
    ) -> None:
        # the prompt's messages (or prompts), whitespace collapsed, and where the message
        # ``turn`` (the first of a conversation's current turn) begins
        collapsed = [_collapsed(part) for part in parts]
        text = " ".join(part for part in collapsed if part)
        with self._lock:
            _, state = self._start(run_id, parent_run_id, kwargs)
            # an earlier turn that ended on tool calls no tool run of this root answered, and
            # before which no search of this root is held in its order (a tool node that
            # passes no tool call id: a review found a rewrite of this question read as a turn)
            earlier = [
                at
                for at, ids in ended_on_tools
                if not ids & state.tool_call_ids and not _holds_a_search(collapsed[:at], state)
            ]
            turn = max([turn or 0, *earlier]) or None
            before = [part for part in collapsed[: turn or 0] if part]
            start = sum(len(part) + 1 for part in before) if turn else 0
            order, state.model_starts = state.model_starts, state.model_starts + 1
            # where the prompt holds each ended retrieval's documents, searched once (from the
            # current turn when it holds the list: not an earlier turn's copy): the link, the
            # searches seen and the list as held all read these
            places = {
                ended: _places(text, start, located)
                for ended in state.ended
                if (located := state.retrievals[ended].located())
            }
            link, seen = self._context_of(state, run_id, text, places)
            run = _ModelRun(
                run_id,
                order,
                link is not None and link[1],
                reported_model_name(serialized, kwargs),
                seen=seen,
                places=places,
            )
            state.models[run_id] = run
            if link is not None:
                link[0].model_runs.append(run)
                state.llm_links[run_id] = run

    def _context_of(
        self,
        state: _RootRun,
        model_run: UUID,
        prompt: str,
        places: Mapping[UUID, tuple[int, ...]],
    ) -> tuple[tuple[_Retrieval, bool] | None, tuple[UUID, ...]]:
        """The ended retrieval a model run starting now with ``prompt`` was handed, and whether
        it was found by content; and every ended retrieval its prompt holds (what an agent's
        model saw). Caller holds the lock.

        By content: a retrieval whose every shown document's text is in the prompt (of several,
        the one with the most documents). Else, by the run tree: the one closest to the model
        run (their nearest common ancestor the fewest steps above it: its own chain's, not a
        parallel branch's). Ties go to the one that ended last. ``places``: where the prompt
        holds each ended retrieval's documents (:func:`~fairrag_core.kit.place_in`; none for a
        retrieval with a blank document, whose other texts are looked up here).
        """
        steps_up = {
            run: steps
            for steps, run in enumerate(self._ancestors(state, self._parent.get(model_run)))
        }
        best: tuple[Any, ...] | None = None
        chosen = None
        seen = []
        # each list held (its documents, in any order: a CI flake found a parallel branch's
        # list of the same documents in another order read as a second search of one
        # question): the fewest steps to a search of it
        nearest: dict[frozenset[str], int] = {}
        distance: dict[UUID, int] = {}
        for ended, run_id in enumerate(state.ended):
            retrieval = state.retrievals[run_id]
            common = next(
                (
                    steps_up[run]
                    for run in self._ancestors(state, self._parent.get(run_id))
                    if run in steps_up
                ),
                len(state.members),
            )
            texts = retrieval.texts()
            at = places.get(run_id)
            if at is not None:
                held = all(place >= 0 for place in at)
            else:
                held = bool(texts) and all(text in prompt for text in texts)
            if held:
                seen.append((ended, run_id))
                nearest[frozenset(texts)] = min(nearest.get(frozenset(texts), common), common)
                distance[run_id] = common
            key = (held, len(texts) if held else 0, -common, ended)
            if best is None or key > best:
                best, chosen = key, retrieval
        link = None if chosen is None or best is None else (chosen, bool(best[0]))
        # a list another search returned too is the nearest one's: a parallel branch that
        # searched the same question (and ended first) handed this model nothing
        seen = [
            (ended, run_id)
            for ended, run_id in seen
            if distance[run_id] == nearest[frozenset(state.retrievals[run_id].texts())]
        ]
        return link, self._in_prompt_order(state, seen, prompt, places)

    @staticmethod
    def _in_prompt_order(
        state: _RootRun,
        seen: list[tuple[int, UUID]],
        prompt: str,
        places: Mapping[UUID, tuple[int, ...]],
    ) -> tuple[UUID, ...]:
        """The retrievals ``seen`` ((end order, run id), each held whole by ``prompt``) in the
        order the prompt holds them: each at its first document that no other of them showed
        (a document two searches returned is found in the first one's place), else at its
        first document; where ``places`` says (read from the message holding the list)."""
        shared = [set(state.retrievals[run_id].texts()) for _, run_id in seen]
        order = []
        for at, (ended, run_id) in enumerate(seen):
            texts = state.retrievals[run_id].texts()
            others = set().union(*(s for i, s in enumerate(shared) if i != at))
            own = [i for i, text in enumerate(texts) if text not in others] or [0]
            held = places.get(run_id)
            if held is not None and len(held) == len(texts):
                first = min(held[i] for i in own)
                # two searches of one list at one place (parallel calls, the list drawn in two
                # orders): the one the prompt holds in its own order first, not the one that
                # ended first (a thread's timing)
                own_order = 0 if list(held) == sorted(held) else 1
            else:
                first, own_order = min(prompt.find(texts[i]) for i in own), 0
            order.append((first, own_order, ended, run_id))
        return tuple(run_id for *_, run_id in sorted(order))

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        flat = [m for batch in messages for m in batch]
        # a conversation's current turn: what follows the last earlier answer (an AI message
        # without tool calls that a human message follows), or the last earlier turn that
        # ended on tool calls (a structured response, ToolStrategy's; a return_direct tool):
        # an AI message whose tool results a human message follows, when no tool run of this
        # root answered them (a user trial: a turn after a ToolStrategy answer was read with
        # the whole conversation, its documents at the earlier turn's places)
        humans = [i for i, m in enumerate(flat) if isinstance(m, HumanMessage)]
        last = humans[-1] if humans else 0
        answers = [
            i for i, m in enumerate(flat[:last]) if isinstance(m, AIMessage) and not m.tool_calls
        ]
        turn = answers[-1] + 1 if answers else None
        ended_on_tools = []
        for i, m in enumerate(flat[:last]):
            if isinstance(m, AIMessage) and m.tool_calls and (turn is None or i >= turn):
                after = i + 1
                while after < last and isinstance(flat[after], ToolMessage):
                    after += 1
                if after > i + 1 and isinstance(flat[after], HumanMessage):
                    ids = {str(call.get("id")) for call in m.tool_calls}
                    ended_on_tools.append((after, ids))
        self._model_start(
            run_id,
            parent_run_id,
            serialized,
            kwargs,
            [message_text(m) for m in flat],
            turn,
            ended_on_tools,
        )

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_start(run_id, parent_run_id, serialized, kwargs, prompts)

    def _model_run(self, run_id: UUID) -> _ModelRun | None:
        """The model run ``run_id`` of a root run not yet ended (caller holds the lock)."""
        root = self._root_of.get(run_id)
        state = None if root is None else self._roots.get(root)
        return None if state is None else state.models.get(run_id)

    def on_llm_new_token(
        self, token: str | list[str | dict[str, Any]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        text = content_text(token, separator="")  # a text, or a chunk's content blocks
        if text:
            with self._lock:
                run = self._model_run(run_id)
                if run is not None:
                    run.streamed.append(text)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            run = self._model_run(run_id)
            if run is not None:
                run.ended = True
                candidates = response.generations[0] if response.generations else []
                run.answer = candidates[0].text if candidates else ""
                run.said = _collapsed(run.answer)
                if candidates and isinstance(candidates[0], ChatGeneration):
                    run.message = candidates[0].message
        self._ended(run_id)

    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        response: LLMResult | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            run = self._model_run(run_id)
            if run is not None:
                run.ended = True
                if isinstance(error, GeneratorExit):  # closed early: what it generated so far
                    given = response.generations if response is not None else []
                    run.stopped(given[0][0].text if given and given[0] else None)
        self._ended(run_id, error)


def _holds_a_search(parts: Sequence[str], state: _RootRun) -> bool:
    """Whether one of ``parts`` (messages, whitespace collapsed) holds every document of an
    ended search of the root run, in the search's order: that search was shown there."""
    for ended in state.ended:
        texts = state.retrievals[ended].texts()
        for part in parts:
            at = 0
            for text in texts:
                at = part.find(text, at)
                if at < 0:
                    break
                at += len(text)
            else:
                if texts:
                    return True
    return False


def _places(prompt: str, turn: int, located: Sequence[tuple[str, str]]) -> tuple[int, ...]:
    """Where ``prompt`` holds each of a list's documents (:func:`~fairrag_core.kit.place_in`),
    read from the current turn when it holds the list (:func:`~fairrag_core.kit.search_start`)."""
    start = search_start(prompt, turn, located)
    return tuple(place_in(prompt, text, first_line, start) for text, first_line in located)


@dataclass(frozen=True)
class _Final:
    """What a graph's root run returned to the user: its last message, or the structured
    response (``create_agent(response_format=...)``)."""

    message: BaseMessage | None = None
    structured: Any = None


def _final_output(outputs: Any) -> _Final | None:
    """The final answer in a root run's output when it is a graph's state (a mapping with
    ``messages``, as LangGraph's agents return), else None (a chain: its own rule)."""
    if not isinstance(outputs, Mapping):
        return None
    messages = outputs.get("messages")
    structured = outputs.get("structured_response")
    if structured is not None:
        return _Final(structured=structured)
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return None
    last = messages[-1] if messages else None
    return _Final(message=last if isinstance(last, BaseMessage) else None)


def _final_answer(
    final: _Final | None, done: Sequence[_ModelRun], returned: _Returned, paused: bool = False
) -> tuple[_ModelRun | None, Any]:
    """The model run that gave the final answer, and the answer (a message, a structured
    response, or a generation's text; None when the run gave none).

    With a graph's output: its structured response (given by the last model run) or its last
    message when that is a model's answer (an AI message without tool calls, or whose tool call
    is a structured answer; the model run is the one whose message it is, by id, else by
    text). Without (a graph whose state has no messages, tools called in a chain): the last
    model run whose output the root returned as its answer (:class:`_Returned`: a text, a
    message or a structured object under an answer key), else the last model run that
    answered without calling a tool, a grade in text set aside when another answered otherwise
    (:func:`_without_grades`). A run ``paused`` on its last message's tool calls (a human to
    approve them: the tools never ran) gave no answer, whatever their arguments hold.
    """
    if final is None:
        given = [run for run in done if returned.holds(run)]
        if given:
            run = given[-1]
            return run, run.message if run.message is not None else run.answer
        joined = returned.joined(done)
        if joined is not None:  # several branches' answers joined: no one model run gave it
            return None, joined
        changed = [
            (run, text)
            for run in done
            if (text := returned.changed(run)) is not None and not is_verdict(run.said)
        ]
        if changed:  # a later node changed the one answer: the text the user received, of the
            # run whose answer it holds (a wrapper added) before one that quotes it (a memory
            # or a critic run after it), the run that gave the most of it
            inside = [
                (run, text)
                for run, text in changed
                if (run.said or "").casefold() in _collapsed(text).casefold()
            ]
            return max(inside or changed, key=lambda pair: (len(pair[0].said or ""), pair[0].order))
        answered = _without_grades([run for run in done if not _calls_tools(run.message)])
        if not answered:
            return None, None
        run = answered[-1]
        return run, run.message if run.message is not None else run.answer
    if final.structured is not None:
        return (done[-1] if done else None), final.structured
    message = final.message
    if not isinstance(message, AIMessage):
        return None, None  # the run ended on a tool's result or a human turn: no answer
    if message.tool_calls and (paused or read_answer(message, source_id_base=0)[1] != "tool_call"):
        return None, None  # it ended asking for a tool (or paused before the tool ran)
    said = _collapsed(message_text(message))
    by_id = [run for run in done if run.message is not None and run.message.id == message.id]
    by_text = [run for run in done if run.said == said]
    # a model's answer a later step re-emitted changed: with more (a footer, a wrapper),
    # shortened (its first lines) or re-cased; never a grader's "no" inside "cannot"
    derived = [run for run in done if _derived(run, said) and not _calls_tools(run.message)]
    found = by_id or by_text
    if not found and derived:  # the run that gave the most of it
        found = [max(derived, key=lambda run: (len(run.said or ""), run.order))]
    if not found:
        # no model run of the root gave it: a middleware's own message (a call limit's "end"),
        # a node's canned reply: no model's answer (``answer_status``: ``not_from_a_model``)
        return None, None
    return found[-1], message


MAX_PAUSED = 10_000
"""Runs paused at a LangGraph ``interrupt()`` a handler holds for their resume; past it the
oldest is written as interrupted."""
PAUSED_SECONDS = 3600.0
"""How long a paused run is held for its resume: one paused longer is written as interrupted
(checked whenever a handler holds another run, and at exit)."""
_PAUSING: dict[int, FairnessCallbackHandler] = {}
"""The handlers holding paused runs, held strongly (a handler made per request and dropped
still writes them): at exit, or once they are older than :data:`PAUSED_SECONDS`."""
_PAUSING_LOCK = threading.Lock()
_SWEPT = [0.0]
"""When (``time.monotonic()``) paused runs were last checked for age."""


def _holding(handler: FairnessCallbackHandler, holds: bool) -> None:
    with _PAUSING_LOCK:
        if holds:
            _PAUSING[id(handler)] = handler
        else:
            _PAUSING.pop(id(handler), None)


def _write_expired(every: float = 60.0) -> None:
    """Write the runs every handler has held paused for :data:`PAUSED_SECONDS` or more, at
    most once per ``every`` seconds."""
    now = time.monotonic()
    with _PAUSING_LOCK:
        if now - _SWEPT[0] < every:
            return
        _SWEPT[0] = now
        handlers = list(_PAUSING.values())
    for handler in handlers:
        handler.write_interrupted(older_than=PAUSED_SECONDS)


@atexit.register
def _write_interrupted_at_exit() -> None:
    with _PAUSING_LOCK:
        handlers = list(_PAUSING.values())
    for handler in handlers:
        handler.write_interrupted()


RETRY_TAG = "retry:attempt:"
"""The tag LangChain's ``RunnableRetry`` gives each attempt after the first."""


def _failed(error: BaseException | None) -> bool:
    """Whether a root run's ``error`` means the user received no answer: any error but
    ``GeneratorExit`` (a consumer that stopped reading a stream, having read what it wanted)."""
    return error is not None and not isinstance(error, GeneratorExit)


def _thread_of(metadata: Mapping[str, Any]) -> str | None:
    """The LangGraph thread a run belongs to (its metadata's ``thread_id``), or None."""
    thread = metadata.get("thread_id")
    return None if thread is None else str(thread)


def _interrupts(error: BaseException) -> bool:
    """Whether ``error`` is LangGraph's ``GraphInterrupt`` (or a subclass): a paused graph."""
    return any(
        kind.__name__ == "GraphInterrupt" and kind.__module__.startswith("langgraph")
        for kind in type(error).__mro__
    )


def _is_command(inputs: Any) -> bool:
    """Whether a run's input is a LangGraph ``Command`` (``Command(resume=...)``)."""
    kind = type(inputs)
    return kind.__name__ == "Command" and kind.__module__.startswith("langgraph")


INTERRUPT_KEY = "__interrupt__"
"""The key of a LangGraph run's output that holds the interrupts it paused at."""


def _answers(message: BaseMessage | None) -> bool:
    """Whether a graph's last message reads as an answer: an AI message without tool calls."""
    return isinstance(message, AIMessage) and not message.tool_calls


DERIVED_CHARACTERS = 20
"""The least text a model's answer and a last message must share (one holding the other) for
the message to be that answer changed by a later step: a grader's one-word verdict inside a
canned reply is no answer."""


def _derived(run: _ModelRun, said: str) -> bool:
    """Whether the last message ``said`` (whitespace collapsed) is ``run``'s answer as a later
    step changed it: one holds the other, ignoring case, and the shorter is at least
    :data:`DERIVED_CHARACTERS` long (a footer or a wrapper added, lines cut, re-cased)."""
    answer = (run.said or "").casefold()
    final = said.casefold()
    shorter = min(len(answer), len(final))
    return shorter >= DERIVED_CHARACTERS and (answer in final or final in answer)


def _calls_tools(message: BaseMessage | None) -> bool:
    return isinstance(message, AIMessage) and bool(message.tool_calls)


Numbers = list[tuple[int | None, tuple[int, ...]]]
"""Per shown document: the entry number the model saw it under (None: its place in the list
shown) and the other numbers later searches showed it under."""


def _numbered(
    searches: Sequence[tuple[_Retrieval, Sequence[Document]]],
) -> tuple[list[Document], Numbers | None]:
    """The searches' documents (each search's as the prompt held them) with a document shown
    again (same id and text) kept at its first place, and the entry numbers the model saw:
    a numbered tool's search (:attr:`_Retrieval.numbered`) shows each document under its place
    in that search's list, so two searches both show a ``[1]``; the copies' numbers go with
    the document kept (docs/SPEC.md, "Records" → Agents and graphs). None when they number
    the documents as the merged list does (no numbered search, or one whose labels are the
    places)."""
    shown: list[Document] = []
    labels: list[int | None] = []
    for search, documents in searches:
        places: dict[int, list[int]] = {}  # one object listed twice: each label, in order
        if search.numbered:
            for n, d in enumerate(search.documents or [], start=1):
                places.setdefault(id(d), []).append(n)
        taken: dict[int, int] = {}
        for document in documents:
            own = places.get(id(document), [])
            count = taken[id(document)] = taken.get(id(document), -1) + 1
            shown.append(document)
            labels.append(own[count] if count < len(own) else None)
    kept, also = shown_once([(d.id, d.page_content) for d in shown], labels)
    numbers = [(labels[index], more) for index, more in zip(kept, also, strict=True)]
    documents = [shown[index] for index in kept]
    if all(label in (None, place) and not more for place, (label, more) in enumerate(numbers, 1)):
        return documents, None
    return documents, numbers


_QUESTION_KEYS = ("question", "input", "query")
"""The fields a chain's or graph's input names its question by (LangChain's conventions)."""


def _question_of(inputs: Any) -> str | None:
    """The user's question of a run: the last human message of an input holding messages;
    else the input when it is text, or its ``question``, ``input`` or ``query`` text."""
    if isinstance(inputs, str):
        return inputs
    messages = inputs.get("messages") if isinstance(inputs, Mapping) else None
    if messages is None and isinstance(inputs, Mapping):
        return next((inputs[k] for k in _QUESTION_KEYS if isinstance(inputs.get(k), str)), None)
    if isinstance(messages, str):  # {"messages": "..."}: one human message
        return messages
    if isinstance(messages, (BaseMessage, Mapping)):  # one message, not in a list
        messages = [messages]
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return None
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message_text(message) or None  # an image alone: no question text
        if isinstance(message, tuple) and len(message) == 2 and message[0] in ("user", "human"):
            return content_text(message[1]) or None
        if isinstance(message, Mapping) and (
            message.get("role") in ("user", "human") or message.get("type") == "human"
        ):
            return content_text(message.get("content")) or None
    return None


_LINKS = {True: "content", False: "run_tree"}
"""``answer_link`` of a record: how its answer's model run was linked to the retrieval."""


def _answer_of(
    retrieval: _Retrieval, returned: _Returned
) -> tuple[_ModelRun | None, list[_ModelRun]]:
    """The model run whose output is the record's answer, and every model run on the context,
    the answer's first.

    The model runs on a context are those whose prompt held it (every shown document's text),
    or, when none did (an empty list, a prompt that shortens the documents), those the run
    tree linked to it; of them, only those that ended with an output, in start order. The
    answer is the one the root run returned (:func:`_chosen`).
    """
    done = [run for run in retrieval.model_runs if run.answer is not None]
    runs = [run for run in done if run.by_content] or done
    runs.sort(key=lambda run: run.order)
    if not runs:
        return None, []
    answer = _chosen(runs, returned)
    if answer is None:  # only graders or routers read the context
        return None, runs
    return answer, [answer, *(run for run in runs if run is not answer)]


def _chosen(runs: Sequence[_ModelRun], returned: _Returned) -> _ModelRun | None:
    """Of model runs on one context (in start order, at least one), the answer the user
    receives (docs/SPEC.md "Which answer is recorded"): the first whose output the root run
    returned as its answer (:class:`_Returned`), else the first to start that did not only
    grade or route (a structured one, ``{"binary_score": "no"}``: a tool call that is a
    structured answer is an answer), a grade in text ("no") set aside when another run
    answered otherwise (:func:`_without_grades`), else none."""
    given = [run for run in runs if returned.holds(run)]
    if given:
        return given[0]
    answering = [run for run in runs if not _only_calls_tools(run.message)]
    return next(iter(_without_grades(answering)), None)


def _without_grades(runs: Sequence[_ModelRun]) -> list[_ModelRun]:
    """``runs`` without those whose output is a grade in text (:func:`is_verdict`: a grader
    that read the context before or after the generator) when another of them answered
    otherwise; all of them when none did (a "Yes." to a yes-or-no question is kept)."""
    answers = [run for run in runs if not is_verdict(run.answer)]
    return answers or list(runs)


def _only_calls_tools(message: BaseMessage | None) -> bool:
    """A model's message that calls tools and is no structured answer (a grader's or a
    router's structured output)."""
    return _calls_tools(message) and read_answer(message, source_id_base=0)[1] != "tool_call"


def _as_held(run: _ModelRun | None, retrieval: _Retrieval) -> list[Document] | None:
    """The retrieval's documents as the model run's prompt held them (docs/SPEC.md "Which
    list is audited"): the documents whose whole text it holds, in the order it holds them,
    when it holds at least one, each at a place of its own, and nothing of the others (not
    even their first line); else the retrieval's list (a prompt that holds every document in
    the list's order, or one whose reading would be a guess)."""
    documents = retrieval.documents
    places = None if run is None else run.places.get(retrieval.run_id)
    if documents is None or not places:
        return documents
    order = held_order(places, [len(text) for text, _ in retrieval.located()])
    return documents if order is None else [documents[index] for index in order]


ANSWER_KEYS = ("answer", "generation", "response", "output", "result", "final_answer")
"""The fields of a root run's output (a graph's state, a chain's dict) that hold the answer
the user receives, by LangChain's and LangGraph's conventions (``create_retrieval_chain``'s
``answer``, the RAG tutorials' ``answer`` and ``generation``)."""


@dataclass(frozen=True)
class _Returned:
    """What a root run returned as its answer: its output when that is a text or a message,
    else the texts (whitespace collapsed) and message ids in its :data:`ANSWER_KEYS` fields."""

    texts: frozenset[str] = frozenset()
    ids: frozenset[str] = frozenset()
    objects: frozenset[str] = frozenset()
    """Structured answers (a pydantic object or a mapping under an answer key), as
    :func:`_canonical` JSON: a model run whose tool call's arguments are one gave it."""
    written: tuple[str, ...] = ()
    """The texts as returned (line breaks kept), for :meth:`joined`."""

    @classmethod
    def of(cls, outputs: Any) -> _Returned:
        """Read ``outputs``: a text or a message, or a mapping's :data:`ANSWER_KEYS` fields,
        each a text, a message or a structured object (nothing for any other output)."""
        if isinstance(outputs, Mapping):
            values = [outputs.get(key) for key in ANSWER_KEYS]
        else:
            values = [outputs]
        texts: set[str] = set()
        ids: set[str] = set()
        objects: set[str] = set()
        written: list[str] = []
        for value in values:
            if isinstance(value, str):
                texts.add(_collapsed(value))
                written.append(value)
            elif isinstance(value, BaseMessage):
                if value.id is not None:
                    ids.add(value.id)
                texts.add(_collapsed(message_text(value)))
            elif isinstance(value, (BaseModel, Mapping)):
                canonical = _canonical(value)
                if canonical is not None:
                    objects.add(canonical)
        texts.discard("")
        return cls(frozenset(texts), frozenset(ids), frozenset(objects), tuple(written))

    def joined(self, done: Sequence[_ModelRun]) -> str | None:
        """A text the root returned that joins the answers of two or more of its model runs
        (a map-reduce whose branches each answered, their answers joined by code), as
        returned; None when there is none."""
        answers = [  # a grade ("yes", "Score: 4") is no branch's answer
            run.said
            for run in done
            if run.said and not _calls_tools(run.message) and not is_verdict(run.said)
        ]
        for text in self.written:
            said = _collapsed(text)
            if sum(answer in said for answer in answers) >= 2:
                return text
        return None

    def changed(self, run: _ModelRun) -> str | None:
        """A text the root returned under an answer key that is this model run's answer as a
        later node changed it (:func:`_derived`: a wrapper or a footer added, lines cut), as
        returned; None when there is none (a graph without messages whose last node polishes
        the answer: the user receives the polished text)."""
        if not run.said or _calls_tools(run.message):
            return None
        return next((text for text in self.written if _derived(run, _collapsed(text))), None)

    def holds(self, run: _ModelRun) -> bool:
        """Whether the root returned this model run's output as its answer."""
        message = run.message
        if message is not None and message.id is not None and message.id in self.ids:
            return True
        if self.objects and isinstance(message, AIMessage):
            for call in message.tool_calls:
                if _canonical(call.get("args")) in self.objects:
                    return True
        return bool(run.said) and run.said in self.texts


def _canonical(value: Any) -> str | None:
    """A structured answer as sorted, compact JSON (a pydantic object by its ``model_dump``),
    None when it is not one JSON can write."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return None


def _text_and_first_line(document: Document) -> tuple[str, str]:
    """A document's text and its first non-blank line, whitespace collapsed."""
    return located(document.page_content if isinstance(document.page_content, str) else "")


_collapsed = collapsed


def _document_texts(documents: list[Document]) -> tuple[str, ...]:
    """The texts a prompt must hold to hold these documents (blank ones cannot be found)."""
    texts = (_collapsed(d.page_content) for d in documents if isinstance(d.page_content, str))
    return tuple(text for text in texts if text)
