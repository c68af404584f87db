"""What an LLM is shown of the component's Documents: the library's context text.

docs/SPEC.md, "Adapters" → Context text: ``[i]``, ``Title: <title>``, then the text, the same
entry (:func:`fairrag_core.kit.context_entry`) the LangChain and LlamaIndex adapters send. A
Document's ``meta`` (its group label, its title field, the placement fields) is never part of
it, unless the caller names a field in ``show_metadata_keys``.

Haystack shows an Agent a tool's result as text: without a converter, ``ComponentTool`` and
``PipelineTool`` write each Document whole, ``meta`` included, as JSON. Give the tool
:func:`context_text` as its ``outputs_to_string`` handler::

    ComponentTool(
        component=search,  # a SuperComponent: retriever -> FairDocumentRanker
        name="search",
        description="Search biographies",
        outputs_to_string={"source": "documents", "handler": context_text},
    )
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from fairrag_core.kit import context_entry, document_title
from fairrag_core.prompts import join_context

__all__ = ["NO_DOCUMENTS", "ContextText", "check_documents", "context_text"]

NO_DOCUMENTS = "No documents were found."
"""The context text of an empty list (a search that found nothing), so that the model is not
handed an empty tool result."""


def check_documents(documents: Any, says: str = "documents must be") -> list[Document]:
    """``documents`` as a list, or a TypeError unless it is a list of haystack Documents,
    beginning ``says`` (the argument or function it is about) and naming what was given."""
    if isinstance(documents, (str, bytes, Mapping)) or not isinstance(documents, Sequence):
        raise TypeError(f"{says} a list of haystack Documents, got {type(documents).__name__}")
    wrong = next((d for d in documents if not isinstance(d, Document)), None)
    if wrong is not None:
        raise TypeError(
            f"{says} a list of haystack Documents, got a {type(wrong).__name__} among them: "
            f"{wrong!r:.80}"
        )
    return list(documents)


def context_text(
    documents: Sequence[Document] | Mapping[str, Any] | Document,
    title_key: str = "title",
    show_metadata_keys: Sequence[str] = (),
) -> str:
    """The context text of ``documents``, best first: one entry per Document, ``[i]`` (its
    1-based rank), ``Title: <title>`` (``meta[title_key]``, else the text's own ``Title:``
    line; none when it has neither), one ``key: value`` line per field of
    ``show_metadata_keys`` the Document has (none by default), then its text; entries
    separated by a blank line. :data:`NO_DOCUMENTS` for an empty list.

    ``documents`` may also be a component's whole output (a mapping: its ``"documents"``), so
    the function works as a tool's ``outputs_to_string`` handler with or without
    ``"source": "documents"``. Anything else is a TypeError.
    """
    if isinstance(documents, Mapping):
        if "documents" not in documents:
            raise TypeError(
                "context_text needs Documents or an output holding them under 'documents'; "
                f"got an output with {sorted(map(str, documents))}"
            )
        documents = documents["documents"]
    if isinstance(documents, Document):
        documents = [documents]
    documents = check_documents(documents, "context_text needs")
    if isinstance(show_metadata_keys, str):
        show_metadata_keys = [show_metadata_keys]
    if not documents:
        return NO_DOCUMENTS
    entries = []
    for rank, document in enumerate(documents, start=1):
        text = document.content or ""
        meta = document.meta or {}
        fields = [(key, meta[key]) for key in show_metadata_keys if key in meta]
        entries.append(context_entry(rank, document_title(meta, text, title_key), text, fields))
    return join_context(entries)


@component
class ContextText:
    """The context text of a list of Documents (:func:`context_text`) as a pipeline step: put
    it between the ranker and the prompt builder (``context.text`` -> the prompt's variable).
    Unlike an ``OutputAdapter`` with ``context_text`` as a custom filter, which Haystack loads
    only with ``unsafe=True``, it saves and loads with ``allowed_modules=["fairrag_haystack"]``
    (a user trial found the guide's pipeline refused on loading)."""

    def __init__(self, title_key: str = "title", show_metadata_keys: Sequence[str] = ()) -> None:
        if not isinstance(title_key, str) or not title_key.strip():
            raise ValueError(
                "title_key must name the metadata field holding each document's title, "
                f"e.g. 'title'; got {title_key!r:.80}"
            )
        if isinstance(show_metadata_keys, str):
            show_metadata_keys = [show_metadata_keys]
        self.title_key = title_key
        self.show_metadata_keys = list(show_metadata_keys)

    @component.output_types(text=str)
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """``text``: :func:`context_text` of ``documents``."""
        return {"text": context_text(documents, self.title_key, self.show_metadata_keys)}

    def to_dict(self) -> dict[str, Any]:
        """The component's configuration, as Haystack serialises pipelines."""
        return default_to_dict(
            self, title_key=self.title_key, show_metadata_keys=self.show_metadata_keys
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextText:
        """The component :meth:`to_dict` described."""
        return default_from_dict(cls, data)
