"""The study's Chroma collections: cosine space and a search breadth that returns exact pools."""

from __future__ import annotations

import time
import uuid

import chromadb
import numpy as np
import pytest

from fairrag_core.prompts import scenario_question
from fairrag_study.index import EF_SEARCH, open_collection


def test_new_and_previously_cached_collections_get_the_search_breadth():
    client = chromadb.EphemeralClient()
    fresh = open_collection(client, f"fresh-{uuid.uuid4().hex[:8]}")
    assert fresh.configuration["hnsw"]["space"] == "cosine"
    assert fresh.configuration["hnsw"]["ef_search"] == EF_SEARCH == 2000
    # An index cached before EF_SEARCH existed has Chroma's default breadth (100).
    name = f"cached-{uuid.uuid4().hex[:8]}"
    old = client.create_collection(
        name, configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
    )
    assert old.configuration["hnsw"]["ef_search"] == 100
    assert open_collection(client, name).configuration["hnsw"]["ef_search"] == EF_SEARCH
    assert client.get_collection(name).configuration["hnsw"]["ef_search"] == EF_SEARCH


@pytest.mark.integration
def test_pools_are_the_exact_cosine_top_50(chroma_collection, sentence_model, subset_topics):
    stored = chroma_collection.get(include=["embeddings"])
    vectors = np.asarray(stored["embeddings"])
    questions = [scenario_question(s, topic) for topic in subset_topics for s in range(1, 5)]
    queries = sentence_model.encode(questions, normalize_embeddings=True)
    for question, query in zip(questions, queries, strict=True):
        pool = chroma_collection.query(query_embeddings=[query.tolist()], n_results=50)
        exact = {stored["ids"][i] for i in np.argsort(-(vectors @ query))[:50]}
        assert set(pool["ids"][0]) == exact, question


def test_the_circuit_breaker_fails_fast_then_lets_one_probe_through() -> None:
    """Closed -> open (fail fast, no request) -> half-open (one probe; others still fail fast)
    -> closed, on chromadb's request method as connect_chroma_server wraps it."""
    import threading

    import httpx

    from fairrag_core import VectorStoreUnavailableError
    from fairrag_study.index import CircuitBreaker, _typed_transport_errors

    sent: list[str] = []
    server_up = threading.Event()
    probe_started, release_probe = threading.Event(), threading.Event()

    def make_request(method: str, path: str, **kwargs: object) -> dict:
        sent.append(path)
        if path == "/probe":
            probe_started.set()
            release_probe.wait(30)
        if not server_up.is_set():
            raise httpx.ConnectError("connection refused")
        return {"path": path}

    breaker = CircuitBreaker("127.0.0.1:9", cooldown=0.2)
    request = _typed_transport_errors(make_request, "127.0.0.1:9", httpx.Timeout(1.0), breaker)
    with pytest.raises(VectorStoreUnavailableError, match="failed with ConnectError"):
        request("post", "/first")
    for _ in range(5):
        with pytest.raises(VectorStoreUnavailableError, match="failed fast, without a request"):
            request("post", "/queued")
    assert sent == ["/first"] and breaker.fast_failures == 5

    server_up.set()
    time.sleep(breaker.remaining())
    probe = threading.Thread(target=request, args=("post", "/probe"))
    probe.start()
    assert probe_started.wait(30)
    with pytest.raises(VectorStoreUnavailableError, match="a probe is running") as caught:
        request("post", "/during-probe")
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    release_probe.set()
    probe.join(30)
    assert request("post", "/after") == {"path": "/after"}
    assert sent == ["/first", "/probe", "/after"] and breaker.remaining() == 0.0


def test_a_chroma_probe_stopped_before_any_answer_leaves_the_circuit_open() -> None:
    """A probe stopped by KeyboardInterrupt learnt nothing of the server: the circuit stays
    open and the next request is the probe (it closed the circuit, and every request then
    went to a server known to be down)."""
    import httpx

    from fairrag_core import VectorStoreUnavailableError
    from fairrag_study.index import CircuitBreaker, _typed_transport_errors

    sent: list[str] = []

    def make_request(method: str, path: str, **kwargs: object) -> dict:
        sent.append(path)
        if path == "/stopped":
            raise KeyboardInterrupt
        raise httpx.ConnectError("connection refused")

    breaker = CircuitBreaker("127.0.0.1:9", cooldown=0)
    request = _typed_transport_errors(make_request, "127.0.0.1:9", httpx.Timeout(1.0), breaker)
    with pytest.raises(VectorStoreUnavailableError):
        request("post", "/first")
    with pytest.raises(KeyboardInterrupt):
        request("post", "/stopped")  # the probe, stopped
    assert breaker._open_until is not None  # still open
    breaker.cooldown = 3600.0  # from the next failure on: open for the rest of the test
    with pytest.raises(VectorStoreUnavailableError, match="failed with ConnectError"):
        request("post", "/next")  # the next probe reaches for the server
    with pytest.raises(VectorStoreUnavailableError, match="failed fast"):
        request("post", "/fast")  # the circuit is open again
    assert sent == ["/first", "/stopped", "/next"]
