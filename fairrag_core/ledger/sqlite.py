"""An exposure ledger in a SQLite file (stdlib ``sqlite3``), shared by a machine's processes."""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from ..errors import LedgerUnavailableError
from .base import RANKINGS_FIELD, ExposureLedger

__all__ = ["SQLiteLedger"]

_T = TypeVar("_T")
_FIRST_SLEEP = 0.0001
_MAX_SLEEP = 0.005

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS fairrag_ledger ("
    " key TEXT NOT NULL, label TEXT NOT NULL, value REAL NOT NULL,"
    " PRIMARY KEY (key, label)) WITHOUT ROWID"
)
_INCREMENT = (
    "INSERT INTO fairrag_ledger (key, label, value) VALUES (?, ?, ?) "
    "ON CONFLICT (key, label) DO UPDATE SET value = value + excluded.value"
)


class SQLiteLedger(ExposureLedger):
    """Streams in one SQLite file, safe for several processes (and threads) of one machine.

    - Every :meth:`add` is one ``BEGIN IMMEDIATE`` transaction (the increments of each group
      and of the ranking count, ``value = value + ?`` in SQL): concurrent writers queue on
      SQLite's lock and no update is lost; a process killed mid-transaction leaves it rolled
      back by SQLite's journal, so the file always holds whole rankings.
    - The file is in WAL mode (readers never block the writer) with ``synchronous=NORMAL``:
      durable against a crashed or killed process; a power cut may lose the last commits but
      never tears one.
    - A transaction that finds the file locked by another writer is retried after a short
      random sleep (at most 5 ms), for at most ``timeout`` seconds in all; then
      :class:`~fairrag_core.errors.LedgerUnavailableError` names the file (nothing applied).
      So does a file that cannot be opened or is not a database.

    One table, ``fairrag_ledger(key, label, value)``; a stream's count of rankings is the row
    whose label is ``#rankings``. Connections are made lazily, one per process (a forked
    child opens its own) and shared by its threads behind a lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise TypeError(f"path must be a file path (str or os.PathLike), got {path!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.path = Path(path).expanduser().resolve()
        self.location = f"sqlite:///{self.path}"
        self.timeout = float(timeout)
        self._lock = threading.RLock()
        self._connection: sqlite3.Connection | None = None
        self._pid = -1
        self._run("open", lambda conn: None, write=True)  # create the table now: fail early

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None and self._pid == os.getpid():
            return self._connection
        # A connection inherited through fork() must not be used (SQLite's rule): open anew.
        connection = sqlite3.connect(
            self.path, timeout=0.0, isolation_level=None, check_same_thread=False
        )
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(_SCHEMA)
        except BaseException:
            connection.close()
            raise
        self._connection, self._pid = connection, os.getpid()
        return connection

    def _run(self, operation: str, work: Callable[[sqlite3.Connection], _T], *, write: bool) -> _T:
        """``work`` in one transaction (``BEGIN IMMEDIATE`` to write); a busy file is retried
        after a short random sleep until ``timeout`` seconds have passed."""
        deadline = time.monotonic() + self.timeout
        attempts = 0
        while True:
            attempts += 1
            with self._lock:
                try:
                    connection = self._connect()
                    connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                    try:
                        result = work(connection)
                        connection.execute("COMMIT")
                    except BaseException:
                        if connection.in_transaction:
                            connection.execute("ROLLBACK")
                        raise
                    return result
                except sqlite3.OperationalError as exc:
                    if not _busy(exc):
                        self._drop_connection()
                        raise self._unavailable(operation, exc) from exc
                    last = exc
                except sqlite3.DatabaseError as exc:
                    self._drop_connection()
                    raise self._unavailable(operation, exc) from exc
            if time.monotonic() >= deadline:
                raise LedgerUnavailableError(
                    f"SQLite ledger {self.path} stayed locked by other writers: {operation} "
                    f"found it busy {attempts} times in {self.timeout} s; nothing was applied"
                ) from last
            # SQLite's own busy handler sleeps 1, 2, 5, ... 100 ms: with several processes
            # writing, most of the time went to sleeping. Short random sleeps keep the lock busy.
            time.sleep(min(_MAX_SLEEP, _FIRST_SLEEP * 2 ** min(attempts, 8)) * random.random())

    def _unavailable(self, operation: str, exc: sqlite3.Error) -> LedgerUnavailableError:
        return LedgerUnavailableError(
            f"SQLite ledger {self.path} cannot {operation}: {type(exc).__name__}: {exc}; "
            "nothing was applied"
        )

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and self._pid == os.getpid():
            try:
                connection.close()
            except sqlite3.Error:
                pass

    def _read(self, key: str) -> tuple[dict[str, float], int]:
        rows = self._run(
            "read",
            lambda conn: conn.execute(
                "SELECT label, value FROM fairrag_ledger WHERE key = ?", (key,)
            ).fetchall(),
            write=False,
        )
        totals = {label: value for label, value in rows if label != RANKINGS_FIELD}
        rankings = next((int(value) for label, value in rows if label == RANKINGS_FIELD), 0)
        return totals, rankings

    def _add(self, key: str, exposure: dict[str, float]) -> None:
        rows = [(key, label, value) for label, value in exposure.items()]
        rows.append((key, RANKINGS_FIELD, 1.0))
        self._run("add", lambda conn: conn.executemany(_INCREMENT, rows), write=True)

    def _reset(self, key: str) -> None:
        self._run(
            "reset",
            lambda conn: conn.execute("DELETE FROM fairrag_ledger WHERE key = ?", (key,)),
            write=True,
        )

    def _keys(self) -> Iterable[str]:
        rows = self._run(
            "list keys",
            lambda conn: conn.execute("SELECT DISTINCT key FROM fairrag_ledger").fetchall(),
            write=False,
        )
        return [key for (key,) in rows]

    def close(self) -> None:
        with self._lock:
            self._drop_connection()

    def __getstate__(self) -> dict:
        return {"path": str(self.path), "timeout": self.timeout}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], timeout=state["timeout"])  # type: ignore[misc]


_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
"""SQLite's primary result codes (``sqlite3`` names them from Python 3.11 on)."""


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite reported a lock held by another connection (worth waiting for)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc)
    return "locked" in text or "busy" in text
