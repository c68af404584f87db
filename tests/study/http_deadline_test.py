"""fairrag_study.http_deadline's refusals (its deadline is tested against a trickling Chroma
server in tests/reliability/faults_test.py)."""

from __future__ import annotations

import httpx
import pytest

from fairrag_study.http_deadline import _Backend, bound_whole_requests


def test_an_async_client_is_refused_naming_what_is_accepted_and_left_as_it_was():
    """A review: an ``httpx.AsyncClient`` got the sync wrapper, then an AttributeError, its pool
    left half changed."""
    client = httpx.AsyncClient()
    backend = client._transport._pool._network_backend
    with pytest.raises(TypeError, match=r"client must be an httpx\.Client"):
        bound_whole_requests(client)
    assert client._transport._pool._network_backend is backend


def test_a_client_is_bounded_once():
    with httpx.Client() as client:
        bound_whole_requests(client)
        bound_whole_requests(client)
        backend = client._transport._pool._network_backend
        assert isinstance(backend, _Backend) and not isinstance(backend._backend, _Backend)


def test_building_a_client_is_bounded_and_its_errors_are_the_builders():
    """A review: building chromadb's client (its first requests, on a session with no timeout
    yet) was bounded by ``_built_within`` but never exercised (the trickle test fails at the
    heartbeat)."""
    import threading

    from fairrag_core import VectorStoreUnavailableError
    from fairrag_study.index import _built_within

    release = threading.Event()
    try:
        with pytest.raises(VectorStoreUnavailableError, match="while the client was built"):
            _built_within(lambda: release.wait(60), 0.05, "127.0.0.1:9")
    finally:
        release.set()
    assert _built_within(lambda: "client", 60, "127.0.0.1:9") == "client"
    with pytest.raises(KeyError, match="tenant"):
        _built_within(lambda: {}["tenant"], 60, "127.0.0.1:9")
