"""Tests for fairrag_core.jsonl: torn writes (a real SIGKILL mid-append), a full disk (a real
file size limit, and an injected ENOSPC), damaged lines, and Unicode line separators."""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import subprocess
import sys
import textwrap

import pytest

import fairrag_core.jsonl as jsonl_module
from fairrag_core.jsonl import (
    DamagedLine,
    DamagedLogError,
    JsonLinesLog,
    LogContents,
    LogWriteError,
    to_json_line,
)

CHILD_TIMEOUT = 60
"""Seconds a child process may take before the test gives up (it takes well under one)."""


LOAD = f"""
import importlib.util
_spec = importlib.util.spec_from_file_location("jsonl", {jsonl_module.__file__!r})
jsonl = sys.modules["jsonl"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(jsonl)
"""
"""How a child loads fairrag_core/jsonl.py itself, without the package's numba import (fast)."""


def run_child(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script).replace("{LOAD}", LOAD), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line_or_fail(child: subprocess.Popen[str]) -> str:
    ready, _, _ = select.select([child.stdout], [], [], CHILD_TIMEOUT)
    if not ready:
        child.kill()
        pytest.fail(f"child gave no sign within {CHILD_TIMEOUT} s")
    line = child.stdout.readline()
    if not line:
        child.wait(CHILD_TIMEOUT)
        pytest.fail(f"child exited early: {child.stderr.read()}")
    return line.strip()


# -- torn tails -------------------------------------------------------------------------------

KILLED_MID_APPEND = """
import sys, time
{LOAD}

log = jsonl.JsonLinesLog(sys.argv[1])
log.append({"run": 1})

def write_half_then_hang(fd, data):
    import os
    os.write(fd, bytes(data[: len(data) // 2]))
    print("torn", flush=True)
    time.sleep(600)  # the parent SIGKILLs us here, holding the lock, half a line written

jsonl._write_all = write_half_then_hang
log.append({"run": 2, "pad": "x" * 1000})
"""


def test_a_sigkill_mid_append_never_swallows_the_next_record(tmp_path):
    path = tmp_path / "runs.jsonl"
    child = run_child(KILLED_MID_APPEND, str(path))
    try:
        assert read_line_or_fail(child) == "torn"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(CHILD_TIMEOUT)
    assert child.returncode == -signal.SIGKILL
    before = path.read_bytes()
    assert before.startswith(b'{"run": 1}\n') and not before.endswith(b"\n")  # torn for real

    log = JsonLinesLog(path)  # the killed writer's flock died with it
    assert log.append({"run": 3})
    assert log.append({"run": 4})
    after = path.read_bytes()
    assert after.startswith(before)  # nothing already written is lost or rewritten
    assert log.read() == [{"run": 1}, {"run": 3}, {"run": 4}]
    contents = log.scan()
    assert [(d.line_number, d.reason.split(":")[0]) for d in contents.damaged] == [(2, "not JSON")]
    assert contents.damaged[0].preview.startswith('{"run": 2, "pad": "xxx')
    with pytest.raises(DamagedLogError, match=r"1 damaged line.*line 2: not JSON"):
        log.read(strict=True)


def test_a_torn_tail_is_ended_before_the_next_append(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2, "b": [1, 2')
    log = JsonLinesLog(path)
    log.append({"a": 3})
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2, "b": [1, 2\n{"a": 3}\n'
    assert log.read() == [{"a": 1}, {"a": 3}]
    assert [d.line_number for d in log.scan().damaged] == [2]


def test_a_complete_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}')
    log = JsonLinesLog(path)
    assert log.scan() == LogContents([{"a": 1}, {"a": 2}], [])
    log.append({"a": 3})
    assert log.read() == [{"a": 1}, {"a": 2}, {"a": 3}]


def test_damaged_lines_are_skipped_counted_and_explained(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(
        b'{"a": 1}\n'
        b"\xff\xfe not utf-8\n"
        b"[1, 2]\n"
        b"\n"
        b"{not json\n" + b"[" * 100_000 + b"\n"  # nesting too deep for the decoder
        b'{"a": 2}\n'
    )
    contents = JsonLinesLog(path).scan()
    assert contents.records == [{"a": 1}, {"a": 2}]
    assert [(d.line_number, d.reason.split(":")[0]) for d in contents.damaged] == [
        (2, "not UTF-8"),
        (3, "not a JSON object"),
        (5, "not JSON"),
        (6, "not JSON"),
    ]
    assert all(isinstance(d, DamagedLine) and len(d.preview) <= 200 for d in contents.damaged)


def test_reading_a_missing_log_gives_nothing(tmp_path):
    log = JsonLinesLog(tmp_path / "log.jsonl")
    os.unlink(tmp_path / "log.jsonl")
    assert log.scan() == LogContents([], []) and log.read(strict=True) == []


# -- full disk --------------------------------------------------------------------------------

FILE_SIZE_LIMIT = """
import json, resource, signal, sys
{LOAD}

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
counted = jsonl.JsonLinesLog(sys.argv[1], on_error="count")
written = [counted.append({"run": i, "pad": "x" * 100}) for i in range(8)]
raised = None
try:
    jsonl.JsonLinesLog(sys.argv[1]).append({"run": 8})
except jsonl.LogWriteError as exc:
    raised = [exc.errno, str(exc)]
print(json.dumps({
    "written": written, "errors": counted.errors,
    "last_errno": counted.last_error.errno, "raised": raised,
}))
"""


def test_a_full_disk_is_visible_to_the_caller_and_loses_nothing_written(tmp_path):
    path = tmp_path / "runs.jsonl"
    line = len(to_json_line({"run": 0, "pad": "x" * 100}))
    child = run_child(FILE_SIZE_LIMIT, str(path), str(line + line // 2))  # 1.5 records fit
    out, err = child.communicate(timeout=CHILD_TIMEOUT)
    assert child.returncode == 0, err
    result = json.loads(out)
    assert result["written"] == [True] + [False] * 7  # one record, then a fragment, then EFBIG
    assert result["errors"] == 7 and result["last_errno"] == errno.EFBIG
    assert result["raised"][0] == errno.EFBIG and str(path) in result["raised"][1]
    before = path.read_bytes()
    assert len(before) == line + line // 2  # the record and a torn fragment

    log = JsonLinesLog(path)  # space again (no limit here)
    assert log.append({"run": 9})
    assert path.read_bytes().startswith(before)
    assert [r["run"] for r in log.read()] == [0, 9]
    assert len(log.scan().damaged) == 1


def fail_after_half(fd: int, data: bytes) -> None:
    os.write(fd, bytes(data[: len(data) // 2]))
    raise OSError(errno.ENOSPC, "No space left on device")


def test_an_injected_enospc_raises_by_default(tmp_path, monkeypatch):
    log = JsonLinesLog(tmp_path / "log.jsonl")
    log.append({"a": 1})
    monkeypatch.setattr(jsonl_module, "_write_all", fail_after_half)
    with pytest.raises(LogWriteError, match=r"could not append.*log\.jsonl.*No space") as caught:
        log.append({"a": 2})
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, OSError)
    assert isinstance(caught.value.__cause__, OSError)
    assert log.errors == 0 and log.last_error is None
    monkeypatch.undo()
    log.append({"a": 3})
    assert log.read() == [{"a": 1}, {"a": 3}]


def test_an_injected_enospc_is_counted_when_asked(tmp_path, monkeypatch):
    log = JsonLinesLog(tmp_path / "log.jsonl", on_error="count")
    monkeypatch.setattr(jsonl_module, "_write_all", fail_after_half)
    assert log.append({"a": 1}) is False
    assert log.append({"a": 2}) is False
    assert log.errors == 2 and log.last_error.errno == errno.ENOSPC
    assert "log.jsonl" in str(log.last_error)
    monkeypatch.undo()
    assert log.append({"a": 3}) is True
    assert log.read() == [{"a": 3}] and len(log.scan().damaged) == 2


def test_a_record_that_cannot_be_serialised_always_raises(tmp_path):
    looped: dict[str, object] = {}
    looped["self"] = looped
    log = JsonLinesLog(tmp_path / "log.jsonl", on_error="count")
    with pytest.raises(ValueError, match="record refers to itself"):
        log.append(looped)
    assert log.errors == 0


def test_numpy_arrays_in_a_record_are_written_as_lists(tmp_path):
    """A user trial: an array in a record (an embedding in metadata) raised numpy's "can only
    convert an array of size 1", even with on_error="count"; scalars were already numbers."""
    import numpy as np

    log = JsonLinesLog(tmp_path / "log.jsonl", on_error="count")
    record = {"embedding": np.array([0.1, np.nan]), "grid": np.arange(4).reshape(2, 2)}
    assert log.append({**record, "n": np.int64(3), "empty": np.array([])})
    [written] = log.read()
    assert written == {"embedding": [0.1, None], "grid": [[0, 1], [2, 3]], "n": 3, "empty": []}


def test_on_error_must_be_raise_or_count(tmp_path):
    with pytest.raises(ValueError, match=r"on_error must be 'raise' or 'count', got 'ignore'"):
        JsonLinesLog(tmp_path / "log.jsonl", on_error="ignore")


# -- escapes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_unicode_line_separators_are_escaped(separator, tmp_path):
    record = {f"key{separator}": f"line one{separator}line two", "list": [separator]}
    line = to_json_line(record)
    text = line.decode("utf-8")
    assert separator not in text
    assert f"\\u{ord(separator):04x}" in text
    assert text.splitlines() == [text.rstrip("\n")]  # one line even for str.splitlines
    assert json.loads(text) == record
    log = JsonLinesLog(tmp_path / "log.jsonl")
    log.append(record)
    log.append({"after": 1})
    assert log.read(strict=True) == [record, {"after": 1}]


def test_escapes_survive_backslashes_and_other_text():
    record = {"a": "\\\u2028\\", "b": "é 漢字 \u00a0", "c": "\\u2028 written literally"}
    text = to_json_line(record).decode("utf-8")
    assert json.loads(text) == record
    assert "é 漢字 \u00a0" in text  # other characters stay as themselves


def test_a_lone_surrogate_is_escaped_instead_of_failing(tmp_path):
    answer = b"caf\xff".decode("utf-8", "surrogateescape")
    line = to_json_line({"answer": answer})
    assert line == b'{"answer": "caf\\udcff"}\n'
    assert json.loads(line) == {"answer": answer}
