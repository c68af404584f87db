"""A ledger that goes back in time is noticed by every client that saw a later state: a real
redis-server restarted from its RDB snapshot, a SQLite file replaced by its own backup; the
reset policy ``adopt`` costs only the call that noticed; a SQLite file of another program is
refused untouched (docs/SPEC.md item 6, "Lost streams")."""

from __future__ import annotations

import os
import sqlite3
import warnings

import pytest

from fairrag_core import LedgerUnavailableError, make_ranker
from fairrag_core.ledger import LedgerResetError, RedisLedger, SQLiteLedger, make_ledger
from fairrag_core.ledger.base import forget_shared_memory
from tests.redis_server import RedisServer
from tests.reliability.ledger_worker import K, pool

KEY = "tenant-a"
EXPOSURE = {"female": 0.5, "male": 1.0}


def _add(ledger, times: int) -> None:
    for _ in range(times):
        ledger.add(KEY, EXPOSURE)


def test_redis_restarted_from_an_rdb_snapshot_raises_in_every_client_that_saw_more(rdb_server):
    writer, reader = RedisLedger(rdb_server.url), RedisLedger(rdb_server.url)
    _add(writer, 20)
    writer.client.save()  # the snapshot: 20 rankings
    _add(writer, 30)
    assert reader.state(KEY).rankings == 50
    rdb_server.restart(kill=True)  # kill -9: the 30 rankings after the snapshot are gone
    with pytest.raises(LedgerResetError, match="went back in time"):
        RedisLedger(rdb_server.url).state(KEY)  # a new client of this process knows
    forget_shared_memory()  # a client of another process, which never saw more
    newcomer = RedisLedger(rdb_server.url)
    assert newcomer.state(KEY).rankings == 20  # cannot tell

    with pytest.raises(LedgerResetError, match="went back in time") as caught:
        reader.state(KEY)
    assert (caught.value.seen_rankings, caught.value.found_rankings) == (50, 20)
    with pytest.raises(LedgerResetError, match="went back in time"):
        writer.add(KEY, EXPOSURE)  # refused inside the script: nothing applied
    assert newcomer.state(KEY).rankings == 20
    with pytest.raises(LedgerResetError):
        writer.state(KEY)  # still, until the reset is made explicit
    writer.adopt(KEY)
    writer.add(KEY, EXPOSURE)
    assert writer.state(KEY).rankings == 21


def test_an_amortized_ranker_on_a_rolled_back_redis_stops_serving(rdb_server):
    ranker = make_ranker(
        "amortized", protected="female", ledger=rdb_server.url, ledger_key=KEY, seed=1
    )
    scores, groups = pool()
    for _ in range(10):
        ranker.rank(scores, groups, K)
    ranker.ledger.client.save()
    for _ in range(10):
        ranker.rank(scores, groups, K)
    rdb_server.restart(kill=True)
    with pytest.raises(LedgerResetError):
        ranker.rank(scores, groups, K)
    forget_shared_memory()  # read as another process would
    assert RedisLedger(rdb_server.url).state(KEY).rankings == 10


def test_adopt_policy_costs_only_the_call_that_noticed(rdb_server):
    ranker = make_ranker(
        "amortized",
        protected="female",
        ledger=rdb_server.url + "?on_reset=adopt",
        ledger_key=KEY,
        seed=1,
    )
    assert ranker.ledger.on_reset == "adopt"
    scores, groups = pool()
    ranker.rank(scores, groups, K)
    ranker.ledger.client.save()
    for _ in range(5):
        ranker.rank(scores, groups, K)
    rdb_server.restart(kill=True)
    served = 0
    with pytest.warns(RuntimeWarning, match="went back in time.*on_reset='adopt'"):
        for _ in range(20):
            try:
                ranker.rank(scores, groups, K)
                served += 1
            except LedgerUnavailableError:  # the connection broken by the restart
                pass
    assert served >= 19  # only a request in flight at the restart may fail
    assert ranker.ledger.resets_adopted == 1
    assert RedisLedger(rdb_server.url).state(KEY).rankings == 1 + served


def test_redis_restart_without_persistence_adopt_policy_resumes(tmp_path):
    server = RedisServer(tmp_path / "redis", appendonly=False)
    try:
        server.start()
        ledger = RedisLedger(server.url, on_reset="adopt")
        _add(ledger, 5)
        server.restart(kill=True)  # nothing saved: the stream is gone
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            failures = 0
            for _ in range(10):
                try:
                    ledger.add(KEY, EXPOSURE)
                except LedgerUnavailableError:
                    failures += 1
        assert failures <= 1
        assert any("lost or replaced" in str(w.message) for w in caught)
        assert ledger.state(KEY).rankings == 10 - failures
    finally:
        server.stop()


def _backup(path, to) -> None:
    source, target = sqlite3.connect(path), sqlite3.connect(to)
    with target:
        source.backup(target)
    source.close()
    target.close()


def test_sqlite_file_replaced_by_its_own_backup_raises(tmp_path):
    path = tmp_path / "ledger.db"
    ledger, other = SQLiteLedger(path), SQLiteLedger(path)
    _add(ledger, 10)
    _backup(path, tmp_path / "backup.db")
    _add(ledger, 40)
    assert other.state(KEY).rankings == 50
    ledger.close()
    other.close()
    os.replace(tmp_path / "backup.db", path)  # a restore: 10 rankings

    with pytest.raises(LedgerResetError, match="went back in time") as caught:
        ledger.add(KEY, EXPOSURE)
    assert (caught.value.seen_rankings, caught.value.found_rankings) == (50, 10)
    with pytest.raises(LedgerResetError, match="went back in time"):
        other.state(KEY)
    forget_shared_memory()  # read as another process would
    assert SQLiteLedger(path).state(KEY).rankings == 10  # nothing applied

    adopting = SQLiteLedger(path, on_reset="adopt")
    adopting._counts[KEY] = 50  # as if it had seen the later state too
    adopting._generations[KEY] = ledger._generations[KEY]
    with pytest.warns(RuntimeWarning, match="went back in time"):
        adopting.add(KEY, EXPOSURE)
    assert adopting.state(KEY).rankings == 11


def test_a_pickled_client_remembers_what_it_saw(tmp_path):
    import pickle

    path = tmp_path / "ledger.db"
    ledger = SQLiteLedger(path)
    _add(ledger, 10)
    _backup(path, tmp_path / "backup.db")
    _add(ledger, 5)
    copy = pickle.loads(pickle.dumps(ledger))
    ledger.close()
    copy.close()  # every connection closed: SQLite checkpoints and removes the WAL file
    os.replace(tmp_path / "backup.db", path)
    with pytest.raises(LedgerResetError):
        copy.state(KEY)


def test_make_ledger_reads_the_reset_policy_from_the_url(tmp_path):
    ledger = make_ledger(f"sqlite:///{tmp_path / 'l.db'}?on_reset=adopt")
    assert isinstance(ledger, SQLiteLedger) and ledger.on_reset == "adopt"
    assert make_ledger(ledger.location).on_reset == "adopt"  # the location reopens it
    with pytest.raises(ValueError, match=r"on_reset must be 'raise'.*'adopt'"):
        make_ledger(f"sqlite:///{tmp_path / 'l.db'}?on_reset=ignore")
    with pytest.raises(ValueError, match="on_reset"):
        SQLiteLedger(tmp_path / "m.db", on_reset="sometimes")


def test_another_programs_sqlite_file_is_refused_untouched(tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as app:
        app.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        app.execute("INSERT INTO users (name) VALUES ('ada')")
    app.close()
    before = path.read_bytes()
    with pytest.raises(
        LedgerUnavailableError, match=r"another program's file \(tables \['users'\]"
    ):
        SQLiteLedger(path)
    assert path.read_bytes() == before
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        tables = check.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    check.close()
    assert tables == [("users",)]


def test_a_file_with_another_application_id_is_refused(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as app:
        app.execute("PRAGMA application_id = 1234")
    app.close()
    with pytest.raises(LedgerUnavailableError, match="application_id 0x4d2"):
        SQLiteLedger(path)


def test_a_ledger_file_of_an_earlier_version_is_still_accepted(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:
        old.execute(
            "CREATE TABLE fairrag_ledger (key TEXT NOT NULL, label TEXT NOT NULL, "
            "value REAL NOT NULL, PRIMARY KEY (key, label)) WITHOUT ROWID"
        )
    old.close()
    ledger = SQLiteLedger(path)
    ledger.add(KEY, EXPOSURE)
    assert ledger.state(KEY).rankings == 1


def test_a_ledger_table_of_other_columns_is_refused_untouched(tmp_path):
    """A ``fairrag_ledger`` table another program made with other columns: it was accepted,
    switched to WAL and given the ledger's application_id, then every add failed ("no such
    column"). Found by an operator trial."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as app:
        app.execute("CREATE TABLE fairrag_ledger (k TEXT, label TEXT)")
    app.close()
    before = path.read_bytes()
    with pytest.raises(LedgerUnavailableError, match=r"fairrag_ledger table of other columns: k"):
        SQLiteLedger(path)
    assert path.read_bytes() == before
