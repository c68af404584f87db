"""The study's output folder: a lock against two studies at once, and a manifest of the files
the study wrote, so that a later run replaces those and nothing else."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from .errors import OutputFolderError
from .report import OUTPUT_FILES

__all__ = [
    "DISK_FULL",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "STUDY_FILES",
    "OutputFolder",
    "study_files",
]

MANIFEST_NAME = ".fairrag-study.json"
"""In ``--out``: the files the study wrote there (paths relative to the folder)."""
LOCK_NAME = ".fairrag-study.lock"
"""In ``--out``: locked (``flock``) while a study writes there; holds the writer's pid."""
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""The ``OSError`` numbers of a disk (or quota, or file size limit) that took no more bytes."""
_RUN_FILES = ("records.jsonl", "callback_log.jsonl", "run.json", "wikipedia_missing.txt")


def study_files(report_files: Iterable[str] = OUTPUT_FILES) -> tuple[str, ...]:
    """Every file a study may write in ``--out``: its run files, ``report_files`` (what the
    report writes for the run's data set: ``report.OUTPUT_FILES`` on TREC, more per-group
    tables on others) and their temporary names (atomic writes: written beside, renamed)."""
    names = list(dict.fromkeys(report_files))
    written = [*_RUN_FILES, *(name for name in names if not name.endswith(".png"))]
    figures = [name for name in names if name.endswith(".png")]
    return (
        *written,
        *(f"{name}.tmp" for name in written),
        *figures,
        *(name.removesuffix(".png") + ".tmp.png" for name in figures),
    )


STUDY_FILES: tuple[str, ...] = study_files()
"""Every file a study on the paper's data set may write in ``--out`` (relative paths)."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


class OutputFolder:
    """``--out`` claimed by this study: :meth:`claim` locks it and clears the previous study's
    files; :meth:`release` records what was written and unlocks.

    Refused (:class:`OutputFolderError`, naming the folder and the files): a folder holding
    anything the study did not write (per the manifest; a folder from before manifests is
    recognised by its ``run.json`` and known file names), and a folder another live study holds.
    A lock left by a study that died is taken over with a message (``flock`` is released by the
    kernel when a process ends, however it ends).
    """

    def __init__(
        self,
        path: Path,
        log: Callable[[str], None] = print,
        files: Iterable[str] = STUDY_FILES,
    ) -> None:
        self.path = Path(path)
        self.log = log
        self.files = tuple(files)
        """Every file this run may write here (:func:`study_files` of its data set)."""
        self._lock: IO[str] | None = None
        self.previous_run: dict[str, Any] | None = None
        """The previous study's ``run.json`` (read by :meth:`claim` before it is replaced)."""

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST_NAME

    def claim(self) -> None:
        if self.path.is_dir():
            self._previous_files()  # a folder of other files is refused before anything is added
        self.path.mkdir(parents=True, exist_ok=True)
        lock_existed = (self.path / LOCK_NAME).exists()
        self._acquire_lock()
        try:
            previous = self._previous_files()  # again, now that no other study can write here
            self.previous_run = (
                _read_json(self.path / "run.json") if "run.json" in previous else None
            )
            for name in previous:
                (self.path / name).unlink(missing_ok=True)
            # Every name this run may write is recorded before it is written: a run that dies
            # half way leaves a manifest that still accounts for its files.
            self._write_manifest(self.files)
        except BaseException:
            if not lock_existed:
                (self.path / LOCK_NAME).unlink(missing_ok=True)
            self._unlock()
            raise

    def release(self) -> None:
        """Remove this run's temporary files, narrow the manifest to the files that exist, then
        unlock. Never raises over the run's own error: on a full disk the manifest written by
        :meth:`claim` (every name this run may write) stays, which still accounts for them."""
        if self._lock is None:
            return
        try:
            for name in self.files:
                if ".tmp" in name:  # an atomic write the run's error interrupted
                    (self.path / name).unlink(missing_ok=True)
            self._write_manifest(name for name in self.files if (self.path / name).is_file())
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise
            self.log(f"--out {self.path}: the manifest kept every name the run might write ({exc})")
        finally:
            self._unlock()

    def _unlock(self) -> None:
        if self._lock is None:
            return
        try:
            self._lock.seek(0)
            self._lock.truncate()  # an empty lock file: released cleanly, nothing to take over
        finally:
            self._lock.close()  # closing the descriptor releases the flock
            self._lock = None

    def _acquire_lock(self) -> None:
        lock_path = self.path / LOCK_NAME
        handle = open(lock_path, "a+", encoding="utf-8")  # held until release()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise OutputFolderError(
                f"--out {str(self.path)!r} is in use by another study ({holder}); two studies "
                "in one folder would interleave their files. Wait for it to end, or choose "
                "another --out"
            ) from None
        handle.seek(0)
        stale = handle.read().strip()
        if stale:
            pid = _parse_pid(stale)
            state = "no longer running" if pid is None or not _pid_alive(pid) else "still running"
            self.log(
                f"--out {self.path}: taking over the lock of a study that ended without "
                f"releasing it ({stale}; {state})"
            )
        handle.seek(0)
        handle.truncate()
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n")
        handle.flush()
        self._lock = handle

    def _previous_files(self) -> list[str]:
        """The previous study's files here; anything else present is an error."""
        present = sorted(
            path.relative_to(self.path).as_posix()
            for path in self.path.rglob("*")
            if not path.is_dir()
        )
        ours = {MANIFEST_NAME, MANIFEST_NAME + ".tmp", LOCK_NAME}
        if self.manifest_path.is_file():
            try:
                written = json.loads(self.manifest_path.read_text(encoding="utf-8"))["written"]
                ours.update(str(name) for name in written)
            except (ValueError, KeyError, TypeError) as exc:
                raise OutputFolderError(
                    f"--out {str(self.path)!r}: its manifest {MANIFEST_NAME} is unreadable "
                    f"({type(exc).__name__}: {exc}); remove the folder's study files yourself or "
                    "choose another --out"
                ) from None
        elif self._legacy_study_folder():
            ours.update(STUDY_FILES)
        foreign = [name for name in present if name not in ours]
        if foreign:
            more = f" and {len(foreign) - 8} more" if len(foreign) > 8 else ""
            shown = ", ".join(foreign[:8]) + more
            raise OutputFolderError(
                f"--out {str(self.path)!r} holds files the study did not write: {shown}. The "
                "study replaces only its own outputs; choose an empty or new folder, or move "
                "those files"
            )
        return [name for name in present if name not in (MANIFEST_NAME, LOCK_NAME)]

    def _legacy_study_folder(self) -> bool:
        """A study's folder from before manifests: a ``run.json`` with a status and a config."""
        run = _read_json(self.path / "run.json")
        return run is not None and "status" in run and "config" in run

    def _write_manifest(self, names: Iterable[str]) -> None:
        payload: dict[str, Any] = {
            "written_by": "fairrag study",
            "note": "files the study wrote here; the next study replaces these and no others",
            "written": sorted(set(names)),
        }
        tmp = self.manifest_path.with_name(MANIFEST_NAME + ".tmp")
        try:
            tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, self.manifest_path)
        finally:
            tmp.unlink(missing_ok=True)  # gone after the rename; left by a failed write


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def _parse_pid(text: str) -> int | None:
    parts = text.split()
    if len(parts) >= 2 and parts[0] == "pid" and parts[1].isdigit():
        return int(parts[1])
    return None
