"""Append-only JSON-lines logs that stay valid under concurrent writers (threads and processes)."""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path

try:  # POSIX: an advisory lock also serialises writers in other processes
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["JsonLinesLog", "to_json_line"]


def to_json_line(record: Mapping[str, object]) -> bytes:
    """One record as one line of strict JSON (NaN and inf become ``null``), newline-terminated."""
    text = json.dumps(_finite(record), ensure_ascii=False, allow_nan=False, default=str)
    return (text + "\n").encode("utf-8")


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _finite(value.item())
    return value


class JsonLinesLog:
    """A file that records are appended to, one JSON object per line.

    Each record is serialised first and written with a single ``write`` on a descriptor opened
    with ``O_APPEND``, under a thread lock and (on POSIX) an exclusive ``flock``: concurrent runs
    never interleave or lose lines, and a crash can at worst truncate the last line. The folder
    must exist and be writable; that is checked when the log is created, not at the first run.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
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

    def append(self, record: Mapping[str, object]) -> None:
        """Append one record as one line."""
        line = to_json_line(record)
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                view = memoryview(line)
                while view:  # a regular file takes it in one write; loop for safety
                    written = os.write(fd, view)
                    view = view[written:]
            finally:
                os.close(fd)  # also releases the flock

    def read(self) -> list[dict[str, object]]:
        """Every complete record in the file (a torn last line from a crash is skipped)."""
        if not self.path.exists():
            return []
        records = []
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                if line.endswith("\n"):
                    records.append(json.loads(line))
        return records
