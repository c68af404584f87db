"""Typed errors the adapters raise for failures outside the ranking itself."""

from __future__ import annotations

__all__ = ["LedgerUnavailableError", "VectorStoreUnavailableError"]


class VectorStoreUnavailableError(ConnectionError):
    """The vector store could not be reached, or did not answer within its timeout.

    Raised for the affected call only, with the transport error as ``__cause__``: nothing is
    retried and nothing is cached, so the same retriever (or query engine) works again once
    the store answers. A ``ConnectionError``, so code that already handles network failures
    catches it.
    """


class LedgerUnavailableError(ConnectionError):
    """An exposure ledger (:mod:`fairrag_core.ledger`) could not be read or updated.

    The message names the ledger (``redis://host:port/db`` or the SQLite file) and the
    operation; the driver's error is the ``__cause__``. Raised for the affected call only: the
    ranking that needed the ledger is not returned, no connection is kept broken, and the same
    ranker works again once the ledger answers. An update is applied whole or not at all (see
    :meth:`fairrag_core.ledger.ExposureLedger.add`). A ``ConnectionError``, so code that already
    handles network failures catches it.
    """
