"""An exposure ledger in a SQLite file (stdlib ``sqlite3``), shared by a machine's processes."""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from ..errors import LedgerUnavailableError
from .base import (
    GENERATION_FIELD,
    RANKINGS_FIELD,
    StoredLedger,
    _Damaged,
    _policy_suffix,
    check_count,
    check_generation,
    check_on_reset,
    check_seconds,
    check_total,
    new_generation,
    split_stored,
)

__all__ = ["SQLiteLedger"]

_T = TypeVar("_T")
_FIRST_SLEEP = 0.0001
_MAX_SLEEP = 0.005

APPLICATION_ID = 0x46524147
"""SQLite's ``application_id`` of a ledger file (``FRAG``): set in a file the ledger creates; a
file with another id, or with tables of its own, belongs to another program and is refused."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS fairrag_ledger ("
    " key TEXT NOT NULL, label TEXT NOT NULL, value REAL NOT NULL,"
    " PRIMARY KEY (key, label)) WITHOUT ROWID"
)
_COLUMNS = (("key", "TEXT", 1, 1), ("label", "TEXT", 1, 2), ("value", "REAL", 1, 0))
"""The ledger table's columns as ``PRAGMA table_info`` gives them: name, type, not null, place
in the primary key."""
_INCREMENT = (
    "INSERT INTO fairrag_ledger (key, label, value) VALUES (?, ?, ?) "
    "ON CONFLICT (key, label) DO UPDATE SET value = value + excluded.value"
)


class SQLiteLedger(StoredLedger):
    """Streams in one SQLite file, safe for several processes (and threads) of one machine.

    - Every :meth:`add` is one ``BEGIN IMMEDIATE`` transaction (the increments of each group
      and of the ranking count, ``value = value + ?`` in SQL): concurrent writers queue on
      SQLite's lock and no update is lost; a process killed mid-transaction leaves it rolled
      back by SQLite's journal, so the file always holds whole rankings.
    - The file is in WAL mode (readers never block the writer) with ``synchronous=NORMAL``:
      durable against a crashed or killed process; a power cut may lose the last commits but
      never tears one.
    - Before each transaction the path is checked to still name the file the connection opened
      (device and inode): a file deleted or replaced under a running process is reopened, so
      the client never goes on reading a file no one else sees.
    - A transaction that finds the file locked by another writer is retried after a short
      random sleep (at most 5 ms), for at most ``timeout`` seconds in all (a finite number
      > 0; NaN, infinite or <= 0 is a ``ValueError`` when the ledger is built); then
      :class:`~fairrag_core.errors.LedgerUnavailableError` names the file (nothing applied).
      So does a file that cannot be opened or is not a database.

    One table, ``fairrag_ledger(key, label, value)``; a stream's count of rankings is the row
    whose label is ``#rankings``, its generation mark (a random whole number written by the
    transaction that creates the stream) the row ``#generation``. A client that saw a stream
    and finds its mark gone or changed (the file deleted, replaced or restored from another
    copy) raises :class:`~fairrag_core.ledger.LedgerResetError` (what a client saw is shared by
    every client of the same resolved path and ``on_reset`` in the process, a client built for
    each call included; docs/SPEC.md item 6, "Lost streams"); values are checked on read,
    and the rows an add increments inside its transaction before any write
    (:class:`~fairrag_core.ledger.LedgerCorruptError`). Connections are made lazily, one per
    process (a forked child opens its own, behind a lock of its own: a parent's thread may
    have held the inherited one at the fork) and shared by its threads behind a lock.
    """

    _bounded = True
    _marked = True

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 10.0, on_reset: str = "raise"
    ) -> None:
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise TypeError(f"path must be a file path (str or os.PathLike), got {path!r}")
        check_seconds("timeout", timeout, "how long a call waits for a file other writers lock")
        self.on_reset = check_on_reset(on_reset)
        self.path = Path(path).expanduser().resolve()
        self.location = f"sqlite:///{self.path}" + _policy_suffix(self.on_reset)
        self._join("sqlite", str(self.path), self.on_reset)
        self.timeout = float(timeout)
        self._lock = threading.RLock()
        _OPEN.add(self)
        self._connection: sqlite3.Connection | None = None
        self._pid = -1
        self._identity: tuple[int, int] | None = None
        self._log = self.path.with_name(self.path.name + "-wal")
        self._log_identity: tuple[int, int] | None = None
        """The write-ahead log of the file the connection opened (SQLite keeps it in place
        while any connection is open)."""
        self._stale_log: tuple[int, int] | None = None
        """The log of a file replaced under this client, while it is still at the path."""
        self._run("open", lambda conn: None, write=True)  # create the table now: fail early

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None and self._pid == os.getpid():
            if _identity(self.path) == self._identity:
                return self._connection
            # The file was deleted or replaced: an open connection would go on reading the old
            # one (and SQLite refuses writes to it). Open the file the path names now; the
            # generation marks then tell whether the streams this client saw are still there.
            # Unless the old file's write-ahead log is still beside it: SQLite would apply it
            # to the new file (undoing a restore, or mixing the two files' pages).
            if self._log_identity is not None and _identity(self._log) == self._log_identity:
                self._stale_log = self._log_identity
            self._drop_connection()
        if self._stale_log is not None and _identity(self.path) == self._identity:
            self._stale_log = None  # the file this client opened is back, beside its own log
        if self._stale_log is not None:
            if _identity(self._log) == self._stale_log:
                raise LedgerUnavailableError(
                    f"SQLite ledger {self.path} was deleted or replaced while this client had "
                    f"it open, and the write-ahead log beside it ({self._log.name}) is the old "
                    "file's: SQLite would apply it to the new file, undoing a restore or "
                    "mixing the two. Nothing was read or added. If the file was moved away, "
                    "move it back: the clients go on. If it is gone for good (its log then "
                    "holds its last rankings), stop every client of the file, "
                    f"delete {self._log.name} and {self.path.name}-shm, then start them again; "
                    f"to restore a backup while clients run, restore it in place (sqlite3 "
                    f"{self.path.name} '.restore BACKUP'), which they notice"
                )
            self._stale_log = None
        # A connection inherited through fork() must not be used (SQLite's rule): open anew.
        connection = sqlite3.connect(
            self.path, timeout=0.0, isolation_level=None, check_same_thread=False
        )
        try:
            _check_ours(connection, self.path)  # before WAL: another program's file stays as is
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(_SCHEMA)
            if connection.execute("PRAGMA application_id").fetchone()[0] == 0:
                connection.execute(f"PRAGMA application_id={APPLICATION_ID}")
        except BaseException:
            connection.close()
            raise
        self._connection, self._pid = connection, os.getpid()
        self._identity, self._log_identity = _identity(self.path), _identity(self._log)
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
                except _ForeignFile as exc:
                    self._drop_connection()
                    raise LedgerUnavailableError(str(exc)) from None
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

    def _read_marked(self, key: str) -> tuple[dict[str, object], object, object]:
        rows = self._run(
            "read",
            lambda conn: conn.execute(
                "SELECT label, value FROM fairrag_ledger WHERE key = ?", (key,)
            ).fetchall(),
            write=False,
        )
        return split_stored(rows)

    def _add_marked(
        self,
        key: str,
        exposure: dict[str, float],
        expected: int | None,
        fresh: int,
        floor: int | None = None,
    ) -> tuple[object, object]:
        rows = [(key, label, value) for label, value in exposure.items()]
        rows.append((key, RANKINGS_FIELD, 1.0))

        def work(conn: sqlite3.Connection) -> tuple[object, object]:
            stored = {
                label: (value, kind)
                for label, value, kind in conn.execute(
                    "SELECT label, value, typeof(value) FROM fairrag_ledger WHERE key = ?", (key,)
                )
            }
            found = stored.get(GENERATION_FIELD)
            count = stored.get(RANKINGS_FIELD, (0, "integer"))[0]
            if found is None:
                if expected is not None:
                    return None, count  # the stream this client saw is gone: apply nothing
                mark: object = fresh
            else:
                mark = found[0]
                try:
                    current = check_generation(mark)
                except _Damaged:
                    return mark, None  # the caller names the damage; nothing applied
                if expected is not None and current != expected:
                    return mark, count
            # Every row the update increments is checked before any write (SQLite would compute
            # 'garbage' + 0.25 = 0.25 and hide the damage): _Damaged leaves the file untouched.
            for _, label, _ in rows:
                if label in stored:
                    _check_incremented(label, *stored[label])
            if floor is not None and check_count(count) < floor:
                return mark, count  # restored from an older copy: apply nothing
            if found is None:
                conn.execute(
                    "INSERT INTO fairrag_ledger (key, label, value) VALUES (?, ?, ?)",
                    (key, GENERATION_FIELD, float(fresh)),
                )
            conn.executemany(_INCREMENT, rows)
            return mark, check_count(count) + 1

        return self._run("add", work, write=True)

    def _add(self, key: str, exposure: dict[str, float]) -> None:
        self._add_marked(key, exposure, None, new_generation())

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
        return {
            "path": str(self.path),
            "timeout": self.timeout,
            "on_reset": self.on_reset,
            **self._seen(),
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(  # type: ignore[misc]
            state["path"], timeout=state["timeout"], on_reset=state.get("on_reset", "raise")
        )
        self._learn(state)


def _check_incremented(label: str, value: object, kind: str) -> None:
    """Raise :class:`_Damaged` unless the stored ``value`` (of SQLite type ``kind``) of
    ``label`` is one an increment may build on: a number (not text or a blob: SQLite adds
    'garbage' + 0.25 as 0.25) passing the read-side check of a total or of the count."""
    if kind not in ("real", "integer"):
        shown = f"the text {value[:60]!r}" if isinstance(value, str) else f"{value!r:.60}"
        raise _Damaged(label, f"holds {shown} (SQLite {kind}), not a number")
    if label == RANKINGS_FIELD:
        check_count(value)
    else:
        check_total(label, value)


def _check_ours(connection: sqlite3.Connection, path: Path) -> None:
    """Refuse a SQLite file that belongs to another program (tables other than the ledger's, or
    another ``application_id``) before anything is written to it (no table, no WAL switch)."""
    app_id = connection.execute("PRAGMA application_id").fetchone()[0]
    others = [
        name
        for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%' AND name != 'fairrag_ledger' ORDER BY name LIMIT 5"
        )
    ]
    shape = tuple(
        (name, kind.upper(), notnull, key)
        for _, name, kind, notnull, _, key in connection.execute(
            "PRAGMA table_info(fairrag_ledger)"
        )
    )
    if others or app_id not in (0, APPLICATION_ID) or shape not in ((), _COLUMNS):
        if others:
            why = f"tables {others}, not only fairrag_ledger"
        elif app_id not in (0, APPLICATION_ID):
            why = f"application_id {app_id:#x}"
        else:
            columns = ", ".join(f"{name} {kind}" for name, kind, _, _ in shape)
            why = f"a fairrag_ledger table of other columns: {columns:.200}"
        raise _ForeignFile(
            f"SQLite ledger {path} is another program's file ({why}): "
            "refused, nothing written. Give the ledger a file of its own (a new path)"
        )


class _ForeignFile(Exception):
    """The file at the ledger's path belongs to another program."""


_OPEN: weakref.WeakSet[SQLiteLedger] = weakref.WeakSet()
"""The process's SQLite ledgers: a forked child gives each a new lock."""


def _new_locks_in_child() -> None:
    """A child forked while a parent's thread held a ledger's lock (a thread ranking) inherits
    it held, by a thread that does not exist in the child: every call would wait for ever."""
    for ledger in list(_OPEN):
        ledger._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)


def _identity(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the file at ``path`` (``None`` when there is none): which file a
    connection opened, so a file deleted or replaced under an open connection is noticed."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
"""SQLite's primary result codes (``sqlite3`` names them from Python 3.11 on)."""


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite reported a lock held by another connection (worth waiting for)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc)
    return "locked" in text or "busy" in text
