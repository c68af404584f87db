"""Fixtures of the reliability tests: a real Chroma server the tests start themselves, the
session's real TREC documents indexed into it, and a guard that allows loopback only."""

from __future__ import annotations

import os
import socket

# Read by huggingface_hub, transformers and chromadb when first imported: nothing goes online.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import pytest

from tests.redis_server import running_redis
from tests.reliability.chroma_server import HOST, ChromaServer
from tests.reliability.vectors import QUESTIONS, TOPICS, embed

PER_TOPIC = {"female": 8, "male": 16}
"""Documents per topic and gender on the server: 72 in all, a third female."""
COLLECTION = "reliability-trec"
LOOPBACK_NAMES = {HOST, "localhost", "::1"}


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Connections to 127.0.0.1 (the test server) only; no other name is resolved."""
    from pytest_socket import socket_allow_hosts

    resolve = socket.getaddrinfo

    def loopback_resolution(host, *args, **kwargs):
        if host not in LOOPBACK_NAMES:
            raise OSError(f"network disabled in the reliability tests: tried to resolve {host!r}")
        return resolve(host, *args, **kwargs)

    connect = socket.socket.connect
    socket_allow_hosts([HOST], allow_unix_socket=True)
    monkeypatch.setattr(socket, "getaddrinfo", loopback_resolution)
    monkeypatch.setattr(socket, "gethostbyname", loopback_resolution)
    yield
    socket.socket.connect = connect


@pytest.fixture(autouse=True)
def no_chroma_onnx(monkeypatch):
    """Chroma's default ONNX embedding function must never run (it would download a model)."""
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    def refuse(*args, **kwargs):
        raise AssertionError("Chroma's default ONNX embedding function must never run")

    monkeypatch.setattr(ONNXMiniLM_L6_V2, "__call__", refuse)


@pytest.fixture(scope="session")
def server_documents(subset_documents):
    """72 of the session's real TREC documents: per topic, the first 8 female and 16 male."""
    chosen = []
    for topic in TOPICS:
        for gender, count in PER_TOPIC.items():
            block = [d for d in subset_documents if topic in d.topics and d.gender == gender]
            chosen.extend(block[:count])
    assert len({d.doc_id for d in chosen}) == len(chosen) == 3 * sum(PER_TOPIC.values())
    return chosen


@pytest.fixture(scope="session")
def document_vectors(server_documents, sentence_model):
    """The documents embedded once with the real model (then added to any collection)."""
    return embed(sentence_model, [d.page_content for d in server_documents])


@pytest.fixture(scope="session")
def query_vectors(sentence_model):
    """The study's 12 scenario questions over the 3 topics, embedded once."""
    return dict(zip(QUESTIONS, embed(sentence_model, QUESTIONS), strict=True))


def index_documents(collection, documents, vectors) -> None:
    """Add ``documents`` with their precomputed vectors (the study's ids, texts and metadata)."""
    collection.add(
        ids=[d.doc_id for d in documents],
        embeddings=vectors,
        documents=[d.page_content for d in documents],
        metadatas=[d.metadata() for d in documents],
    )


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory):
    """A real ``chroma run`` on a free loopback port for the session; stopped at the end."""
    with ChromaServer(tmp_path_factory.mktemp("chroma-server") / "data") as server:
        yield server


@pytest.fixture(scope="session")
def server_client(chroma_server):
    from fairrag_study.index import connect_chroma_server

    return connect_chroma_server(chroma_server.host, chroma_server.port)


@pytest.fixture(scope="session")
def server_collection(server_client, server_documents, document_vectors):
    """The documents indexed on the server (cosine space, no Chroma embedding function)."""
    from fairrag_study.index import open_collection

    collection = open_collection(server_client, COLLECTION)
    index_documents(collection, server_documents, document_vectors)
    return collection


@pytest.fixture
def redis_server(tmp_path):
    """A redis-server of this test's own, on a free loopback port (frozen, stopped and
    restarted by some tests), always stopped at the end."""
    with running_redis(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def rdb_server(tmp_path):
    """A redis-server whose only persistence is the RDB snapshot (Redis's default)."""
    from tests.redis_server import RedisServer

    server = RedisServer(tmp_path / "redis", appendonly=False)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def proxy(redis_server):
    """A loopback proxy to ``redis_server`` that can trickle its replies or hold requests."""
    from tests.reliability.ledger_deadline_test import TrickleProxy

    proxy = TrickleProxy(redis_server.port)
    try:
        yield proxy
    finally:
        proxy.close()
