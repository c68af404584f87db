"""Folders the study's cache makes once and checks at every load: the ONNX export of the
embedding model (:mod:`fairrag_study.embedding`) and the local chat model's converted weights
(:mod:`fairrag_study.converted_model`). docs/SPEC.md, "The study": Embedding and Local
generator.

A folder is written in a temporary folder beside it and renamed whole under an exclusive
``flock`` (a reader never sees half of one); the sha256 of each of its files goes to a digest
record kept *beside* the folder (``<folder>.sha256.json``), not in it: a folder copied, synced
or rewritten whole brings no approval of its own files. A reader checks the files against the
record under the shared lock, before any native code parses them (a damaged file can load and
answer wrongly, or crash the process).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .data import sha256_of

__all__ = ["MAX_RECORD_BYTES", "CheckedFolders", "read_json"]

MAX_RECORD_BYTES = 1 << 20
"""Largest ``meta.json`` or digest record read (1 MiB; both are a few tens of KiB)."""


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object of at most :data:`MAX_RECORD_BYTES` (its size checked before reading)."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_RECORD_BYTES:,} bytes")
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"{path.name} does not hold a JSON object")
    return value


@dataclass(frozen=True)
class CheckedFolders:
    """The folders of one kind: each holds :attr:`files` (each named in its digest record with
    its sha256) and a ``meta.json`` whose ``format`` is :attr:`format`."""

    files: tuple[str, ...]
    """The files a digest record must name, each with its sha256: fixed here, not read from the
    record (a record naming fewer files is refused, not trusted for fewer)."""
    format: int
    """Version of the folder's layout; a folder of another version is made again."""
    what: str
    """What a folder is, for messages (``export``, ``conversion``)."""
    made: str
    """How its files were made, for messages (``exported``, ``converted``)."""

    def record_path(self, folder: Path) -> Path:
        """``<folder>.sha256.json`` beside ``folder``: the sha256 of each of :attr:`files`,
        written when the folder is placed."""
        return folder.parent / f"{folder.name}.sha256.json"

    def ready(self, folder: Path) -> bool:
        """Does ``folder`` hold a readable ``meta.json`` of this :attr:`format`?"""
        try:
            meta = read_json(folder / "meta.json")
        except (OSError, ValueError):
            return False
        return meta.get("format") == self.format

    def read_record(self, folder: Path) -> dict[str, str]:
        """The digests :meth:`record_path` holds for ``folder``; ``ValueError`` saying why when
        there is none, it cannot be read, or it does not give a sha256 for exactly
        :attr:`files`."""
        path = self.record_path(folder)
        try:
            record = read_json(path)
        except FileNotFoundError:
            raise ValueError(
                f"it has no digest record ({path.name} beside it; {self._a} {self.what} copied "
                "from elsewhere or made by an older FairRAG)"
            ) from None
        except (OSError, ValueError) as exc:
            raise ValueError(f"its digest record {path.name} cannot be read ({exc})") from None
        files = record.get("files")
        if (
            not isinstance(files, dict)
            or sorted(files) != sorted(self.files)
            or not all(isinstance(v, str) and len(v) == 64 for v in files.values())
        ):
            named = sorted(files) if isinstance(files, dict) else files
            raise ValueError(
                f"its digest record {path.name} names {named!r}; expected a sha256 for each of "
                f"{list(self.files)}"
            )
        return {str(k): str(v) for k, v in files.items()}

    @property
    def _a(self) -> str:
        return "an" if self.what[:1] in "aeiou" else "a"

    def verify(self, folder: Path, digests: Mapping[str, str] | None = None) -> None:
        """``folder`` holds :attr:`files` and its ``meta.json``, nothing else (a reader such as
        transformers' ``from_pretrained`` picks up any file it knows), and each of
        :attr:`files` has the sha256 of its digest record (or of ``digests``, for a folder
        being made); else ``ValueError`` saying what differs."""
        expected = dict(digests) if digests is not None else self.read_record(folder)
        held = sorted(path.name for path in folder.iterdir())
        extra = sorted(set(held) - {*self.files, "meta.json"})
        if extra:
            raise ValueError(f"it holds files its digest record does not name: {extra[:5]}")
        missing = [name for name in self.files if name not in held]
        if missing:
            raise ValueError(f"it lacks {missing}")
        for name in self.files:
            if sha256_of(folder / name) != expected[name]:
                raise ValueError(f"{name} differs from the file {self.made} (sha256)")

    def write_record(self, folder: Path, digests: Mapping[str, str]) -> None:
        """Write ``folder``'s digest record (a temporary file renamed: never half a record)."""
        path = self.record_path(folder)
        text = json.dumps({"format": self.format, "folder": folder.name, "files": dict(digests)})
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def remove(self, folder: Path) -> None:
        """``folder`` and its digest record, removed (to be made again)."""
        shutil.rmtree(folder, ignore_errors=True)
        self.record_path(folder).unlink(missing_ok=True)

    @contextmanager
    def lock(self, folder: Path, *, exclusive: bool) -> Iterator[None]:
        """``flock`` on ``.<folder>.lock`` beside it: a folder is placed and its record written
        under the exclusive lock, and checked against its record under the shared one, so a
        check never sees a new folder with the record of the old one. A cache this user may
        only read (made by another) still takes the shared lock on its lock file."""
        path = folder.parent / f".{folder.name}.lock"
        handle: IO[bytes]
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            handle = open(path, "a+b")
        except PermissionError:
            if exclusive:
                raise
            handle = open(path, "rb")  # a cache this user may only read: flock works read-only
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextmanager
    def staged(self, folder: Path) -> Iterator[tuple[Path, dict[str, str]]]:
        """A temporary folder beside ``folder`` to write in, and the digest record to fill:
        when the block ends without an error the folder is renamed to ``folder`` and the
        record written beside it, under the exclusive lock (a reader never sees half a
        folder, or a folder with another's record); the temporary folder is removed in any
        case. When another process placed ``folder`` first, theirs (and its record) is kept:
        it is as good."""
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
        os.chmod(work, 0o755)  # mkdtemp's 0700: readable like the rest of the cache
        record: dict[str, str] = {}
        try:
            yield work, record
            if sorted(record) != sorted(self.files):
                raise ValueError(
                    f"the {self.what}'s digests name {sorted(record)}, not {list(self.files)}"
                )
            with self.lock(folder, exclusive=True):
                try:
                    os.replace(work, folder)
                except OSError:
                    if not self.ready(folder):
                        raise
                else:
                    self.write_record(folder, record)
        finally:
            shutil.rmtree(work, ignore_errors=True)
