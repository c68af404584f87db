"""Records the sinks never get are never lost silently, and one sink is never called from two
threads at once (docs/SPEC.md, "Records" → Where records go): a reliability trial found the
exit flush giving up 50 records of a sink whose remote hangs with ``sinks_dropped`` 0 and no
log line, and ``RecordKeeper.close()`` with a stalled sink leaving its worker alive while the
next record started a second one (delivery order [100, 101, 102, 0, 1, 2, 3, 4], two
concurrent calls of one sink). No wall-clock assertion: events and bounded waits only."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fairrag_core.kit import RecordKeeper

WAIT = 60.0
"""The bound of every wait in these tests (seconds); none is reached when the code is right."""

ROOT = Path(__file__).resolve().parents[2]


class _HeldSink:
    """A sink whose remote hangs on record 0 until ``release``; it records the order it got
    records in and the most calls it saw at once."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.delivered: list[int] = []
        self.active = self.most_at_once = 0
        self._lock = threading.Lock()

    def __call__(self, record: dict) -> None:
        with self._lock:
            self.active += 1
            self.most_at_once = max(self.most_at_once, self.active)
        try:
            if record["n"] == 0:
                self.entered.set()
                self.release.wait(WAIT)
            with self._lock:
                self.delivered.append(record["n"])
        finally:
            with self._lock:
                self.active -= 1


def test_close_gives_up_the_queued_records_counted_and_a_later_record_waits_its_turn(caplog):
    sink = _HeldSink()
    keeper = RecordKeeper(sinks=[sink])
    try:
        keeper.add([{"n": n} for n in range(5)])
        assert sink.entered.wait(WAIT)  # record 0 is with the sink, 1-4 queued
        assert not keeper.flush(0) and keeper.sinks_dropped == 0  # flush only waits
        with caplog.at_level(logging.WARNING, logger="fairrag_core.kit.records"):
            assert keeper.close(0) is False
        keeper.add([{"n": n} for n in range(100, 103)])  # while the sink still holds 0
    finally:
        sink.release.set()
    assert keeper.flush(WAIT)
    assert sink.most_at_once == 1  # never two threads in the sink
    assert sink.delivered == [0, 100, 101, 102]  # in order, the records given up left out
    assert keeper.sinks_dropped == 4  # 1-4 given up; 0 was still the sink's, and delivered
    assert "close gave up 4 record(s)" in caplog.text
    assert "_HeldSink has not returned" in caplog.text  # the warning names the sink
    assert len(keeper.records) == 8  # every record kept


def test_close_with_a_full_queue_stops_the_stuck_worker(caplog):
    """The stop signal could not be queued behind a full queue: the stuck worker stayed alive
    and delivered the records close() had given up on."""
    sink = _HeldSink()
    keeper = RecordKeeper(sinks=[sink], sink_queue=2)
    try:
        keeper.add([{"n": 0}])
        assert sink.entered.wait(WAIT)
        keeper.add([{"n": 1}, {"n": 2}])  # the queue is full
        worker = keeper._dispatch.thread
        with caplog.at_level(logging.WARNING, logger="fairrag_core.kit.records"):
            assert keeper.close(0) is False
    finally:
        sink.release.set()
    worker.join(WAIT)
    assert not worker.is_alive()  # it ended once the sink returned record 0
    assert sink.delivered == [0]  # 1 and 2 were given up, not delivered behind close's back
    assert keeper.sinks_dropped == 2
    assert "close gave up 2 record(s)" in caplog.text


_EXIT = """
import atexit, json, logging, sys, threading
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
# registered before fairrag_core is imported: runs after its exit flush (atexit is LIFO)
atexit.register(lambda: print(json.dumps({"sinks_dropped": keeper.sinks_dropped}), flush=True))

from fairrag_core.kit import RecordKeeper, records
records.EXIT_FLUSH_SECONDS = 0.5  # the bound, shortened for the test

entered = threading.Event()

def hanging_remote(record):  # an exporter call that never returns
    entered.set()
    threading.Event().wait()

keeper = RecordKeeper(sinks=[hanging_remote])
keeper.add([{"n": n} for n in range(50)])
assert entered.wait(60)  # record 0 in flight, 49 queued
if sys.argv[1] == "closed":
    keeper.close(0)
"""


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_records_given_up_at_exit_are_counted_and_warned(tmp_path, mode):
    """A sink whose remote hangs: the exit flush gives up the 49 queued records and the one in
    flight, counted in ``sinks_dropped`` with one warning naming the sink (``closed``: close()
    gave up the 49 queued, the exit flush the one the sink still held)."""
    script = tmp_path / "exit_give_up.py"
    script.write_text(_EXIT)
    done = subprocess.run(
        [sys.executable, str(script), mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == '{"sinks_dropped": 50}'
    warned = [line for line in done.stderr.splitlines() if "gave up" in line]
    if mode == "open":
        assert len(warned) == 1
        assert "the exit flush gave up 50 record(s)" in warned[0]
    else:
        assert len(warned) == 2
        assert "close gave up 49 record(s)" in warned[0]
        assert "the exit flush gave up 1 record(s)" in warned[1]
    assert all("sink __main__.hanging_remote has not returned" in line for line in warned)
