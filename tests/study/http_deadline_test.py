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
