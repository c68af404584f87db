"""What the clients of one SQLite ledger file saw is shared by every client of that file in the
process (docs/SPEC.md item 6, "Lost streams"): a client built anew, a copy, or a client a
component rebuilds for each call (LangChain ``configurable_fields`` with a value,
``model_copy``) notices a stream an earlier client saw rolled back or replaced; a client of
another process (a real subprocess) cannot tell, as documented. Bad timeouts fail when the
ledger is built."""

from __future__ import annotations

import math
import os
import pickle
import sqlite3
import subprocess
import sys
import threading

import pytest
from langchain_core.runnables import ConfigurableField

from fairrag_core.ledger import LedgerResetError, SQLiteLedger, make_ledger
from fairrag_core.ledger.base import forget_shared_memory
from tests.langchain.doubles import amortized_retriever

KEY = "tenant-a"
EXPOSURE = {"female": 0.5, "male": 1.0}
CONFIGURED = {"configurable": {"k": 4}}


def _restore_in_place(backup, path) -> None:
    """Copy ``backup`` into the live file with SQLite's backup API (what ``sqlite3 FILE
    '.restore BACKUP'`` does): the clients' file, rolled back."""
    source, target = sqlite3.connect(backup), sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


def _backup(path, to) -> None:
    _restore_in_place(path, to)


@pytest.mark.parametrize("copy", ["configurable_fields", "model_copy"])
def test_a_retriever_rebuilt_for_each_call_notices_a_rolled_back_sqlite_file(tmp_path, copy):
    """Before: each call built a new SQLiteLedger that had seen nothing, so after the file was
    restored from a backup (50 -> 10 rankings) the per-call copy served on silently while the
    plain retriever raised LedgerResetError."""
    path = tmp_path / "ledger.db"
    base = amortized_retriever(str(path))
    if copy == "configurable_fields":
        configurable = base.configurable_fields(k=ConfigurableField(id="k"))

        def call() -> object:
            return configurable.invoke("computing", config=CONFIGURED)
    else:

        def call() -> object:
            return base.model_copy().invoke("computing")

    for _ in range(10):
        call()
    _backup(path, tmp_path / "backup.db")
    for _ in range(40):
        call()
    _restore_in_place(tmp_path / "backup.db", path)

    for _ in range(2):  # nothing is served until the reset is made explicit
        with pytest.raises(LedgerResetError, match="went back in time") as caught:
            call()
        assert (caught.value.seen_rankings, caught.value.found_rankings) == (50, 10)
    base.core_ranker.ledger.adopt(KEY)  # the explicit reset holds for every client
    call()
    with sqlite3.connect(path) as connection:
        (count,) = connection.execute(
            "SELECT value FROM fairrag_ledger WHERE key = ? AND label = '#rankings'", (KEY,)
        ).fetchone()
    assert count == 11


def _rolled_back(tmp_path, saved: int = 5) -> tuple:
    """A SQLite ledger whose file was backed up after ``saved`` rankings, given one more, then
    restored in place from the backup: ``(path, the client that saw saved + 1)``."""
    path = tmp_path / "ledger.db"
    first = SQLiteLedger(path)
    for _ in range(saved):
        first.add(KEY, EXPOSURE)
    _backup(path, tmp_path / "backup.db")
    first.add(KEY, EXPOSURE)
    assert first.state(KEY).rankings == saved + 1
    _restore_in_place(tmp_path / "backup.db", path)
    return path, first


def test_a_new_client_of_the_same_file_knows_what_the_first_one_saw(tmp_path):
    path, first = _rolled_back(tmp_path)
    for later in (
        SQLiteLedger(path),
        make_ledger(f"sqlite:///{path}"),
        SQLiteLedger(tmp_path / "." / "ledger.db"),  # the same file, resolved
    ):
        with pytest.raises(LedgerResetError, match="went back in time"):
            later.state(KEY)
    # Another reset policy keeps what it saw apart: an adopting client never silences one
    # that raises.
    adopting = SQLiteLedger(path, on_reset="adopt")
    assert adopting.state(KEY).rankings == 5
    with pytest.raises(LedgerResetError):
        first.add(KEY, EXPOSURE)


def test_a_new_process_cannot_tell_a_rollback_it_never_saw(tmp_path):
    """The documented limit, in a real subprocess: it starts from what is stored."""
    path, first = _rolled_back(tmp_path)
    code = (
        "import sys; from fairrag_core.ledger import SQLiteLedger; "
        "print(SQLiteLedger(sys.argv[1]).state('tenant-a').rankings)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "5"
    with pytest.raises(LedgerResetError):
        first.state(KEY)  # this process saw 6


def test_a_client_built_after_forgetting_is_as_a_new_process(tmp_path):
    """The hook the tests use to stand for another process: clients built after it share
    nothing with those built before."""
    path, first = _rolled_back(tmp_path, saved=3)
    forget_shared_memory()
    assert SQLiteLedger(path).state(KEY).rankings == 3
    with pytest.raises(LedgerResetError):
        first.state(KEY)


def test_a_pickled_client_loaded_in_the_same_process_shares_and_adds_what_it_saw(tmp_path):
    path = tmp_path / "ledger.db"
    first = SQLiteLedger(path)
    first.add(KEY, EXPOSURE)
    state = pickle.dumps(first)
    forget_shared_memory()  # as if loaded by another process
    loaded = pickle.loads(state)
    assert loaded._generations == first._generations and loaded._counts == {KEY: 1}
    assert SQLiteLedger(path)._counts == {KEY: 1}  # and shared with that process's clients
    assert pickle.loads(pickle.dumps(loaded))._memory is loaded._memory


def test_clients_rebuilt_in_many_threads_share_one_memory(tmp_path):
    path = tmp_path / "ledger.db"
    built: list[SQLiteLedger] = []
    lock = threading.Lock()

    def build() -> None:
        ledger = SQLiteLedger(path)
        ledger.add(KEY, EXPOSURE)
        with lock:
            built.append(ledger)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(built) == 8 and len({id(ledger._memory) for ledger in built}) == 1
    assert built[0]._counts[KEY] >= 1 and built[0].state(KEY).rankings == 8


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, 0, -1.0, True, "1"])
def test_a_sqlite_timeout_that_is_not_a_finite_number_above_zero_fails_when_built(
    tmp_path, timeout
):
    """Before: timeout=nan and timeout=inf were accepted, and a locked file then meant a wait
    without end (the deadline monotonic() + nan is never reached)."""
    with pytest.raises(ValueError, match=r"timeout must be a number of seconds > 0 and finite"):
        SQLiteLedger(tmp_path / "ledger.db", timeout=timeout)
    assert not os.path.exists(tmp_path / "ledger.db")  # refused before anything was opened


def test_a_redis_client_given_keeps_its_own_memory():
    """A review: the shared memory was keyed by the client's description, which Sentinel's
    ``master_for`` (two services, one description: ``redis://localhost:6379/0``) and a cluster
    client (its ``repr``, an address reused once it is collected) do not make unique: two
    services shared a breaker and pending adds. A ledger given its client keeps its own; one
    built from a URL shares."""
    redis = pytest.importorskip("redis")
    from fairrag_core.ledger import RedisLedger

    first = RedisLedger(client=redis.Redis(host="127.0.0.1", port=6399))
    second = RedisLedger(client=redis.Redis(host="127.0.0.1", port=6399))
    assert first._server is not second._server and first._memory is not second._memory
    by_url = [RedisLedger("redis://127.0.0.1:6399/0") for _ in range(2)]
    assert by_url[0]._server is by_url[1]._server and by_url[0]._memory is by_url[1]._memory
