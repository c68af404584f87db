"""An exposure ledger in this process's memory (the amortized ranker's default)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from .base import ExposureLedger, LedgerState, encode_label

__all__ = ["MemoryLedger"]


class MemoryLedger(ExposureLedger):
    """Streams held in a dict behind a lock: safe across threads, gone when the process ends.

    For one process (several processes each keep their own; use :class:`SQLiteLedger` or
    :class:`RedisLedger` to share one). A pickled copy carries the totals, not the lock.
    """

    location = "memory"
    _trusted = True  # every value came through add()'s checks: reads skip them

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[str, tuple[dict[str, float], int]] = {}

    def _read(self, key: str) -> tuple[dict[str, float], int]:
        with self._lock:
            totals, rankings = self._streams.get(key, ({}, 0))
            return dict(totals), rankings

    def _add(self, key: str, exposure: dict[str, float]) -> None:
        with self._lock:
            totals, rankings = self._streams.get(key, ({}, 0))
            updated = dict(totals)
            for label, value in exposure.items():
                updated[label] = updated.get(label, 0.0) + value
            self._streams[key] = (updated, rankings + 1)

    @classmethod
    def from_state(cls, state: LedgerState) -> MemoryLedger:
        """A new in-memory ledger holding ``state`` (e.g. a record's ``ledger_state``, read by
        :meth:`LedgerState.from_record`): the same query seed on it, with ``ledger_key=
        state.key``, re-draws the ranking drawn from that state (docs/SPEC.md item 6,
        "Re-drawing")."""
        ledger = cls()
        encoded = {encode_label(label): float(value) for label, value in state.totals.items()}
        ledger._streams[state.key] = (encoded, state.rankings)
        return ledger

    def _reset(self, key: str) -> None:
        with self._lock:
            self._streams.pop(key, None)

    def _keys(self) -> Iterable[str]:
        with self._lock:
            return list(self._streams)

    def __getstate__(self) -> dict:
        with self._lock:
            return {"streams": dict(self._streams)}

    def __setstate__(self, state: dict) -> None:
        self._lock = threading.Lock()
        self._streams = dict(state["streams"])
