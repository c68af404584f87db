"""One deadline for a whole HTTP request of a synchronous ``httpx`` client: connecting, sending,
the headers and the whole body (docs/SPEC.md, "Deadlines").

httpx's timeouts bound each network operation, not the request: a server that trickles its
answer (a byte every half second) keeps every read under the read timeout and the request
waiting for as long as the answer lasts (a user trial: a Chroma query with ``timeout=2`` still
waiting after 20 s). :func:`bound_whole_requests` gives a client's connections a network layer
whose every connect, read and write waits at most what is left of the request's deadline, set
around the request by :func:`deadline`; past it, the read or write raises httpcore's timeout,
which httpx raises as its own (``httpx.ReadTimeout``, ``httpx.WriteTimeout``,
``httpx.ConnectTimeout``).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore

__all__ = ["bound_whole_requests", "deadline"]

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "fairrag_http_deadline", default=None
)
"""The ``time.monotonic()`` by which the request in flight in this context must have ended."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every network wait of the requests made inside the block (on a client given
    :func:`bound_whole_requests`) ends ``seconds`` from now at the latest."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, late: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of the deadline; ``late`` raised once it has passed."""
    until = _DEADLINE.get()
    if until is None:
        return timeout
    left = until - time.monotonic()
    if left <= 0:
        raise late("the request's deadline passed before its whole answer arrived")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most what is left of the deadline."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        bounded = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """The network layer of a client's connections, with :class:`_Stream` connections."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(
            self._backend.connect_tcp(host, port, bounded, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        bounded = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def bound_whole_requests(client: Any) -> None:
    """Give the connections of ``client`` (an ``httpx.Client``, its proxies' too) the deadline
    of :func:`deadline`; its open connections are closed, so every later request opens one
    that keeps it. A TypeError for another client (an ``httpx.AsyncClient``: its connections
    are async); a RuntimeError when this httpx's internals are not those tested (0.28)."""
    import httpx

    if not isinstance(client, httpx.Client):
        raise TypeError(
            f"client must be an httpx.Client (a synchronous one), got {type(client).__name__}"
        )
    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        if transport is None:
            continue
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None or not isinstance(pool, httpcore.ConnectionPool):
            raise RuntimeError(
                f"cannot bound whole requests on this httpx's {type(transport).__name__} (no "
                "_pool._network_backend); fairrag is tested with httpx 0.28"
            )
        if not isinstance(backend, _Backend):
            pool._network_backend = _Backend(backend)
            pool.close()
