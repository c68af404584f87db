"""The lines of a log, checked before DuckDB parses them: length and nesting depth capped, so
that one line can never take more than a bounded share of memory or time.

DuckDB's JSON reader keeps a parsed line in memory at about 80 bytes per nesting level: one
16 MiB line nested 8 million deep needs more than the audit's 1 GB. :func:`sieve` reads each
file once, streaming, in blocks of at most :data:`BLOCK_BYTES`; a line longer than
:data:`MAX_LINE_BYTES` or nested deeper than :data:`MAX_DEPTH` is refused. Only when a file has
such a line is a copy written (gzip, level 1, in a temporary folder) in which each refused line
is replaced by ``{"__refused": "<reason>"}``, so that DuckDB never parses it and the row
numbering is kept. Blank lines (only ASCII whitespace: what DuckDB skips too) are not records.

:func:`line_numbers` maps the i-th non-blank line of a file (DuckDB's row order, which is the
file's order) back to its 1-based line number, for the lines the report lists: from the blank
lines the sieve noted in its one scan of the bytes (a second pass only for a file that had a
line to look at closely).
"""

from __future__ import annotations

import bisect
import gzip
import json
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import numpy as np

from fairrag_core.jsonl import MAX_RECORD_BYTES

__all__ = [
    "BLOCK_BYTES",
    "BROKEN_GZIP",
    "MAX_DEPTH",
    "MAX_LINE_BYTES",
    "Sieved",
    "copy_log",
    "is_gzip",
    "line_numbers",
    "nesting_depth",
    "open_log",
    "sieve",
]

MAX_LINE_BYTES = MAX_RECORD_BYTES
"""Longest line read (a 1 MB answer fits 16 times; the core's limit, which its logs refuse to
write past); a longer one is refused, never held whole."""

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects in a record (the record schema needs 4)."""

BLOCK_BYTES = 2**20
"""Bytes read at a time: a line longer than this is read in pieces."""

REFUSED_FIELD = "__refused"
"""The field of the placeholder that replaces a refused line in the copy DuckDB reads."""


def is_gzip(path: Path) -> bool:
    """Whether the file starts with gzip's magic bytes."""
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def open_log(path: Path) -> IO[bytes]:
    """A log's bytes, decompressed when it is gzip (told by its magic bytes)."""
    if is_gzip(path):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


def _pieces(handle: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """``(piece, ends_line)``: every line in pieces of at most :data:`BLOCK_BYTES`."""
    while True:
        piece = handle.readline(BLOCK_BYTES)
        if not piece:
            return
        ends = piece.endswith(b"\n")
        yield piece, ends


def _lines(handle: IO[bytes]) -> Iterator[tuple[bytes | None, int]]:
    """``(line, size)`` per line: the line's bytes, or None when it is longer than
    :data:`MAX_LINE_BYTES` (then never held whole; ``size`` is its length)."""
    parts: list[bytes] = []
    size = 0
    for piece, ends in _pieces(handle):
        size += len(piece)
        if size <= MAX_LINE_BYTES + 1:
            parts.append(piece)
        else:
            parts.clear()
        if ends:
            yield (b"".join(parts) if size <= MAX_LINE_BYTES + 1 else None), size
            parts.clear()
            size = 0
    if size:
        yield (b"".join(parts) if size <= MAX_LINE_BYTES else None), size


_BRACKETS = (ord("["), ord("{"))


def nesting_depth(line: bytes) -> int:
    """Deepest nesting of ``[`` and ``{`` outside JSON strings, in time linear in the line
    (numpy, in blocks of :data:`BLOCK_BYTES`; a quote is escaped when an odd number of
    backslashes precedes it). Below the cap, a bound is returned: the brackets counted."""
    brackets = line.count(b"[") + line.count(b"{")
    if brackets <= MAX_DEPTH:
        return brackets if brackets < MAX_DEPTH else MAX_DEPTH  # a bound is enough here
    depth = deepest = 0
    inside = 0  # 1 within a string at the block's start
    run = 0  # backslashes ending the previous block
    for start in range(0, len(line), BLOCK_BYTES):
        data = np.frombuffer(
            line, dtype=np.uint8, count=min(BLOCK_BYTES, len(line) - start), offset=start
        )
        index = np.arange(len(data), dtype=np.int32)
        plain = np.maximum.accumulate(np.where(data == ord("\\"), -1, index))
        quotes = np.flatnonzero(data == ord('"'))
        before = quotes - 1
        previous = plain[np.maximum(before, 0)]
        backslashes = np.where(
            before < 0, run, np.where(previous < 0, before + 1 + run, before - previous)
        )
        real = quotes[backslashes % 2 == 0]
        toggles = np.zeros(len(data) + 1, dtype=np.int32)
        toggles[real + 1] = 1
        in_string = (inside + np.cumsum(toggles[:-1], dtype=np.int32)) % 2 == 1
        step = np.zeros(len(data), dtype=np.int32)
        step[(data == ord("[")) | (data == ord("{"))] = 1
        step[(data == ord("]")) | (data == ord("}"))] = -1
        step[in_string] = 0
        levels = depth + np.cumsum(step, dtype=np.int64)
        deepest = max(deepest, int(levels.max(initial=depth)))
        depth = int(levels[-1])
        inside = (inside + len(real)) % 2
        run = run + len(data) if plain[-1] < 0 else len(data) - 1 - int(plain[-1])
    return deepest


@dataclass(frozen=True)
class Sieved:
    """What :func:`sieve` found in one file."""

    path: Path
    """The file DuckDB reads: the log itself, or the copy with refused lines replaced."""
    gzip: bool
    refused: int
    """Lines refused for their length or depth."""
    blank_lines: tuple[int, ...] | None = None
    """The 1-based numbers of the file's blank lines, found in the same scan (None when the
    file took the line-by-line path): :func:`line_numbers` then needs no pass of its own."""


def _refusal(line: bytes | None, size: int) -> str | None:
    if line is None:
        return f"line of {size:,} bytes, longer than the {MAX_LINE_BYTES // 2**20} MiB cap"
    depth = nesting_depth(line)
    if depth > MAX_DEPTH:
        return f"nested {depth:,} deep, deeper than the cap of {MAX_DEPTH}"
    return None


SCAN_BYTES = 4 * 2**20
"""Bytes :func:`_scan_blocks` reads at a time (it holds the block and a short copy of it)."""

_NOT_COUNTED = bytes(c for c in range(256) if c not in b"[{\n")
"""Every byte but ``[``, ``{`` and the newline: what :func:`_scan_blocks` deletes."""


def _scan_blocks(path: Path) -> tuple[int, ...] | None:
    """The blank lines' 1-based numbers when no line of ``path`` can be refused, else None.

    Whole blocks at a time, one read of the file: each line's count of ``[`` and ``{`` (a
    bound on its depth, as :func:`nesting_depth` uses first), from the block with every other
    byte but the newlines deleted (one pass in C). A line longer than a block or with more
    brackets than :data:`MAX_DEPTH` sends the file to the line-by-line path (:func:`sieve`),
    which measures it exactly. A blank line has no bracket: only lines without one are looked
    at whole. A block is copied only then, for its lines without a bracket (the brackets of the
    line it ends are carried, not its bytes joined to the next block's: a 4 MiB copy per block
    cost as much as the count)."""
    blanks: list[int] = []
    done = 0  # lines before the block
    carry = b""  # the bytes after the last newline read, and their brackets
    carry_counts = b""
    with open_log(path) as handle:
        while True:
            block = handle.read(SCAN_BYTES)
            last = not block
            if last:
                if not carry:
                    break
                block = b"\n"  # the last line, without a newline
            end = block.rfind(b"\n")
            if end < 0:
                carry += block
                if len(carry) > SCAN_BYTES:
                    return None  # one line longer than a block: the line-by-line path
                carry_counts += block.translate(None, _NOT_COUNTED)
                continue
            # the block's brackets after the carry's: the raw block is never copied
            counts = (carry_counts + block.translate(None, _NOT_COUNTED)).split(b"\n")
            carry_counts = counts.pop()  # the line not ended in this block
            if max(map(len, counts)) > MAX_DEPTH:
                return None
            if not all(counts):
                data = carry + block[: end + 1]
                blanks += _blank_lines(data, len(data) - 1, counts, done)
            done += len(counts)
            carry = block[end + 1 :]
            if last:
                break
    return tuple(blanks)


def _blank_lines(data: bytes, end: int, counts: list[bytes], done: int) -> list[int]:
    """The 1-based numbers of the blank lines among ``data[:end + 1]``'s lines without a
    bracket (``counts`` holds each line's brackets; ``done`` lines came before)."""
    chars = np.frombuffer(data, dtype=np.uint8, count=end + 1)
    ends = np.flatnonzero(chars == 10)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    return [
        done + line + 1
        for line, brackets in enumerate(counts)
        if not brackets and not data[starts[line] : ends[line] + 1].strip()
    ]


def sieve(path: Path, folder: Path) -> Sieved:
    """Check every line of ``path``; when a line is refused, write a copy into ``folder``
    with each refused line replaced by a placeholder naming the reason.

    Most logs need one numpy pass over their bytes (:func:`_scan_blocks`), which also notes
    the blank lines for :func:`line_numbers`; a file with a line that might be refused is
    read again line by line."""
    try:
        blanks = _scan_blocks(path)
        if blanks is not None:
            return Sieved(path, is_gzip(path), 0, blanks)
        refused = 0
        with open_log(path) as handle:
            for line, size in _lines(handle):
                if _refusal(line, size) is not None:
                    refused += 1
        if not refused:
            return Sieved(path, is_gzip(path), 0)
    except BROKEN_GZIP:
        pass  # the copy keeps the lines before the break and says where it was
    return copy_log(path, folder)


BROKEN_GZIP = (EOFError, zlib.error, gzip.BadGzipFile)
"""What reading a gzip log cut short (a rotation copied while written) or corrupt raises."""


def copy_log(path: Path, folder: Path) -> Sieved:
    """The copy DuckDB reads instead of ``path``: each refused line replaced by a placeholder
    naming the reason; a gzip stream that breaks ends with one more placeholder saying so
    (the lines before it are read, the break is listed as a refused line)."""
    copy = Path(tempfile.mkstemp(dir=folder, suffix=".jsonl.gz")[1])
    refused = 0
    with gzip.open(copy, "wb", compresslevel=1) as out:
        try:
            with open_log(path) as handle:
                for line, size in _lines(handle):
                    reason = _refusal(line, size)
                    if reason is None:
                        assert line is not None
                        out.write(line if line.endswith(b"\n") else line + b"\n")
                    else:
                        refused += 1
                        out.write(json.dumps({REFUSED_FIELD: reason}).encode() + b"\n")
        except BROKEN_GZIP as exc:
            refused += 1
            reason = (
                f"gzip stream cut short or corrupt here ({type(exc).__name__}: {exc}); the "
                "rest of the file is unread"
            )
            out.write(json.dumps({REFUSED_FIELD: reason}).encode() + b"\n")
    return Sieved(copy, True, refused)


def line_numbers(
    path: Path, wanted: list[int], blank_lines: tuple[int, ...] | None = None
) -> dict[int, int]:
    """1-based line numbers of the ``wanted`` 0-based non-blank lines of ``path``: from the
    blank lines' numbers when the sieve found them (no read), else by a streaming pass."""
    want = set(wanted)
    found: dict[int, int] = {}
    if not want:
        return found
    if blank_lines is not None:
        for index in want:
            # the least n with n - (blank lines up to n) = index + 1: a non-blank line
            number = index + 1
            while (shifted := index + 1 + bisect.bisect_right(blank_lines, number)) != number:
                number = shifted
            found[index] = number
        return found
    nonblank = 0
    number = 0
    try:
        with open_log(path) as handle:
            for number, (line, _) in enumerate(_lines(handle), start=1):
                if line is not None and not line.strip():
                    continue
                if nonblank in want:
                    found[nonblank] = number
                    if len(found) == len(want):
                        break
                nonblank += 1
    except BROKEN_GZIP:  # the sieve's placeholder for the break is the line after the last
        if nonblank in want:
            found[nonblank] = number + 1
    return found
