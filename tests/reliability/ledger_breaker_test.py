"""A Redis ledger on the request path never makes a request wait out a deadline another request
already found passing: a circuit breaker fails calls fast while the server is known to be
down, and a request's wait for a thread of the ledger pool counts against its deadline.
Against a real, frozen redis-server (SIGSTOP); counts of what each request did, no wall-clock
assertion."""

from __future__ import annotations

import asyncio
import pickle
import threading
import time

import pytest

from fairrag_core import LedgerUnavailableError
from fairrag_core.ledger import LEDGER_THREADS, QUEUED_AT, RedisLedger, make_ledger
from tests.langchain.doubles import amortized_retriever
from tests.redis_server import free_port

REQUESTS = 200
REACHED = "failed with"  # a call that sent its request and waited for the server
FAST = "failed fast, without a request"
QUEUED = "for a thread of the ledger pool, past its deadline"


def test_requests_behind_a_frozen_server_fail_fast_instead_of_each_waiting_the_deadline(
    redis_server,
):
    """200 concurrent ``ainvoke`` on a frozen server: at most the pool's threads (and a probe
    or two) send and wait; every other request fails at once, naming why. Before the breaker
    all 200 waited, queued 64 at a time (the slowest 16 s with a 4 s deadline)."""
    ledger = RedisLedger(redis_server.url, timeout=0.5, deadline=1.0)
    retriever = amortized_retriever(ledger, key=None)
    assert len(retriever.invoke("computing")) == 4
    redis_server.freeze()
    try:

        async def requests() -> list[object]:
            calls = [retriever.ainvoke("computing") for _ in range(REQUESTS)]
            return await asyncio.gather(*calls, return_exceptions=True)

        results = asyncio.run(requests())
    finally:
        redis_server.thaw()
    assert all(isinstance(r, LedgerUnavailableError) for r in results), results[:3]
    messages = [str(r) for r in results]
    reached = [m for m in messages if REACHED in m]
    assert all(REACHED in m or FAST in m or QUEUED in m for m in messages)
    assert 1 <= len(reached) <= LEDGER_THREADS + 4, len(reached)
    assert ledger._breaker.fast_failures + sum(QUEUED in m for m in messages) >= (
        REQUESTS - len(reached)
    )
    time.sleep(ledger._breaker.remaining())  # the cool-down: the next call is the probe
    assert len(retriever.invoke("computing")) == 4  # works again, nothing lost
    assert ledger.state().rankings == 2


def test_a_request_that_waited_past_its_deadline_for_a_thread_sends_nothing():
    """The wait counts against the request's first call only; a server on a port where none
    listens shows whether anything was sent (a ConnectionError)."""
    ledger = RedisLedger(f"redis://127.0.0.1:{free_port()}/0", deadline=2.0)
    seen: list[str] = []

    def request() -> None:
        QUEUED_AT.set(time.monotonic() - 3.0)
        for _ in range(2):
            try:
                ledger.state("k")
            except LedgerUnavailableError as exc:
                seen.append(str(exc))

    thread = threading.Thread(target=request)
    thread.start()
    thread.join(30)
    assert "read waited 3.0 s for a thread of the ledger pool" in seen[0]
    assert "nothing was sent" in seen[0]
    # the wait counted once, and opened no circuit: the next call reached for the server
    assert "read failed with ConnectionError" in seen[1]


def test_the_cooldown_is_a_parameter_kept_through_a_url_and_pickling(redis_server):
    ledger = make_ledger(redis_server.url + "?cooldown=2.5&on_reset=adopt")
    assert isinstance(ledger, RedisLedger) and ledger._breaker.cooldown == 2.5
    assert pickle.loads(pickle.dumps(ledger))._breaker.cooldown == 2.5
    assert RedisLedger(redis_server.url)._breaker.cooldown == 1.0
    for bad in ("x", "-1", "inf", "nan"):
        with pytest.raises(ValueError, match="cooldown"):
            RedisLedger(redis_server.url + f"?cooldown={bad}")
    with pytest.raises(ValueError, match="cooldown"):
        RedisLedger(redis_server.url, cooldown=True)


def test_cooldown_0_sends_every_call(redis_server):
    """No breaker: each call while the server is frozen waits its own deadline."""
    ledger = RedisLedger(redis_server.url, timeout=0.2, deadline=0.5, cooldown=0)
    ledger.add("k", {"female": 1.0})
    redis_server.freeze()
    try:
        for _ in range(2):
            with pytest.raises(LedgerUnavailableError, match=REACHED):
                ledger.state("k")
    finally:
        redis_server.thaw()
    assert ledger._breaker.fast_failures == 0 and ledger.state("k").rankings == 1


def test_a_call_that_ran_out_of_a_deadline_the_queue_shortened_opens_no_circuit(redis_server):
    """It waited most of its deadline for a thread, then timed out: the queue took the time,
    not the server; the next call reaches for the server (it failed fast: the circuit was
    opened for every request on a healthy server under load)."""
    ledger = RedisLedger(redis_server.url, timeout=0.5, deadline=4.0)
    ledger.add("k", {"female": 1.0})
    seen: list[str] = []

    def late_request() -> None:
        QUEUED_AT.set(time.monotonic() - 3.9)  # 0.1 s of 4 left (a margin of 1.9 s to half)
        try:
            ledger.state("k")
        except LedgerUnavailableError as exc:
            seen.append(str(exc))

    redis_server.freeze()  # so the short budget surely runs out
    try:
        thread = threading.Thread(target=late_request)
        thread.start()
        thread.join(30)
        with pytest.raises(LedgerUnavailableError, match=REACHED):
            ledger.state("k")  # its own whole deadline: this one opens the circuit
    finally:
        redis_server.thaw()
    assert len(seen) == 1 and "deadline of 4 s passed" in seen[0]
    assert ledger._breaker.fast_failures == 0


def test_an_add_refused_by_the_open_breaker_in_a_fresh_thread_is_unavailable(redis_server):
    """``add`` from a thread that never called the ledger, while the circuit is open, raised
    ``AttributeError`` (it read whether the call sent anything before any call had said so):
    a caller's ``except LedgerUnavailableError`` missed it (an SRE trial)."""
    ledger = RedisLedger(redis_server.url, timeout=0.5, deadline=0.5, cooldown=60.0)
    ledger.add("s", {"a": 1.0})
    redis_server.freeze()
    try:
        with pytest.raises(LedgerUnavailableError):
            ledger.add("s", {"a": 1.0})  # the server found frozen: the circuit opens
        raised: list[BaseException] = []

        def fresh() -> None:
            try:
                ledger.add("s", {"a": 1.0})
            except BaseException as exc:  # the test reads what was raised
                raised.append(exc)

        thread = threading.Thread(target=fresh)
        thread.start()
        thread.join(30)
    finally:
        redis_server.thaw()
    (error,) = raised
    assert isinstance(error, LedgerUnavailableError), repr(error)
    assert FAST in str(error)
