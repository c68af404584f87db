"""The open instrumentation spans, so that a re-ranking or an event can be traced to the engine
that runs it: one span handler per process, on LlamaIndex's root dispatcher.

Every LlamaIndex component method runs in a span that knows its ``instance`` and its parent
span; span ids travel in a context variable that asyncio tasks and LlamaIndex's worker threads
copy. :data:`SPANS` keeps the open spans only (a span is forgotten when it exits or is dropped),
and tells its listeners (the fairness event handlers) when a span ends.

It also keeps, for each open span, what the retrievals that finished inside it returned
(:class:`Retrieval`: the retriever and each node's id and score as it returned them), so that a
postprocessor can tell which store's scores its nodes still carry behind a retriever that
wraps another one; and, in :data:`ENTERED_HANDLERS`, the fairness event handlers whose ``with``
block each span was opened in (their scope).
"""

from __future__ import annotations

import contextvars
import inspect
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.span import BaseSpan, active_span_id
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

__all__ = [
    "ENTERED_HANDLERS",
    "QUESTION_METHODS",
    "RETRIEVAL_METHODS",
    "SPANS",
    "OpenSpan",
    "Retrieval",
    "SpanTree",
    "current_span_id",
    "ensure_registered",
    "is_workflow_run",
]


@dataclass(frozen=True)
class OpenSpan:
    """One open span: its id, its parent's id, the object whose method it runs, and the
    method's name (``"query"`` for ``RetrieverQueryEngine.query-<uuid>``)."""

    id_: str
    parent_id: str | None
    instance: Any
    method: str
    query: str | None = None
    """The question, for the methods that answer one (:data:`QUESTION_METHODS`)."""
    entered: tuple[Any, ...] = ()
    """The handlers whose ``with`` block the span was opened in (:data:`ENTERED_HANDLERS`)."""


@dataclass(frozen=True)
class Retrieval:
    """What one retriever call returned, as it returned it: ``(node_id, score)`` per node (the
    scores read when the call ended, before any later step could change them)."""

    retriever: Any
    scored: tuple[tuple[str, float | None], ...]


class SpanListener(Protocol):
    def span_ended(self, span: OpenSpan, result: Any, error: BaseException | None) -> None: ...


QUESTION_METHODS = frozenset({"query", "aquery", "chat", "achat", "stream_chat", "astream_chat"})
"""Engine methods that answer one question."""

RETRIEVAL_METHODS = frozenset({"retrieve", "aretrieve", "_retrieve", "_aretrieve"})
"""Retriever methods whose results :class:`SpanTree` keeps while their enclosing spans are open."""

ENTERED_HANDLERS: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "fairrag_entered_handlers", default=()
)
"""The fairness event handlers whose ``with`` block the current code runs in (asyncio tasks and
``contextvars.copy_context()`` carry it; a plain worker thread starts without any)."""

_QUESTION_ARGS = ("str_or_query_bundle", "message", "query_bundle", "query_str")


def _question(bound_args: inspect.BoundArguments) -> str | None:
    arguments = getattr(bound_args, "arguments", {})
    for name in _QUESTION_ARGS:
        value = arguments.get(name)
        if isinstance(value, str):
            return value
        if value is not None and isinstance(getattr(value, "query_str", None), str):
            return str(value.query_str)
    return None


_START_FIELDS = ("query", "query_str", "question", "user_msg", "input", "message")
"""The fields of a Workflow's ``StartEvent`` read as its question, in this order; then the
last user message of its ``chat_history``."""


def is_workflow_run(instance: Any, method: str) -> bool:
    """Whether a span runs a LlamaIndex Workflow (``<Workflow class>.run-<uuid>``): one question
    answered by the workflow's result (docs/SPEC.md, "Records" → LlamaIndex Workflows)."""
    return method == "run" and any(
        cls.__name__ == "Workflow" and cls.__module__.startswith(("workflows", "llama_index"))
        for cls in type(instance).__mro__
    )


def _start_question(bound_args: inspect.BoundArguments) -> str | None:
    """The question of a Workflow run: the first of :data:`_START_FIELDS` its start event
    carries as text (a QueryBundle's ``query_str`` too)."""
    event: Any = getattr(bound_args, "arguments", {}).get("start_event")
    for name in _START_FIELDS:
        try:
            value = event.get(name) if hasattr(event, "get") else getattr(event, name, None)
        except Exception:  # a custom start event whose get() wants more
            value = getattr(event, name, None)
        for text in (value, getattr(value, "query_str", None), getattr(value, "content", None)):
            if isinstance(text, str):  # text, a QueryBundle's query_str, a ChatMessage's content
                return text
    return _last_user_message(event)


def _last_user_message(event: Any) -> str | None:
    """The last user message of the start event's ``chat_history`` (an agent run given the
    conversation, its question last, and no ``user_msg``: a user trial found the tool's
    search string recorded as the question)."""
    try:
        history = event.get("chat_history") if hasattr(event, "get") else None
    except Exception:  # a custom start event whose get() wants more
        history = None
    history = history if history is not None else getattr(event, "chat_history", None)
    if not isinstance(history, (list, tuple)):
        return None
    for message in reversed(history):
        role = getattr(message, "role", None)
        if getattr(role, "value", role) == "user":
            content = getattr(message, "content", None)
            return content if isinstance(content, str) else None
    return None


def _method(span_id: str) -> str:
    name = span_id.rsplit("-", 5)[0] if span_id.count("-") >= 5 else span_id
    return name.rsplit(".", 1)[-1]


def _retrieval(instance: Any, method: str, result: Any) -> Retrieval | None:
    """The :class:`Retrieval` of a retriever call that returned a list of scored nodes."""
    if method not in RETRIEVAL_METHODS or not isinstance(result, list):
        return None
    scored = []
    for item in result:
        node = getattr(item, "node", None)
        node_id = getattr(node, "node_id", None)
        if not isinstance(node_id, str):
            return None
        score = getattr(item, "score", None)
        scored.append((node_id, None if score is None else float(score)))
    return Retrieval(instance, tuple(scored))


class _Book:
    """What a :class:`SpanTree` keeps, in a plain object: every span of the process passes
    through the tree, and reading a pydantic private attribute costs microseconds each time
    (the model's ``__getattr__``), so the tree reads this one object once per call."""

    __slots__ = ("finished", "guard", "listeners", "spans")

    def __init__(self) -> None:
        self.spans: dict[str, OpenSpan] = {}
        self.finished: dict[str, list[Retrieval]] = {}
        self.guard = threading.Lock()
        self.listeners: dict[int, weakref.ref] = {}


class SpanTree(BaseSpanHandler[BaseSpan]):
    """Keeps every open span's parent and instance; tells listeners when one ends."""

    _book: _Book = PrivateAttr(default_factory=_Book)

    @property
    def book(self) -> _Book:
        """The open spans, the retrievals finished inside them and the listeners."""
        return self.__pydantic_private__["_book"]  # type: ignore[index]  # set by pydantic

    @classmethod
    def class_name(cls) -> str:
        return "FairRAGSpanTree"

    # Every span of the process passes here: the three entry points the dispatcher calls keep
    # only this tree's own bookkeeping (no BaseSpan objects in the base class's open_spans).

    def span_enter(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        parent_id: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._open(id_, bound_args, instance, parent_id)

    def span_exit(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> None:
        self._end(id_, result, None, keep=True)

    def span_drop(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> None:
        self._end(id_, None, err)

    def _open(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None,
        parent_span_id: str | None,
    ) -> None:
        method = _method(id_)
        if method in QUESTION_METHODS:
            query = _question(bound_args)
        elif is_workflow_run(instance, method):
            query = _start_question(bound_args)
        else:
            query = None
        span = OpenSpan(id_, parent_span_id, instance, method, query, ENTERED_HANDLERS.get())
        book = self.book
        with book.guard:
            book.spans[id_] = span

    def new_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        parent_span_id: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> BaseSpan:
        self._open(id_, bound_args, instance, parent_span_id)
        return BaseSpan(id_=id_, parent_id=parent_span_id)

    def prepare_to_exit_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> BaseSpan | None:
        self._end(id_, result, None, keep=True)
        return self.open_spans.get(id_)

    def prepare_to_drop_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> BaseSpan | None:
        self._end(id_, None, err)
        return self.open_spans.get(id_)

    def _end(self, id_: str, result: Any, error: BaseException | None, keep: bool = False) -> None:
        book = self.book
        with book.guard:
            span = book.spans.pop(id_, None)
            finished = book.finished.pop(id_, [])
            refs = list(book.listeners.items()) if book.listeners else ()
        if span is None:
            return
        retrieval = _retrieval(span.instance, span.method, result) if keep else None
        if retrieval is not None:
            finished.append(retrieval)
        if finished and span.parent_id is not None:
            with book.guard:  # what finished inside a span stays known while its parent is open
                if span.parent_id in book.spans:
                    book.finished.setdefault(span.parent_id, []).extend(finished)
        for key, ref in refs:
            listener = ref()
            if listener is None:
                with book.guard:
                    book.listeners.pop(key, None)
            else:
                listener.span_ended(span, result, error)

    def add_listener(self, listener: SpanListener) -> None:
        """Call ``listener.span_ended(span, result, error)`` whenever a span ends (weakly held)."""
        book = self.book
        with book.guard:
            book.listeners[id(listener)] = weakref.ref(listener)

    def get(self, span_id: str | None) -> OpenSpan | None:
        """The open span ``span_id``, or None when it is not open (or unknown)."""
        if span_id is None:
            return None
        book = self.book
        with book.guard:
            return book.spans.get(span_id)

    def finished(self, span_id: str | None) -> list[Retrieval]:
        """The retrievals that finished inside the open span ``span_id`` and its open ancestors
        (the calls that ended while they stayed open), innermost span first."""
        found: list[Retrieval] = []
        book = self.book
        for span in self.ancestors(span_id):
            with book.guard:
                found.extend(book.finished.get(span.id_, ()))
        return found

    def ancestors(self, span_id: str | None) -> Iterator[OpenSpan]:
        """The open span ``span_id`` and its open ancestors, innermost first."""
        seen: set[str] = set()
        while span_id is not None and span_id not in seen:
            seen.add(span_id)
            span = self.get(span_id)
            if span is None:
                return
            yield span
            span_id = span.parent_id


SPANS = SpanTree()
"""The one span tree of this process (registered on the root dispatcher when first needed)."""


def ensure_registered() -> SpanTree:
    """Register :data:`SPANS` on LlamaIndex's root dispatcher unless it is there already."""
    root = get_dispatcher()
    if not any(handler is SPANS for handler in root.span_handlers):
        root.add_span_handler(SPANS)
    return SPANS


def current_span_id() -> str | None:
    """The id of the span the caller runs in (None outside any span)."""
    return active_span_id.get()
