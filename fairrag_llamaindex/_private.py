"""Every read of a LlamaIndex private attribute, in one place (docs/SPEC.md, "Adapters").

LlamaIndex keeps an engine's retriever, postprocessors and LLM, a retriever's vector store and
fusion members, and a Chroma store's collection in private attributes, which ``relevance="auto"``
and the handler's model name need. Each is read here, and nowhere else, so that a LlamaIndex
release renaming one breaks one module: ``tests/llamaindex/private_test.py`` checks each read
on real objects of the supported versions (:data:`SUPPORTED`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SUPPORTED",
    "chroma_collection",
    "engine_llm",
    "engine_retriever",
    "faiss_index",
    "fusion_members",
    "node_postprocessors",
    "query_engine_of",
    "vector_store",
]

SUPPORTED = ("0.14",)
"""The ``llama-index-core`` minor versions these reads are tested against."""


def engine_retriever(engine: Any) -> Any:
    """A query or chat engine's retriever (``_retriever``; None for anything else)."""
    return getattr(engine, "_retriever", None)


def node_postprocessors(engine: Any) -> Any:
    """A query or chat engine's own node postprocessors (``_node_postprocessors``; None for
    anything else)."""
    return getattr(engine, "_node_postprocessors", None)


def query_engine_of(engine: Any) -> Any:
    """The query engine a chat engine answers through (``_query_engine``; None otherwise)."""
    return getattr(engine, "_query_engine", None)


def engine_llm(engine: Any) -> Any:
    """An engine's LLM: its own (``_llm``, chat engines) or its response synthesizer's."""
    llm = getattr(engine, "_llm", None)
    if llm is None:
        llm = getattr(getattr(engine, "_response_synthesizer", None), "_llm", None)
    return llm


def vector_store(retriever: Any) -> Any:
    """A retriever's vector store (``_vector_store``, else a public ``vector_store``; None)."""
    store = getattr(retriever, "_vector_store", None)
    return store if store is not None else getattr(retriever, "vector_store", None)


def fusion_members(retriever: Any) -> Any:
    """A ``QueryFusionRetriever``'s member retrievers (``_retrievers``; None otherwise)."""
    return getattr(retriever, "_retrievers", None)


def chroma_collection(store: Any) -> Any:
    """A ``ChromaVectorStore``'s collection (``_collection``; None otherwise)."""
    return getattr(store, "_collection", None)


def faiss_index(store: Any) -> Any:
    """A FaissVectorStore's FAISS index (``_faiss_index``; None for anything else), whose
    ``metric_type`` says what its scores mean."""
    return getattr(store, "_faiss_index", None)
