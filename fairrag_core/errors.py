"""Typed errors the adapters raise for failures outside the ranking itself."""

from __future__ import annotations

__all__ = ["VectorStoreUnavailableError"]


class VectorStoreUnavailableError(ConnectionError):
    """The vector store could not be reached, or did not answer within its timeout.

    Raised for the affected call only, with the transport error as ``__cause__``: nothing is
    retried and nothing is cached, so the same retriever (or query engine) works again once
    the store answers. A ``ConnectionError``, so code that already handles network failures
    catches it.
    """
