"""Fixtures of the LangChain adapter tests: no network, and LangChain views of the session's
real Chroma collection (the TREC subset embedded with the real all-MiniLM-L6-v2)."""

from __future__ import annotations

import os
import socket
import threading

import pytest
from langchain_core.embeddings import Embeddings

# Read by huggingface_hub and transformers when first imported: never look anything up online.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test here runs with connections refused except over Unix sockets (asyncio's), and
    with name resolution refused: nothing may be downloaded or called over the network."""
    from pytest_socket import socket_allow_hosts

    def refuse_resolution(host, *args, **kwargs):
        raise OSError(f"network disabled in the LangChain tests: tried to resolve {host!r}")

    connect = socket.socket.connect
    socket_allow_hosts([], allow_unix_socket=True)
    monkeypatch.setattr(socket, "getaddrinfo", refuse_resolution)
    monkeypatch.setattr(socket, "gethostbyname", refuse_resolution)
    yield
    socket.socket.connect = connect


@pytest.fixture(scope="session")
def lc_embeddings():
    """The real all-MiniLM-L6-v2 as LangChain embeddings (the packaged copy, L2-normalised)."""
    from langchain_huggingface import HuggingFaceEmbeddings

    from fairrag_study.embedding import resolve_model_path

    path = resolve_model_path()
    assert os.path.isdir(path), f"the packaged model is not installed (got {path!r})"
    return HuggingFaceEmbeddings(model_name=path, encode_kwargs={"normalize_embeddings": True})


class MemoizedQueryEmbeddings(Embeddings):
    """The real model's embeddings, each distinct query embedded once per session.

    The tests run the same few queries many times (seeds, concurrency); on the 2-core machine
    one query costs ~0.2 s, so recomputing identical vectors would dominate the run time.
    """

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self._queries: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        with self._lock:
            cached = self._queries.get(text)
        if cached is None:
            cached = self.inner.embed_query(text)
            with self._lock:
                self._queries[text] = cached
        return list(cached)


@pytest.fixture(scope="session")
def trec_store(chroma_client, chroma_collection, lc_embeddings):
    """``langchain_chroma.Chroma`` over the session's embedded, cosine TREC subset."""
    from langchain_chroma import Chroma

    return Chroma(
        client=chroma_client,
        collection_name=chroma_collection.name,
        embedding_function=MemoizedQueryEmbeddings(lc_embeddings),
    )
