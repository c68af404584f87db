"""The Redis ledger against a real redis-server: processes lose no update, a restart or a stuck
server gives a typed error naming it and the same ranker works again, a killed client leaves
the ledger whole, a restart that lost the data is noticed."""

from __future__ import annotations

import time

import numpy as np
import pytest

from fairrag_core import LedgerUnavailableError, make_ranker, position_weights
from fairrag_core.ledger import LedgerResetError, RedisLedger
from fairrag_core.ledger.base import forget_shared_memory
from tests.reliability.ledger_worker import (
    K,
    kill_after,
    pool,
    read_reports,
    served_exposure,
    start_worker,
    summed,
    wait_all,
)

PROCESSES = 8
RANKINGS = 500
RANKING_EXPOSURE = float(sum(position_weights(K)))


def test_8_processes_x_500_rankings_lose_no_update(redis_server, tmp_path):
    reports = [tmp_path / f"served-{i}.jsonl" for i in range(PROCESSES)]
    workers = [
        start_worker(redis_server.url, "tenant-a", RANKINGS, seed, report)
        for seed, report in enumerate(reports)
    ]
    wait_all(workers)
    served = read_reports(*reports)
    assert len(served) == PROCESSES * RANKINGS
    state = RedisLedger(redis_server.url).state("tenant-a")
    assert state.rankings == PROCESSES * RANKINGS
    assert state.totals == pytest.approx(summed(served), rel=1e-9)
    assert set(state.totals) == {"female", "male", None, 3}
    assert state.total == pytest.approx(PROCESSES * RANKINGS * RANKING_EXPOSURE, rel=1e-9)


def _serve(ranker, count: int, served: list) -> None:
    scores, groups = pool()
    for _ in range(count):
        ranking = ranker.rank(scores, groups, K).tolist()
        served.append(served_exposure(ranking, groups))


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_a_restart_mid_stream_is_a_typed_error_then_the_same_ranker_works_again(redis_server, kill):
    ledger = RedisLedger(redis_server.url, timeout=1.0, connect_timeout=1.0)
    ranker = make_ranker("amortized", protected="female", ledger=ledger, ledger_key="t", seed=0)
    served: list = []
    _serve(ranker, 50, served)
    redis_server.stop(kill=kill)
    scores, groups = pool()
    for attempt in range(3):  # every call while it is down fails, nothing served
        with pytest.raises(LedgerUnavailableError, match=redis_server.url) as info:
            ranker.rank(scores, groups, K)
        assert isinstance(info.value, ConnectionError)
        assert "ConnectionError" in str(info.value)
        # the first reaches for the server; the circuit breaker fails the next at once
        assert ("failed fast, without a request" in str(info.value)) == (attempt == 1)
        if attempt == 1:
            time.sleep(ledger._breaker.remaining())  # the cool-down: the next call is a probe
    redis_server.start()
    time.sleep(ledger._breaker.remaining())
    _serve(ranker, 50, served)  # the first call after the cool-down already succeeds
    state = ledger.state("t")
    assert state.rankings == len(served) == 100  # the append-only file kept the first 50
    assert state.totals == pytest.approx(summed(served), rel=1e-9)


def test_a_stuck_server_times_out_with_a_typed_error_then_works_again(redis_server):
    ledger = RedisLedger(redis_server.url, timeout=0.2, connect_timeout=0.2)
    ranker = make_ranker("amortized", protected="female", ledger=ledger, ledger_key="t", seed=0)
    served: list = []
    _serve(ranker, 10, served)
    redis_server.freeze()
    try:
        with pytest.raises(LedgerUnavailableError, match="TimeoutError") as info:
            ranker.rank(*pool(), K)
        assert redis_server.url in str(info.value)
        with pytest.raises(LedgerUnavailableError, match="failed fast, without a request"):
            ranker.rank(*pool(), K)  # the circuit breaker: no second wait on a stuck server
    finally:
        redis_server.thaw()
    time.sleep(ledger._breaker.remaining())
    _serve(ranker, 10, served)
    state = ledger.state("t")
    assert state.rankings == len(served) == 20
    assert state.totals == pytest.approx(summed(served), rel=1e-9)


def test_a_client_killed_mid_stream_leaves_the_ledger_whole(redis_server, tmp_path):
    report = tmp_path / "served.jsonl"
    worker = start_worker(redis_server.url, "tenant-a", 100_000, 7, report)
    kill_after(worker, report, rankings=300, deadline=60.0)
    served = read_reports(report)
    state = RedisLedger(redis_server.url).state("tenant-a")
    assert state.rankings in (len(served), len(served) + 1)
    reported = summed(served)
    extra = {g: state.totals.get(g, 0.0) - reported.get(g, 0.0) for g in state.totals}
    if state.rankings == len(served):
        assert state.totals == pytest.approx(reported, rel=1e-9)
    else:
        assert all(value > -1e-9 for value in extra.values())
        assert sum(extra.values()) == pytest.approx(RANKING_EXPOSURE, rel=1e-9)


def test_the_ledger_reads_only_what_it_wrote(redis_server):
    """Streams of another prefix, and other keys on the server, are not the ledger's."""
    a = RedisLedger(redis_server.url, prefix="app-a:")
    b = RedisLedger(redis_server.url, prefix="app-b:")
    a.add("tenant", {"female": 1.0})
    b.add("tenant", {"male": 2.0})
    a.client.set("tenant", "unrelated")
    assert a.state("tenant").totals == {"female": 1.0}
    assert b.keys() == ["tenant"]
    a.reset("tenant")
    assert b.state("tenant").totals == {"male": 2.0}
    assert np.isclose(b.state("tenant").total, 2.0)


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_a_restart_that_lost_the_data_is_a_reset_error_until_the_reset_is_explicit(
    redis_server, tmp_path, kill
):
    """Before: after 50 rankings the server restarted empty (no persistence); the next rank()
    succeeded with no warning and the state read rankings=1."""
    ledger = RedisLedger(redis_server.url, timeout=1.0, connect_timeout=1.0)
    ranker = make_ranker("amortized", protected="female", ledger=ledger, ledger_key="t", seed=0)
    forget_shared_memory()  # the replica is another process: it shares nothing with ledger
    replica = RedisLedger(redis_server.url)  # another replica serving the same stream
    served: list = []
    _serve(ranker, 50, served)
    replica.add("t", served_exposure([0, 1, 2, 3, 4], pool()[1]))
    seen = ledger.state("t").generation
    redis_server.stop(kill=kill)
    redis_server.folder = tmp_path / "empty"  # the same port, none of the data
    redis_server.start()
    scores, groups = pool()
    for _ in range(2):  # nothing is served or added while the loss is not acknowledged
        with pytest.raises(LedgerResetError, match=r"stream 't' was lost or replaced") as info:
            ranker.rank(scores, groups, K)
        assert redis_server.url in str(info.value)
        assert (info.value.seen, info.value.found) == (seen, None)
    assert ledger.client.exists(ledger._stream("t")) == 0
    ledger.reset("t")  # made explicit: the stream starts over
    _serve(ranker, 3, served)
    assert ledger.state("t").rankings == 3
    with pytest.raises(LedgerResetError, match="has mark"):  # the replica notices too
        replica.add("t", served_exposure([0, 1, 2, 3, 4], groups))
    replica.adopt("t")  # and continues the stream the first one restarted
    replica.add("t", served_exposure([0, 1, 2, 3, 4], groups))
    assert ledger.state("t").rankings == 4
    forget_shared_memory()
    fresh = RedisLedger(redis_server.url)  # a client that never saw the stream just uses it
    fresh.add("t", served_exposure([0, 1, 2, 3, 4], groups))
    assert fresh.state("t").rankings == 5
