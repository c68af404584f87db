"""An answer as the record reads it, from whatever a LangChain model or graph returned: text,
or structured citations (tool-call arguments, a structured response, JSON content, provider
citation blocks) written as the same citations in text by
:mod:`fairrag_core.structured_citations` (docs/SPEC.md, "Citations" → Structured citations)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage

from fairrag_core.kit import entries_by_label
from fairrag_core.structured_citations import (
    Entry,
    StructuredAnswer,
    read_content_blocks,
    read_json_answer,
    read_span_citations,
    read_structured_answer,
    read_text_or_object,
    render_answer,
)

from ._documents import title_of

__all__ = ["answer_text", "message_text", "read_answer"]


def message_text(message: BaseMessage) -> str:
    """A message's text content (text blocks of a multi-part content joined)."""
    return content_text(message.content)


def content_text(content: Any, separator: str = "\n") -> str:
    """A message content's text: a string, or its text blocks joined by ``separator``
    (``[{"type": "text", "text": ...}]``, as chat UIs and the OpenAI format send a message; a
    streamed token's blocks are joined by ""); "" for content without text (None, bytes, an
    image alone)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence) or isinstance(content, (bytes, bytearray)):
        return ""
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return separator.join(parts)


def read_answer(value: Any, *, source_id_base: int) -> tuple[StructuredAnswer | None, str]:
    """The structured answer in ``value`` (a message, a text, or a structured output object),
    if any, and the form it came in: ``tool_call`` (an AI message's tool-call arguments, as
    ``with_structured_output`` and ``ToolStrategy`` make), ``content_blocks`` (provider
    citations), ``spans`` (``additional_kwargs["citations"]``), ``json`` (JSON content),
    ``structured_response`` (an object), else ``text``."""
    if not isinstance(value, BaseMessage):  # a text (JSON content) or an object
        return read_text_or_object(value, source_id_base=source_id_base)
    if isinstance(value, AIMessage):
        for call in value.tool_calls:
            found = read_structured_answer(call.get("args"), source_id_base=source_id_base)
            if found is not None:
                return found, "tool_call"
    if isinstance(value.content, list):
        found = read_content_blocks(value.content)
        if found is not None:
            return found, "content_blocks"
    text = message_text(value)
    spans = value.additional_kwargs.get("citations")
    if isinstance(spans, Sequence) and not isinstance(spans, (str, bytes)):
        found = read_span_citations(text, spans)
        if found is not None:
            return found, "spans"
    found = read_json_answer(text, source_id_base=source_id_base)
    return found, "json" if found is not None else "text"


def answer_text(
    value: Any,
    documents: Sequence[Document],
    *,
    source_id_base: int,
    title_key: str = "title",
    fallback: str | None = None,
    numbers: Sequence[tuple[int | None, tuple[int, ...]]] | None = None,
) -> tuple[str | None, str]:
    """The answer's text as the citation rules read it, against the shown ``documents``, and
    its form (:func:`read_answer`); ``fallback`` (the generation's text) when ``value`` holds
    no structured answer and is not a message. ``numbers``: the entry numbers the model saw
    the documents under (a numbered tool's searches), which its source ids then read
    (:func:`fairrag_core.kit.entries_by_label`)."""
    found, form = read_answer(value, source_id_base=source_id_base)
    if found is not None:
        titles = [title_of(d, title_key) for d in documents]
        entries: list[Entry] = list(titles)
        if numbers is not None:
            labels = [n if label is None else label for n, (label, _) in enumerate(numbers, 1)]
            entries = entries_by_label(titles, labels, [also for _, also in numbers])
        return render_answer(found, entries), form
    if isinstance(value, BaseMessage):
        return message_text(value), form
    return fallback, form
