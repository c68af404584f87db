"""The sieve's block scan: blank lines found in the one pass over the bytes, lines that might
be refused sent to the line-by-line path, line numbers mapped back from DuckDB's row order."""

from __future__ import annotations

import gzip
from pathlib import Path

from fairrag_audit.lines import MAX_DEPTH, SCAN_BYTES, _scan_blocks, line_numbers, sieve


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines))
    return path


def test_blank_lines_are_those_of_only_whitespace_among_the_lines_without_a_bracket(
    tmp_path: Path,
) -> None:
    lines = [
        b'{"a": [1]}',
        b"",  # 2: blank
        b"  \t\r",  # 3: blank (ASCII whitespace only)
        b"1",  # a JSON number: no bracket, not blank
        b"garbage",
        b' {"b": 2}',  # starts with whitespace, has a bracket
        b"\x0b\x0c",  # 7: blank
        b'{"c": 3}',
    ]
    path = _write(tmp_path / "log.jsonl", lines)
    assert _scan_blocks(path) == (2, 3, 7)
    assert sieve(path, tmp_path).blank_lines == (2, 3, 7)
    # the 0-based non-blank lines DuckDB numbers, back to their 1-based line numbers
    assert line_numbers(path, [0, 1, 2, 3, 4], (2, 3, 7)) == {0: 1, 1: 4, 2: 5, 3: 6, 4: 8}


def test_blank_lines_across_blocks_and_in_gzip(tmp_path: Path) -> None:
    line = b'{"x": "' + b"y" * 1000 + b'"}'
    count = 2 * SCAN_BYTES // len(line) + 3  # more than two blocks
    lines = [b"" if i % 997 == 5 else line for i in range(count)]
    expected = tuple(i + 1 for i in range(count) if i % 997 == 5)
    plain = _write(tmp_path / "log.jsonl", lines)
    packed = tmp_path / "log.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert _scan_blocks(plain) == expected
    assert _scan_blocks(packed) == expected


def test_a_line_with_more_brackets_than_the_depth_cap_takes_the_line_by_line_path(
    tmp_path: Path,
) -> None:
    flat = b"[" + b",".join([b"[]"] * MAX_DEPTH) + b"]"  # many brackets, depth 2
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    assert _scan_blocks(_write(tmp_path / "flat.jsonl", [b"{}", flat])) is None
    checked = sieve(tmp_path / "flat.jsonl", tmp_path)
    assert checked.refused == 0 and checked.path == tmp_path / "flat.jsonl"
    refused = sieve(_write(tmp_path / "deep.jsonl", [b"{}", deep, b"{}"]), tmp_path)
    assert refused.refused == 1 and refused.path != tmp_path / "deep.jsonl"
