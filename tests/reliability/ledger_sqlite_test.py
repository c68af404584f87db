"""The SQLite ledger shared by real processes: no update lost, a killed process leaves it whole,
a file deleted or replaced under a running process is noticed."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fairrag_core import LedgerUnavailableError, make_ranker, position_weights
from fairrag_core.ledger import LedgerResetError, SQLiteLedger
from fairrag_core.ledger.base import forget_shared_memory
from tests.reliability.ledger_worker import (
    K,
    kill_after,
    pool,
    read_reports,
    start_worker,
    summed,
    wait_all,
)

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 8
RANKINGS = 500
RANKING_EXPOSURE = float(sum(position_weights(K)))


def test_8_processes_x_500_rankings_lose_no_update(tmp_path):
    path = tmp_path / "ledger.db"
    SQLiteLedger(path)  # created once, as a deployment would; the workers open it themselves
    reports = [tmp_path / f"served-{i}.jsonl" for i in range(PROCESSES)]
    workers = [
        start_worker(f"sqlite:///{path}", "tenant-a", RANKINGS, seed, report)
        for seed, report in enumerate(reports)
    ]
    wait_all(workers)
    served = read_reports(*reports)
    assert len(served) == PROCESSES * RANKINGS
    state = SQLiteLedger(path).state("tenant-a")
    assert state.rankings == PROCESSES * RANKINGS
    assert state.totals == pytest.approx(summed(served), rel=1e-9)
    assert set(state.totals) == {"female", "male", None, 3}  # labels round-trip across processes
    assert state.total == pytest.approx(PROCESSES * RANKINGS * RANKING_EXPOSURE, rel=1e-9)


def test_a_process_killed_mid_stream_leaves_the_ledger_consistent(tmp_path):
    path = tmp_path / "ledger.db"
    ledger = SQLiteLedger(path)
    report = tmp_path / "served.jsonl"
    worker = start_worker(f"sqlite:///{path}", "tenant-a", 100_000, 7, report)
    kill_after(worker, report, rankings=300, deadline=60.0)
    served = read_reports(report)
    state = ledger.state("tenant-a")
    # The worker reports a ranking after its update committed: the ledger holds every reported
    # ranking, and at most one more (committed, then killed before reporting it).
    assert state.rankings in (len(served), len(served) + 1)
    reported = summed(served)
    extra = {g: state.totals.get(g, 0.0) - reported.get(g, 0.0) for g in state.totals}
    if state.rankings == len(served):
        assert state.totals == pytest.approx(reported, rel=1e-12)
    else:
        assert all(value > -1e-9 for value in extra.values())
        assert sum(extra.values()) == pytest.approx(RANKING_EXPOSURE, rel=1e-9)
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    ledger.add("tenant-a", {"female": 1.0})  # no lock was left behind
    assert ledger.state("tenant-a").rankings == state.rankings + 1


FORKED = """
import os, sys
from fairrag_core.ledger import SQLiteLedger
ledger = SQLiteLedger(sys.argv[1])
ledger.add("k", {"female": 1.0})  # the parent's connection is open when it forks
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:  # a child uses the inherited ledger object: it must open its own connection
        for _ in range(100):
            ledger.add("k", {"male": 1.0})
        os._exit(0 if ledger._pid == os.getpid() else 1)  # 1: it used the parent's connection
    children.append(pid)
for _ in range(100):
    ledger.add("k", {"female": 1.0})
codes = [os.waitpid(pid, 0)[1] for pid in children]
state = ledger.state("k")
print(codes, state.rankings, state.totals["female"], state.totals["male"])
"""


def _run_script(script: str, path: Path) -> list[str]:
    """The words ``script`` (given ``path``) prints, run in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def test_forked_children_of_a_process_holding_the_ledger_open_their_own_connection(tmp_path):
    printed = _run_script(FORKED, tmp_path / "ledger.db")
    assert printed == ["[0,", "0,", "0]", "401", "101.0", "300.0"]


FORKED_WHILE_HELD = """
import os, signal, sys, threading
from fairrag_core.ledger import SQLiteLedger
ledger = SQLiteLedger(sys.argv[1])
held, release = threading.Event(), threading.Event()
def rank():  # a thread inside a ledger call when the process forks
    with ledger._lock:
        held.set()
        release.wait(60)
thread = threading.Thread(target=rank)
thread.start()
held.wait(60)
pid = os.fork()
if pid == 0:
    signal.alarm(30)  # the child hung: killed by SIGALRM instead of waiting for ever
    ledger.add("k", {"male": 1.0})
    os._exit(0)
release.set()
thread.join()
status = os.waitpid(pid, 0)[1]
print(status, ledger.state("k").rankings)
"""


def test_a_child_forked_while_a_thread_held_the_ledger_uses_its_own_lock(tmp_path):
    """A child forked while a thread of the parent was inside a ledger call inherited the lock
    held by a thread it does not have: its every call waited for ever (an SRE trial: 4 of 4
    children of a process ranking on 4 threads)."""
    printed = _run_script(FORKED_WHILE_HELD, tmp_path / "ledger.db")
    assert printed == ["0", "1"]  # the child's add ended and was counted


def _new_process_client(path: Path) -> SQLiteLedger:
    """A client as a new process builds it (which knows nothing of what this one saw)."""
    forget_shared_memory()
    return SQLiteLedger(path)


def _remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_file_deleted_or_replaced_under_a_running_ranker_is_a_reset_error(tmp_path, how):
    """Before: the open connection went on reading and writing the deleted file, a ghost no
    other process sees (rankings 51, 52, ... there, while a new process read 0 at the path)."""
    path = tmp_path / "ledger.db"
    ledger = SQLiteLedger(path)
    ranker = make_ranker("amortized", protected="female", ledger=ledger, ledger_key="t", seed=0)
    scores, groups = pool()
    for _ in range(50):
        ranker.rank(scores, groups, K)
    seen = ledger.state("t").generation
    _remove_database(path)
    if how == "replaced":  # another deployment's file, holding a stream of the same name
        other = tmp_path / "other.db"
        elsewhere = SQLiteLedger(other)
        for _ in range(7):
            elsewhere.add("t", {"male": 1.0})
        elsewhere.close()
        os.replace(other, path)
        _remove_database(other)
    for _ in range(2):
        with pytest.raises(LedgerResetError, match=r"stream 't' was lost or replaced") as info:
            ranker.rank(scores, groups, K)
        assert str(path) in str(info.value)
        assert info.value.seen == seen and info.value.found != seen
    with pytest.raises(LedgerResetError):
        SQLiteLedger(path).state("t")  # a new client of this process knows what was seen
    assert _new_process_client(path).state("t").rankings == (7 if how == "replaced" else 0)
    ledger.reset("t")
    ranker.rank(scores, groups, K)
    assert ledger.state("t").rankings == 1
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_backup_moved_over_a_live_file_beside_its_old_log_is_refused_not_undone(tmp_path):
    """A restore by ``mv backup ledger.db`` while a client runs: the live file's write-ahead log
    stays at the path, and SQLite applied it to the moved-in backup, so the client that saw 50
    rankings served the 51st with no error and the restore was silently undone (an operator
    trial). The client now refuses while that log is there, and notices the rollback once it
    is gone."""
    path = tmp_path / "ledger.db"
    ledger = SQLiteLedger(path)
    for _ in range(10):
        ledger.add("t", {"female": 1.0})
    with sqlite3.connect(path) as live, sqlite3.connect(tmp_path / "backup.db") as copy:
        live.backup(copy)
    for _ in range(40):
        ledger.add("t", {"female": 1.0})
    assert Path(f"{path}-wal").exists()
    os.replace(tmp_path / "backup.db", path)
    for call in (lambda: ledger.add("t", {"female": 1.0}), lambda: ledger.state("t")):
        with pytest.raises(LedgerUnavailableError, match="the write-ahead log beside it") as info:
            call()
        assert not isinstance(info.value, LedgerResetError) and str(path) in str(info.value)
    for suffix in ("-wal", "-shm"):  # what the message says to do
        Path(f"{path}{suffix}").unlink()
    with pytest.raises(LedgerResetError, match=r"went back in time.*50 rankings.*holds 10"):
        ledger.state("t")
    assert _new_process_client(path).state("t").rankings == 10


def test_a_file_moved_away_and_back_is_served_again_with_all_its_rankings(tmp_path):
    """``mv ledger.db away.db; mv away.db ledger.db`` while a client runs: the client kept
    refusing ("the write-ahead log ... is the old file's") although its own file was back, and
    the fix its message named (delete the log) erased the 50 rankings only that log held (an
    SRE trial)."""
    path = tmp_path / "ledger.db"
    ledger = SQLiteLedger(path)
    for _ in range(50):
        ledger.add("t", {"female": 1.0})
    os.replace(path, tmp_path / "away.db")
    with pytest.raises(LedgerUnavailableError, match="If the file was moved away, move it back"):
        ledger.state("t")
    os.replace(tmp_path / "away.db", path)
    assert ledger.state("t").rankings == 50
    ledger.add("t", {"female": 1.0})
    assert ledger.state("t").rankings == 51
    ledger.close()
    assert SQLiteLedger(path).state("t").rankings == 51
