"""An instrumentation event handler that writes one fairness record per LlamaIndex query.

The numbers come from :class:`fairrag_core.FairnessAuditor`; this module only finds, for each
query, which nodes the :class:`~fairrag_llamaindex.FairRerankPostprocessor` kept and what the
answer said, and turns them into the auditor's inputs.
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.instrumentation import Dispatcher, get_dispatcher
from llama_index.core.instrumentation.event_handlers.base import BaseEventHandler
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.instrumentation.events.query import QueryEndEvent, QueryStartEvent
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.instrumentation.events.span import SpanDropEvent
from llama_index.core.instrumentation.span import BaseSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from fairrag_core import FairnessAuditor, JsonLinesLog, Target, group_labels
from fairrag_core.citations import ContextDocument
from fairrag_core.exposure import ExposureModel

from .postprocessor import MODEL_NAME_PREFIX, FairRerankPostprocessor

__all__ = ["FairnessEventHandler"]

logger = logging.getLogger(__name__)

_TITLE_LINE = re.compile(r"^\s*Title:[ \t]*(\S.*?)\s*$", re.MULTILINE)


class _SpanTree(BaseSpanHandler[BaseSpan]):
    """Keeps the parent of every open span, so an event can be traced to its query.

    Only open spans are kept (closed and dropped ones are forgotten), and that is enough: when
    the postprocessor emits its events, every span enclosing it is still open.
    """

    def new_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        parent_span_id: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> BaseSpan:
        return BaseSpan(id_=id_, parent_id=parent_span_id)

    def prepare_to_exit_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> BaseSpan | None:
        return self.open_spans.get(id_)

    def prepare_to_drop_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> BaseSpan | None:
        return self.open_spans.get(id_)

    def ancestors(self, span_id: str | None):
        """``span_id`` and its open ancestors, innermost first."""
        seen: set[str] = set()
        while span_id is not None and span_id not in seen:
            yield span_id
            seen.add(span_id)
            span = self.open_spans.get(span_id)
            span_id = None if span is None else span.parent_id

    @classmethod
    def class_name(cls) -> str:
        return "FairRAGSpanTree"


@dataclass
class _Rerank:
    """What one FairRerankPostprocessor call showed."""

    query: str | None
    ranker: str
    nodes: list[NodeWithScore] = field(default_factory=list)


@dataclass
class _Query:
    """A query in flight: its text and the fair re-rankings made inside it so far."""

    query: str | None
    reranks: list[_Rerank] = field(default_factory=list)


class FairnessEventHandler(BaseEventHandler):
    """Records, per query, the fairness of what was retrieved and of what the answer cited.

    One record (a JSON-ready dict) per query, kept in :attr:`records` and, with ``log_path``,
    appended as one JSON line to that file (:class:`fairrag_core.JsonLinesLog`; safe under
    concurrent writers, NaN written as ``null``). A record holds:

    - ``query``, ``query_id`` (the query's span id), ``ranker``, ``node_ids`` and ``titles``: the
      nodes the :class:`FairRerankPostprocessor` kept, in rank order;
    - from :meth:`FairnessAuditor.retrieval`: ``groups`` (in rank order), ``exposure_share`` of
      the protected group and ``exposure_disparity``;
    - ``answer`` and ``follows_citation_format``: whether the answer has at least one bullet
      line (docs/SPEC.md, "Citations"). Only then are the generation metrics of
      :meth:`FairnessAuditor.generation` added: ``generation_parity``, ``fairness_gap``,
      ``fairness_gap_magnitude``, ``groundedness`` and the parsed citations. An answer without
      any bullet (prose, an echo of the prompt, a streamed answer not read yet) gets none of
      them: they are missing, never 0, and :func:`fairrag_core.summarize_records` counts them
      under ``n_nan``.

    The answer is grounded in the response's ``source_nodes`` (what the LLM was shown): each
    node's title is ``metadata[title_key]``, else the ``Title:`` line of its text; a node with
    neither cannot be cited. Groups are ``metadata[group_key]`` via
    :func:`fairrag_core.group_labels`.

    **Attributing events to queries.** Call :meth:`attach` (default: the root dispatcher), which
    registers this handler *and* a span handler that keeps the parent of every open span. Every
    instrumentation event carries the id of the span it was emitted in. A query is the span in
    which a ``QueryStartEvent`` was emitted; the postprocessor's ``ReRankStartEvent`` /
    ``ReRankEndEvent`` pair (matched on their shared span id, and recognised by the ``fairrag:``
    model name) is assigned to the innermost enclosing query span, found by walking up the span
    tree; the ``QueryEndEvent`` of that span closes the record. Span ids are carried by a
    context variable that asyncio tasks and LlamaIndex threads copy, so concurrent ``aquery``
    calls, and queries in several threads, never mix. A re-ranking outside any query (a direct
    ``postprocess_nodes`` call) is recorded on its own, with ``query_id`` None and no answer. A
    query that fails (its span is dropped) is still recorded, with ``error`` and the retrieval
    metrics of what it had re-ranked, and no answer. When a query holds several fair
    re-rankings, the last one (the closest to generation) is recorded, ``n_reranks`` says how
    many there were.

    With ``record_queries_without_reranker`` (default True), a query in which no fair
    re-ranking happened is recorded too, from its response's ``source_nodes`` with
    ``ranker: None``: the baseline of a plain query engine.
    """

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
        default=None, description="File the records are appended to as JSON lines (optional)."
    )
    record_queries_without_reranker: bool = Field(
        default=True,
        description="Also record queries with no fair re-ranking, from their source nodes.",
    )

    _auditor: FairnessAuditor = PrivateAttr()
    _log: JsonLinesLog | None = PrivateAttr(default=None)
    _spans: _SpanTree = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _records: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _queries: dict[str, _Query] = PrivateAttr(default_factory=dict)
    _open_reranks: dict[str, _Rerank] = PrivateAttr(default_factory=dict)
    _dispatchers: list[Dispatcher] = PrivateAttr(default_factory=list)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._auditor = FairnessAuditor.create(
            protected=self.protected,
            target_share=self.target_share,
            target=self.target,
            exposure=self.exposure,
        )
        if self.log_path is not None:
            self._log = JsonLinesLog(self.log_path)
        self._spans = _SpanTree(open_spans={}, completed_spans=[], dropped_spans=[])

    @classmethod
    def class_name(cls) -> str:
        return "FairnessEventHandler"

    @classmethod
    def from_postprocessor(
        cls, postprocessor: FairRerankPostprocessor, **fields: Any
    ) -> FairnessEventHandler:
        """A handler auditing against the postprocessor's own group key, target and exposure."""
        ranker = postprocessor.core_ranker
        defaults: dict[str, Any] = {
            "group_key": postprocessor.group_key,
            "exposure": ranker.exposure,
        }
        if ranker.target is not None:
            defaults["target"] = ranker.target
        return cls(**{**defaults, **fields})

    # -- registration -----------------------------------------------------------------------

    def attach(self, dispatcher: Dispatcher | None = None) -> FairnessEventHandler:
        """Register on ``dispatcher`` (default: the root one, which sees every LlamaIndex event).

        Adds this event handler and the span handler that links events to their query.
        Idempotent; returns ``self``, so ``with FairnessEventHandler(...).attach():`` works.
        """
        dispatcher = dispatcher or get_dispatcher()
        if not any(h is self for h in dispatcher.event_handlers):
            dispatcher.add_event_handler(self)
        if not any(h is self._spans for h in dispatcher.span_handlers):
            dispatcher.add_span_handler(self._spans)
        if not any(d is dispatcher for d in self._dispatchers):
            self._dispatchers.append(dispatcher)
        return self

    def detach(self) -> None:
        """Unregister from every dispatcher :meth:`attach` registered on."""
        for dispatcher in self._dispatchers:
            dispatcher.event_handlers = [h for h in dispatcher.event_handlers if h is not self]
            dispatcher.span_handlers = [h for h in dispatcher.span_handlers if h is not self._spans]
        self._dispatchers.clear()

    def __enter__(self) -> FairnessEventHandler:
        return self.attach() if not self._dispatchers else self

    def __exit__(self, *exc_info: object) -> None:
        self.detach()

    @property
    def span_handler(self) -> BaseSpanHandler:
        """The span handler :meth:`attach` registers (for registering it by hand)."""
        return self._spans

    @property
    def auditor(self) -> FairnessAuditor:
        """The core auditor computing every metric."""
        return self._auditor

    @property
    def records(self) -> list[dict[str, Any]]:
        """The records so far, in the order the queries ended (a copy)."""
        with self._lock:
            return list(self._records)

    # -- events -----------------------------------------------------------------------------

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        # The dispatcher swallows handler exceptions silently; log them instead.
        try:
            self._handle(event)
        except Exception:
            logger.exception("FairnessEventHandler failed on %s", type(event).__name__)

    def _handle(self, event: BaseEvent) -> None:
        span_id = event.span_id
        if isinstance(event, QueryStartEvent):
            with self._lock:
                self._queries[span_id] = _Query(_query_text(event.query))
        elif isinstance(event, ReRankStartEvent):
            if event.model_name.startswith(MODEL_NAME_PREFIX):
                ranker = event.model_name[len(MODEL_NAME_PREFIX) :]
                with self._lock:
                    self._open_reranks[span_id] = _Rerank(_query_text(event.query), ranker)
        elif isinstance(event, ReRankEndEvent):
            with self._lock:
                rerank = self._open_reranks.pop(span_id, None)
                if rerank is None:  # another reranker's events
                    return
                rerank.nodes = list(event.nodes)
                owner = next(
                    (s for s in self._spans.ancestors(span_id) if s in self._queries), None
                )
                if owner is not None:
                    self._queries[owner].reranks.append(rerank)
            if owner is None:
                self._finish(None, _Query(rerank.query, [rerank]), answer=None, sources=None)
        elif isinstance(event, QueryEndEvent):
            with self._lock:
                query = self._queries.pop(span_id, None)
            if query is not None:
                response = event.response
                answer = getattr(response, "response", None)
                sources = getattr(response, "source_nodes", None)
                self._finish(span_id, query, answer if isinstance(answer, str) else None, sources)
        elif isinstance(event, SpanDropEvent):
            with self._lock:
                query = self._queries.pop(span_id, None)
                self._open_reranks.pop(span_id, None)
            if query is not None:  # the query failed: recorded with its error, not dropped
                self._finish(span_id, query, None, None, error=event.err_str)

    def _finish(
        self,
        query_id: str | None,
        query: _Query,
        answer: str | None,
        sources: Sequence[NodeWithScore] | None,
        error: str | None = None,
    ) -> None:
        if query.reranks:
            shown, ranker = query.reranks[-1].nodes, query.reranks[-1].ranker
        elif self.record_queries_without_reranker and (sources is not None or error is not None):
            shown, ranker = list(sources or ()), None
        else:
            return
        record: dict[str, Any] = {
            "query": query.query,
            "query_id": query_id,
            "ranker": ranker,
            "n_reranks": len(query.reranks),
            "node_ids": [n.node.node_id for n in shown],
            "titles": [self._title(n) for n in shown],
        }
        if error is not None:
            record["error"] = error
        if shown or error is None:
            try:
                record.update(self._audit(shown, answer, sources))
            except (KeyError, ValueError, TypeError) as exc:
                record["error"] = f"{type(exc).__name__}: {exc}"
                logger.warning("FairnessEventHandler could not audit %r: %s", query.query, exc)
        with self._lock:  # the file keeps the order of the in-memory records
            self._records.append(record)
            if self._log is not None:
                self._log.append(record)

    def _audit(
        self,
        shown: Sequence[NodeWithScore],
        answer: str | None,
        sources: Sequence[NodeWithScore] | None,
    ) -> dict[str, Any]:
        groups = group_labels(
            [n.node.metadata for n in shown], self.group_key, require_present=False
        )
        record = self._auditor.retrieval(groups)
        record["answer"] = answer
        if answer is None:
            record["follows_citation_format"] = False
            return record
        context = self._context(shown if sources is None else sources)
        record.update(
            self._auditor.generation(
                answer, context, record.get("exposure_share"), require_format=True
            )
        )
        return record

    def _context(self, nodes: Sequence[NodeWithScore]) -> list[ContextDocument]:
        """The nodes the LLM saw, as the core's ContextDocument (untitled nodes left out)."""
        groups = group_labels(
            [n.node.metadata for n in nodes], self.group_key, require_present=False
        )
        context = []
        for node, group in zip(nodes, groups, strict=True):
            title = self._title(node)
            if title is not None:
                text = node.node.get_content(metadata_mode=MetadataMode.NONE)
                context.append(ContextDocument(title, group=group, text=text))
        return context

    def _title(self, node: NodeWithScore) -> str | None:
        """``metadata[title_key]``, else the ``Title:`` line of the text, else None."""
        title = node.node.metadata.get(self.title_key)
        if isinstance(title, str) and title.strip():
            return title
        match = _TITLE_LINE.search(node.node.get_content(metadata_mode=MetadataMode.NONE))
        return match.group(1) if match else None


def _query_text(query: str | QueryBundle | None) -> str | None:
    if query is None or isinstance(query, str):
        return query
    return query.query_str
