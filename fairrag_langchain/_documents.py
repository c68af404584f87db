"""Translation between LangChain ``Document`` lists and the core's plain values, shared by every
class of this package: placed copies out of a core :class:`~fairrag_core.Reranking`, titles and
groups in for grounding and auditing. No fairness decision is taken here; the core takes them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from fairrag_core import FairnessAuditor, Reranking, group_labels
from fairrag_core.citations import ContextDocument

__all__ = [
    "context_documents",
    "document_title",
    "placed_copies",
    "retrieval_summary",
]

_TITLE_LINE = re.compile(r"^\s*Title:[ \t]*(\S.*?)\s*$", re.MULTILINE)


def placed_copies(
    documents: Sequence[Document],
    reranking: Reranking,
    extra: Mapping[str, Any] | None = None,
    *,
    with_score: bool = True,
) -> list[Document]:
    """New ``Document`` objects for the shown candidates, in fair-rank order.

    Each copy gets a new metadata dict: the original entries plus ``fair_rank``, ``pool_rank``,
    ``exposure_weight``, ``ranker`` (and ``relevance_score`` when ``with_score``) and ``extra``.
    The originals, and their metadata dicts, are never touched.
    """
    extra = dict(extra or {})
    copies = []
    for placement in reranking.placements:
        original = documents[placement.pool_index]
        metadata = dict(original.metadata)
        if with_score:
            metadata["relevance_score"] = placement.score
        metadata["fair_rank"] = placement.fair_rank
        metadata["pool_rank"] = placement.pool_rank
        metadata["exposure_weight"] = placement.exposure_weight
        metadata["ranker"] = reranking.ranker
        metadata.update(extra)
        copies.append(original.model_copy(update={"metadata": metadata}))
    return copies


def document_title(document: Document, title_key: str = "title") -> str | None:
    """The document's title: ``metadata[title_key]``, else its ``Title:`` line, else None.

    The study's documents carry both (SPEC.md: the text starts with ``Title: <doc_title>``); the
    text is only read for documents whose metadata has no title.
    """
    title = document.metadata.get(title_key)
    if isinstance(title, str) and title.strip():
        return title
    match = _TITLE_LINE.search(document.page_content)
    return match.group(1) if match else None


def context_documents(
    documents: Sequence[Document],
    groups: Sequence[Any] | None,
    title_key: str = "title",
) -> tuple[list[ContextDocument], list[int]]:
    """The core's view of the context shown to the generator, and where each came from.

    Returns the :class:`~fairrag_core.citations.ContextDocument` list and, for each, its index in
    ``documents``; documents without a title cannot be cited and are left out.
    """
    if groups is None:
        groups = [None] * len(documents)
    context: list[ContextDocument] = []
    origin: list[int] = []
    for index, (document, group) in enumerate(zip(documents, groups, strict=True)):
        title = document_title(document, title_key)
        if title is not None:
            context.append(ContextDocument(title, group=group, text=document.page_content))
            origin.append(index)
    return context, origin


def retrieval_summary(
    auditor: FairnessAuditor,
    documents: Sequence[Document],
    group_key: str,
    title_key: str = "title",
) -> tuple[dict[str, Any], list[Any]]:
    """The retrieval record of a shown list (rank order) and its group labels.

    The record is the core auditor's (groups, exposure share, exposure disparity) plus the
    titles shown, the ranker named by the documents' ``ranker`` metadata (None when the list did
    not come from a fair re-ranker) and the relevance function the retriever stated.
    Documents without ``group_key`` are of unknown group, even when none of them has it.
    """
    groups = group_labels(
        [document.metadata for document in documents], group_key, require_present=False
    )
    record: dict[str, Any] = {
        "ranker": _first_metadata(documents, "ranker"),
        "titles": [document_title(document, title_key) for document in documents],
        **auditor.retrieval(groups),
    }
    relevance_function = _first_metadata(documents, "relevance_function")
    if relevance_function is not None:
        record["relevance_function"] = relevance_function
    return record, groups


def _first_metadata(documents: Sequence[Document], key: str) -> Any:
    for document in documents:
        value = document.metadata.get(key)
        if value is not None:
            return value
    return None
