"""Append-only JSON-lines logs that stay valid under concurrent writers (threads and processes),
torn writes and full disks."""

from __future__ import annotations

import errno
import json
import math
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

try:  # POSIX: an advisory lock also serialises writers in other processes
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "MAX_RECORD_BYTES",
    "DamagedLine",
    "DamagedLogError",
    "JsonLinesLog",
    "LogContents",
    "LogWriteError",
    "to_json_line",
]

MAX_RECORD_BYTES = 16 * 2**20
"""The longest line (one record, newline included) a log writes and ``fairrag audit`` reads (a
1 MB answer fits 16 times): a longer record is refused where it is written
(:meth:`JsonLinesLog.append`), as the audit would refuse its line."""

_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"}
_PREVIEW = 200


def to_json_line(record: Mapping[str, object]) -> bytes:
    """One record as one line of strict JSON, newline-terminated UTF-8.

    NaN and inf become ``null``; U+2028, U+2029 and U+0085, which ``json.dumps`` leaves raw and
    which readers that split on Unicode line breaks (``str.splitlines``, JavaScript) treat as
    line ends, are written as ``\\u2028``, ``\\u2029``, ``\\u0085``; a lone surrogate (text
    decoded with ``surrogateescape``) is written as its ``\\udcXX`` escape instead of failing.
    Every other character is written as itself. A record that refers to itself is a
    ``ValueError``.
    """
    try:
        text = json.dumps(_finite(record), ensure_ascii=False, allow_nan=False, default=str)
    except RecursionError:
        raise ValueError("record refers to itself or is nested too deeply to log") from None
    for raw, escaped in _LINE_BREAKS.items():
        if raw in text:  # only inside strings, where json.dumps escaped every backslash
            text = text.replace(raw, escaped)
    return (text + "\n").encode("utf-8", "backslashreplace")


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if not isinstance(value, str | bytes):
        tolist = getattr(value, "tolist", None)  # numpy arrays (as lists) and scalars
        if callable(tolist):
            return _finite(tolist())
        item = getattr(value, "item", None)
        if callable(item):  # other array libraries' scalars
            return _finite(item())
    return value


class LogWriteError(OSError):
    """A record could not be appended (full disk, file size limit, I/O error); the log's path
    and the operating system's error are in the message, the latter also as ``__cause__``."""


class DamagedLogError(ValueError):
    """``read(strict=True)`` met a line that is not a JSON object."""


@dataclass(frozen=True)
class DamagedLine:
    """A line of the log that holds no record (a torn write, or bytes not written by us)."""

    line_number: int
    """1-based line number in the file."""
    reason: str
    """Why it is not a record: ``"not UTF-8"``, ``"not JSON: ..."``, ``"not a JSON object"``."""
    preview: str
    """The line's first 200 characters (undecodable bytes replaced)."""


@dataclass(frozen=True)
class LogContents:
    """What :meth:`JsonLinesLog.scan` found: every record, and every line that holds none."""

    records: list[dict[str, object]]
    """The records, in file order."""
    damaged: list[DamagedLine]
    """The damaged lines, in file order; never silently dropped."""


def _byte_at(fd: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, 1, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - Windows (writes still append)
    return os.read(fd, 1)  # pragma: no cover


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a regular file takes it in one write; loop on a short write (e.g. full disk)
        written = os.write(fd, view)
        view = view[written:]


class JsonLinesLog:
    """A file that records are appended to, one JSON object per line.

    Each record is serialised first (:func:`to_json_line`) and written with a single ``write``
    on a descriptor opened with ``O_APPEND``, under a thread lock and (on POSIX) an exclusive
    ``flock``: concurrent runs never interleave or lose lines. The file is never truncated or
    rewritten. A crash (SIGKILL) or a full disk during a write can leave a torn last line without
    its newline; the next append, finding the file not ending in a newline under the lock,
    starts with one, so a torn line never swallows the next record. :meth:`read` skips damaged
    lines and :meth:`scan` reports them.

    A write failure (``OSError``) is raised as :class:`LogWriteError` when ``on_error="raise"``
    (the default); with ``on_error="count"`` it is counted instead (:attr:`errors`,
    :attr:`last_error`) and :meth:`append` returns False, for callers such as callback handlers
    whose exceptions a framework would only log as a warning. A record that cannot be serialised
    is the caller's error and always raises. The folder must exist and be writable; that is
    checked when the log is created, not at the first run.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        on_error: Literal["raise", "count"] = "raise",
    ) -> None:
        if on_error not in ("raise", "count"):
            raise ValueError(f"on_error must be 'raise' or 'count', got {on_error!r}")
        self.on_error = on_error
        self.path = Path(path)
        folder = self.path.parent
        if not folder.is_dir():
            why = "is a file, not a folder" if folder.exists() else "does not exist"
            raise ValueError(f"log path {str(self.path)!r}: folder {str(folder)!r} {why}")
        if self.path.is_dir():
            raise ValueError(f"log path {str(self.path)!r} is a folder; give a file path")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ValueError(f"log path {str(self.path)!r} cannot be written: {exc}") from exc
        os.close(fd)
        self._lock = threading.Lock()
        self._errors = 0
        self._last_error: OSError | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by its path (a worker process appends to the same file, under the same
        # per-line lock); the failure counters are the sending process's and start at 0.
        return (_reopen_log, (os.fspath(self.path), self.on_error))

    @property
    def errors(self) -> int:
        """Appends that failed with ``on_error="count"`` (always 0 with ``"raise"``)."""
        return self._errors

    @property
    def last_error(self) -> OSError | None:
        """The most recent counted write failure, or None."""
        return self._last_error

    def append(self, record: Mapping[str, object]) -> bool:
        """Append one record as one line; True when written.

        Raises :class:`LogWriteError` on a write failure with ``on_error="raise"``; returns False
        (and counts it) with ``on_error="count"``.
        """
        line = to_json_line(record)
        with self._lock:
            try:
                if len(line) > MAX_RECORD_BYTES:
                    raise OSError(
                        errno.EFBIG,
                        f"the record is {len(line):,} bytes as JSON, over the "
                        f"{MAX_RECORD_BYTES:,} bytes (fairrag_core.jsonl.MAX_RECORD_BYTES) a log "
                        "line may hold and `fairrag audit` reads; not written (a question, "
                        "answer or metadata far larger than any context)",
                    )
                self._append_locked(line)
            except OSError as exc:
                error = LogWriteError(
                    exc.errno, f"could not append a record to {str(self.path)!r}: {exc}"
                )
                if self.on_error == "raise":
                    raise error from exc
                self._errors += 1
                self._last_error = error
                return False
        return True

    def _append_locked(self, line: bytes) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and _byte_at(fd, size - 1) != b"\n":  # a torn line: end it first
                line = b"\n" + line
            _write_all(fd, line)
        finally:
            os.close(fd)  # also releases the flock

    def scan(self) -> LogContents:
        """Every record in the file, and every line that holds none (see :class:`DamagedLine`).

        A line is a record when it is UTF-8 JSON holding an object; a last line without its
        newline counts when it is a complete object (only the newline was lost), and is damaged
        otherwise. Read under a shared ``flock``, so a write in progress is never seen half.
        """
        records: list[dict[str, object]] = []
        damaged: list[DamagedLine] = []
        if not self.path.exists():
            return LogContents(records, damaged)
        with open(self.path, "rb") as handle:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
            for number, raw in enumerate(handle, start=1):  # binary: splits on b"\n" only
                if not raw.strip():
                    continue
                record, reason = _decode(raw)
                if record is not None:
                    records.append(record)
                else:
                    preview = raw[: _PREVIEW * 4].decode("utf-8", "replace")[:_PREVIEW]
                    damaged.append(DamagedLine(number, reason, preview))
        return LogContents(records, damaged)

    def read(self, *, strict: bool = False) -> list[dict[str, object]]:
        """Every record in the file, in order; damaged lines (torn writes) are skipped.

        :meth:`scan` also returns the damaged lines. With ``strict=True`` a damaged line raises
        :class:`DamagedLogError` naming the file, the line number and why.
        """
        contents = self.scan()
        if strict and contents.damaged:
            first = contents.damaged[0]
            raise DamagedLogError(
                f"{str(self.path)!r} has {len(contents.damaged)} damaged line(s); line "
                f"{first.line_number}: {first.reason}: {first.preview[:80]!r}"
            )
        return contents.records


def _decode(raw: bytes) -> tuple[dict[str, object] | None, str]:
    """``(record, "")`` for a JSON object line, else ``(None, why it is not one)``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep to decode
        return None, f"not JSON: {exc}"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    return value, ""


def _reopen_log(path: str, on_error: Literal["raise", "count"]) -> JsonLinesLog:
    """A :class:`JsonLinesLog` unpickled: the same file opened again (its checks run again)."""
    return JsonLinesLog(path, on_error=on_error)
