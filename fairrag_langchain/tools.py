"""A retriever as an agent's tool that shows each document under its entry number.

``langchain_core.tools.create_retriever_tool`` joins the documents' texts: the model sees no
``[n]``, so an answer's ``[1]`` after two searches names no document a reader can tell.
:func:`fair_retriever_tool` is the same tool (same input, same ``response_format``) whose output
shows each document as the fair chain does (:func:`fairrag_core.kit.context_entry`: ``[n]``,
the ``Title:`` line when the text lacks it, the text), numbered from ``[1]`` in each search, and
says so in its metadata (:data:`NUMBERED_TOOL_KEY`): :class:`FairnessCallbackHandler` then reads
an answer's entry numbers by the label each document was shown under, and a number two searches
both showed by the person the answer's line names (docs/SPEC.md, "Records" → Agents and graphs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import StructuredTool
from langchain_core.tools.retriever import RetrieverInput

from ._documents import context_entries
from ._fields import NUMBERED_TOOL_KEY

__all__ = ["NUMBERED_TOOL_KEY", "fair_retriever_tool"]

_FORMATS = ("content", "content_and_artifact")


def fair_retriever_tool(
    retriever: BaseRetriever,
    name: str,
    description: str,
    *,
    title_key: str = "title",
    document_separator: str = "\n\n",
    response_format: Literal["content", "content_and_artifact"] = "content",
    metadata: Mapping[str, Any] | None = None,
) -> StructuredTool:
    """``create_retriever_tool(retriever, name, description)`` whose output numbers the
    documents: each is ``[n]`` (its place in this search's list, from 1), then ``Title:
    <title>`` when its text does not state it (the title from ``metadata[title_key]``), then its
    text, joined by ``document_separator``. ``response_format="content_and_artifact"`` also
    returns the documents, as LangChain's tool does. ``metadata`` is the tool's own (kept, with
    :data:`NUMBERED_TOOL_KEY` set). LangChain's ``document_prompt`` is not taken: each document
    is written as the chain writes it. The handler reads titles by its own ``title_key``: give
    it the same.
    """
    if not isinstance(retriever, BaseRetriever):
        raise TypeError(
            f"retriever must be a LangChain BaseRetriever (a FairRetriever, a vector store's "
            f"as_retriever()), got {type(retriever).__name__}"
        )
    for argument, value in (("name", name), ("description", description)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{argument} must be a non-blank str, got {value!r}")
    if not isinstance(title_key, str) or not title_key:
        raise ValueError(f"title_key must be a non-empty str, got {title_key!r}")
    if not isinstance(document_separator, str):
        raise TypeError(f"document_separator must be a str, got {document_separator!r}")
    if response_format not in _FORMATS:
        raise ValueError(f"response_format must be one of {_FORMATS}, got {response_format!r}")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping, got {type(metadata).__name__}")

    def shown(documents: list[Document]) -> str | tuple[str, list[Document]]:
        content = document_separator.join(context_entries(documents, title_key))
        return (content, documents) if response_format == "content_and_artifact" else content

    def search(query: str, callbacks: Callbacks = None) -> str | tuple[str, list[Document]]:
        return shown(retriever.invoke(query, config={"callbacks": callbacks}))

    async def asearch(query: str, callbacks: Callbacks = None) -> str | tuple[str, list[Document]]:
        return shown(await retriever.ainvoke(query, config={"callbacks": callbacks}))

    return StructuredTool(
        name=name,
        description=description,
        func=search,
        coroutine=asearch,
        args_schema=RetrieverInput,
        response_format=response_format,
        metadata={**(metadata or {}), NUMBERED_TOOL_KEY: True},
    )
