"""Exposure ledgers: where the amortized ranker keeps each stream's exposure per group.

Three implementations of :class:`ExposureLedger`: :class:`MemoryLedger` (one process),
:class:`SQLiteLedger` (a file shared by the processes of a machine) and :class:`RedisLedger`
(a Redis server shared by replicas; needs ``fairrag[redis]``). :func:`make_ledger` builds one
from a URL. A stream that was lost or replaced behind a client's back raises
:class:`LedgerResetError`, a damaged stored value :class:`LedgerCorruptError` (both
:class:`~fairrag_core.errors.LedgerUnavailableError`). docs/SPEC.md, "Beyond the paper", item 6.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .base import (
    DEFAULT_KEY,
    QUEUED_AT,
    ExposureLedger,
    LedgerCorruptError,
    LedgerResetError,
    LedgerState,
    check_on_reset,
    decode_label,
    encode_label,
    pop_url_param,
)
from .memory import MemoryLedger
from .redis import RedisLedger, redacted
from .sqlite import SQLiteLedger

__all__ = [
    "DEFAULT_KEY",
    "ExposureLedger",
    "LedgerCorruptError",
    "LedgerResetError",
    "LedgerState",
    "MemoryLedger",
    "RedisLedger",
    "SQLiteLedger",
    "decode_label",
    "encode_label",
    "make_ledger",
    "run_off_loop",
    "waits_on_ledger",
]

LEDGER_THREADS = 64
"""Threads the adapters' async paths wait on SQLite and Redis ledgers in (their own pool, not
the event loop's default one of ``cpu + 4``, so as many requests can wait on the ledger as
with a thread pool of that size)."""

_T = TypeVar("_T")
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _forget_pool_in_child() -> None:
    """A forked child (gunicorn --preload, multiprocessing's fork) inherits the pool's object
    but none of its threads: it starts its own pool on first use (the inherited one would
    queue work that no thread runs)."""
    global _executor, _executor_lock
    _executor, _executor_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


_PARAMETERS = re.compile(r"\?[^/?=&]+=[^/?]*$")
"""The end of a ledger URL that asks for parameters (``?name=value[&...]``); a file name that
holds ``?`` otherwise (``we?ird.db``, as a ledger's ``location`` writes it) is a name."""


def make_ledger(ledger: ExposureLedger | str | os.PathLike[str] | None) -> ExposureLedger:
    """A ledger from a ledger, ``None``/``"memory"`` (a new :class:`MemoryLedger`), a
    ``sqlite:///<path>`` URL or a path (a :class:`SQLiteLedger`), or a ``redis://`` /
    ``rediss://`` / ``unix://`` URL (a :class:`RedisLedger`). A URL may end in
    ``?on_reset=adopt`` (or ``&on_reset=adopt``): the ledger's reset policy
    (:data:`~fairrag_core.ledger.base.RESET_POLICIES`; default ``raise``)."""
    if isinstance(ledger, ExposureLedger):
        return ledger
    if ledger is None or ledger == "memory":
        return MemoryLedger()
    if isinstance(ledger, os.PathLike):
        return SQLiteLedger(ledger)
    if isinstance(ledger, str) and ledger:
        url, in_url = pop_url_param(ledger, "on_reset")
        try:
            on_reset = "raise" if in_url is None else check_on_reset(in_url)
        except ValueError as exc:
            raise ValueError(f"ledger URL {redacted(ledger)!r}: {exc}") from None
        if url.startswith(("redis://", "rediss://", "unix://")):
            return RedisLedger(url, on_reset=on_reset)
        if url == "memory" or url.startswith("memory?"):
            raise ValueError(
                f"ledger {ledger!r}: an in-memory ledger takes no parameters (it has one client, "
                "which nothing else can reset; on_reset is for sqlite:/// and redis:// ledgers)"
            )
        if url.startswith("sqlite:///") or "://" not in url:
            path = url.removeprefix("sqlite:///")
            asked = _PARAMETERS.search(path)
            if asked is not None:
                raise ValueError(
                    f"ledger {ledger!r}: a SQLite ledger's URL takes one query parameter, "
                    f"on_reset=raise|adopt; got {asked.group()!r} (a file whose name ends in "
                    "'?name=value' is given as a pathlib.Path)"
                )
            return SQLiteLedger(path, on_reset=on_reset)
    raise ValueError(
        f"ledger must be an ExposureLedger, None or 'memory', a sqlite:///<path> URL or a file "
        f"path, or a redis:// URL (either may end in ?on_reset=adopt); got {ledger!r}"
    )


def waits_on_ledger(ranker: object) -> bool:
    """Whether ``ranker`` reads and writes a ledger outside the process (SQLite, Redis) when it
    ranks: an adapter's async path then ranks off the event loop (docs/SPEC.md, "Adapters" →
    Async), so a slow ledger never stalls the loop."""
    ledger = getattr(ranker, "ledger", None)
    return isinstance(ledger, ExposureLedger) and not isinstance(ledger, MemoryLedger)


async def run_off_loop(func: Callable[..., _T], *args: Any) -> _T:
    """``func(*args)`` in a thread of the ledger pool (:data:`LEDGER_THREADS`), with this
    task's context variables (as :func:`asyncio.to_thread`), awaited without blocking the loop."""
    global _executor
    if _executor is None:
        with _executor_lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(LEDGER_THREADS, thread_name_prefix="fairrag-ledger")
    context = contextvars.copy_context()
    context.run(QUEUED_AT.set, time.monotonic())  # a deadline counts the wait for a thread
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor, functools.partial(context.run, func, *args))
