"""Translation between LangChain ``Document`` lists and the core's plain values, shared by every
class of this package: placed copies out of a core :class:`~fairrag_core.Reranking`, the shown
list in for the record and the prompt. No rule is decided here: titles, context text, placement
metadata, provenance and records all come from :mod:`fairrag_core.kit`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from langchain_core.documents import Document

from fairrag_core import FairnessAuditor
from fairrag_core.citations import ContextDocument
from fairrag_core.kit import (
    LEDGER_PLACEMENT_KEYS,
    PLACEMENT_KEYS,
    Placed,
    ShownDocument,
    context_entry,
    document_title,
)
from fairrag_core.kit import shown_documents as kit_shown_documents
from fairrag_core.kit import shown_record as kit_shown_record

__all__ = [
    "PlacedDocument",
    "checked_documents",
    "checked_query",
    "context_documents",
    "context_entries",
    "placed_copies",
    "shown_documents",
    "shown_record",
    "title_of",
]


def checked_query(query: Any, owner: str) -> str:
    """``query`` when it is text, else a ``TypeError`` naming it (a dict or a list handed to
    ``invoke`` would otherwise fail inside the embedding model, naming nothing)."""
    if not isinstance(query, str):
        raise TypeError(
            f"{owner}: query must be a string (the text to search for), got "
            f"{type(query).__name__}; pass the question itself, e.g. retriever.invoke('...')"
        )
    return query


def checked_documents(documents: Any, owner: str) -> list[Document]:
    """``documents`` as a list when it is an iterable of LangChain ``Document`` objects, else
    a ``TypeError`` naming the argument (and the first entry that is not one)."""
    if isinstance(documents, (str, bytes, Mapping)) or not isinstance(documents, Iterable):
        raise TypeError(
            f"{owner}: documents must be a sequence of langchain_core Document objects, got "
            f"{type(documents).__name__}"
        )
    listed = list(documents)
    for index, document in enumerate(listed):
        if not isinstance(document, Document):
            raise TypeError(
                f"{owner}: documents[{index}] is a {type(document).__name__}, not a "
                "langchain_core Document"
            )
    return listed


def placed_copies(documents: Sequence[Document], placed: Placed) -> list[Document]:
    """New ``Document`` objects for the shown candidates, in fair-rank order, each with the
    new metadata dict the kit made for it (:func:`fairrag_core.kit.place`). The originals, and
    their metadata dicts, are never touched."""
    return [
        _placed_copy(documents[index], metadata)
        for index, metadata in zip(placed.indices, placed.metadatas, strict=True)
    ]


PLACED_EXTRA_KEYS = ("relevance_function", "score_source")
"""Metadata this package's components add beside the kit's placement keys."""
_PLACED_KEYS = frozenset((*PLACEMENT_KEYS, *LEDGER_PLACEMENT_KEYS, *PLACED_EXTRA_KEYS))


class PlacedDocument(Document):
    """A ``Document`` a fair ranking placed: copies of one document compare equal.

    Equality (``==``, what LangChain's ``MultiQueryRetriever`` de-duplicates its queries'
    union by) compares ``id``, ``page_content`` and the metadata without the placement keys
    (:data:`fairrag_core.kit.PLACEMENT_KEYS`, ``ledger_state``, ``relevance_function``,
    ``score_source``): the same document placed by two rankings is one document, and a
    document compares equal to the store's own object. It serialises as a plain ``Document``
    (``dumpd``/``loads`` give one back), in LangGraph's checkpoints too: its ``__class__`` is
    ``Document`` (``type()`` and ``isinstance`` still tell it apart), the name LangGraph's
    serializer writes and, with ``LANGGRAPH_STRICT_MSGPACK``, the only kind it loads back
    (a subclass loaded as a ``dict``, and was warned of in every graph keeping documents in
    its state). Pickling keeps the class.
    """

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return Document

    def __reduce__(self) -> tuple[Any, ...]:
        return (_placed_document, (self.id, self.page_content, self.metadata))

    @classmethod
    def lc_id(cls) -> list[str]:
        return Document.lc_id()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Document):
            return NotImplemented
        return (
            self.id == other.id
            and self.page_content == other.page_content
            and _unplaced(self.metadata) == _unplaced(other.metadata)
        )

    __hash__ = None  # type: ignore[assignment]  # as Document's: mutable, never hashed


def _placed_document(id: str | None, page_content: str, metadata: dict[str, Any]) -> Document:
    """A :class:`PlacedDocument` again (what pickling one calls)."""
    return PlacedDocument(id=id, page_content=page_content, metadata=metadata)


def _unplaced(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in metadata.items() if key not in _PLACED_KEYS}


def _placed_copy(original: Document, metadata: dict[str, Any]) -> Document:
    """A placed copy of ``original`` with ``metadata``: a :class:`PlacedDocument` when it is a
    plain ``Document`` (a subclass keeps its class, and its own equality)."""
    if type(original) in (Document, PlacedDocument):
        return PlacedDocument(id=original.id, page_content=original.page_content, metadata=metadata)
    return original.model_copy(update={"metadata": metadata})


def title_of(document: Document, title_key: str = "title") -> str | None:
    """The kit's title rule (:func:`fairrag_core.kit.document_title`) for a LangChain document."""
    return document_title(document.metadata, document.page_content, title_key)


def shown_documents(
    documents: Sequence[Document],
    group_key: str,
    title_key: str = "title",
    numbers: Sequence[tuple[int | None, tuple[int, ...]]] | None = None,
) -> list[ShownDocument]:
    """The shown list as the record needs it (:func:`fairrag_core.kit.shown_documents`), with
    the entry numbers the model saw each under (``numbers``: its own, None for its place, and
    those later searches showed it under; None: numbered as shown)."""
    shown = kit_shown_documents(
        [d.id for d in documents],
        [d.metadata for d in documents],
        [d.page_content for d in documents],
        group_key,
        title_key,
    )
    if numbers is None:
        return shown
    return [
        replace(document, number=number, also_numbered=also)
        for document, (number, also) in zip(shown, numbers, strict=True)
    ]


def context_documents(
    documents: Sequence[Document],
    groups: Sequence[Any] | None,
    title_key: str = "title",
) -> tuple[list[ContextDocument], list[int]]:
    """The core's view of the context, and where each came from (untitled documents, which
    cannot be cited, are left out)."""
    if groups is None:
        groups = [None] * len(documents)
    context: list[ContextDocument] = []
    origin: list[int] = []
    for index, (document, group) in enumerate(zip(documents, groups, strict=True)):
        title = title_of(document, title_key)
        if title is not None:
            context.append(
                ContextDocument(title, group=group, text=document.page_content, number=index + 1)
            )
            origin.append(index)
    return context, origin


def context_entries(documents: Sequence[Document], title_key: str = "title") -> list[str]:
    """What the LLM is shown for each document (:func:`fairrag_core.kit.context_entry`)."""
    return [
        context_entry(rank, title_of(document, title_key), document.page_content)
        for rank, document in enumerate(documents, start=1)
    ]


def shown_record(
    auditor: FairnessAuditor,
    documents: Sequence[Document] | None,
    group_key: str,
    title_key: str = "title",
    *,
    ranked: Sequence[Document] | None = None,
    ranking: Mapping[str, Any] | None = None,
    numbers: Sequence[tuple[int | None, tuple[int, ...]]] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """The record (:func:`fairrag_core.kit.shown_record`, the one builder) of a shown list and
    its run; ``fields`` are the run's other fields (``framework``: LangChain's own).
    ``documents`` None: the retrieval failed, nothing was shown (no metrics)."""
    shown = None if documents is None else shown_documents(documents, group_key, title_key, numbers)
    return kit_shown_record(
        auditor,
        source="langchain",
        shown=shown,
        metadatas=[d.metadata for d in documents or []],
        ranked=None if ranked is None else [d.metadata for d in ranked],
        ranking=ranking,
        **fields,
    )
