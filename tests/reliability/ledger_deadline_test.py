"""The Redis ledger's total deadline per call, against a real redis-server behind a loopback TCP
proxy that trickles replies or holds requests: a call completes within its deadline or raises
``LedgerUnavailableError`` naming it, and an add that raised leaves no ranking counted that was
not served (settled by the client's next call)."""

from __future__ import annotations

import pickle
import socket
import threading
import time
import warnings

import pytest

from fairrag_core import LedgerUnavailableError
from fairrag_core.ledger import LedgerCorruptError, RedisLedger, make_ledger
from tests.redis_server import HOST

WAIT = 10.0  # every wait of the proxy and the test is bounded by this many seconds


class TrickleProxy:
    """A loopback TCP proxy to a Redis server. ``reply_gap`` > 0 sends replies one byte at a time,
    that many seconds apart (each gap shorter than the client's socket timeout, so only a total
    deadline stops the call); ``hold_next()`` holds the next request sent (and what follows on
    its connection) until ``release()``. ``replied_after_release`` is set when the server
    answers a held request."""

    def __init__(self, port: int) -> None:
        self.upstream = (HOST, port)
        self.reply_gap = 0.0
        self.trickle_every = 1  # with reply_gap: trickle every n-th reply chunk, pass the rest
        self._replies_seen = 0
        self._hold_next = False
        self._released = threading.Event()
        self.replied_after_release = threading.Event()
        self._closed = threading.Event()
        self._listener = socket.create_server((HOST, 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def hold_next(self) -> None:
        self._hold_next = True

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self._closed.set()
        self._released.set()
        for thread in self._threads:
            thread.join(WAIT)
        self._listener.close()

    def _start(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            server = socket.create_connection(self.upstream, timeout=WAIT)
            client.settimeout(0.1)
            server.settimeout(0.1)
            held = {"on": False}
            self._start(self._requests, client, server, held)
            self._start(self._replies, server, client, held)

    def _requests(self, client: socket.socket, server: socket.socket, held: dict) -> None:
        kept = b""
        try:
            while not self._closed.is_set():
                try:
                    data = client.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    data = b""
                if data and self._hold_next and not held["on"]:
                    self._hold_next = False
                    held["on"] = True
                if held["on"] and not self._released.is_set():
                    kept += data
                    if data:
                        continue
                    self._released.wait(WAIT)  # the client left: deliver what it sent, late
                if kept:
                    server.sendall(kept)
                    kept = b""
                if not data:
                    server.shutdown(socket.SHUT_WR)
                    return
                server.sendall(data)
        except OSError:
            return

    def _replies(self, server: socket.socket, client: socket.socket, held: dict) -> None:
        deadline = time.monotonic() + 6 * WAIT
        try:
            while not self._closed.is_set() and time.monotonic() < deadline:
                try:
                    data = server.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                if held["on"] and self._released.is_set():
                    self.replied_after_release.set()
                self._replies_seen += 1  # one pump thread per connection: a rough count
                if self.reply_gap <= 0 or self._replies_seen % self.trickle_every:
                    client.sendall(data)
                    continue
                for index in range(len(data)):
                    client.sendall(data[index : index + 1])
                    time.sleep(self.reply_gap)
        except OSError:
            return
        finally:
            client.close()
            server.close()


def _stored(redis_server, key: str = "k"):
    direct = RedisLedger(redis_server.url)
    try:
        return direct.state(key)
    finally:
        direct.close()


def test_a_reply_trickling_in_raises_naming_the_deadline_and_the_next_call_undoes_its_add(
    redis_server, proxy
):
    # Each byte of the reply arrives 0.1 s after the last, well within the 1 s socket timeout:
    # before the deadline, an add whose ~40-byte reply trickled took 4 s and succeeded.
    ledger = RedisLedger(proxy.url, timeout=1.0, deadline=1.0, cooldown=0)
    ledger.add("k", {"female": 1.0})
    proxy.reply_gap = 0.1
    with pytest.raises(
        LedgerUnavailableError, match=r"add failed with .* \(the call's deadline of 1 s passed\)"
    ):
        ledger.add("k", {"female": 2.0, "male": 4.0})
    stored = _stored(redis_server)
    assert stored.totals == {"female": 3.0, "male": 4.0}  # the server ran it; it was not served
    proxy.reply_gap = 0.0
    assert ledger.state("k").totals == {"female": 1.0, "male": 0.0}  # settled first
    assert ledger.updates_undone == 1 and ledger.updates_unsettled == 0
    stored = _stored(redis_server)
    assert stored.totals == {"female": 1.0, "male": 0.0}
    assert stored.rankings == 2  # the count keeps the undone add: it only grows
    ledger.add("k", {"female": 1.0})
    assert _stored(redis_server).totals == {"female": 2.0, "male": 0.0}
    ledger.close()


def _raise_an_applied_add(ledger: RedisLedger, proxy: TrickleProxy) -> None:
    """An add the server ran whose reply trickled past the deadline (left to settle)."""
    ledger.add("k", {"female": 1.0})
    proxy.reply_gap = 0.1
    with pytest.raises(LedgerUnavailableError, match=r"deadline of 1 s passed"):
        ledger.add("k", {"female": 2.0})
    proxy.reply_gap = 0.0


def test_an_add_the_server_finds_damaged_when_settling_is_counted_unsettled_and_warned(
    redis_server, proxy
):
    ledger = RedisLedger(proxy.url, timeout=1.0, deadline=1.0, cooldown=0)
    _raise_an_applied_add(ledger, proxy)
    direct = RedisLedger(redis_server.url)
    field = next(f for f in direct.client.hkeys(direct._stream("k")) if b"female" in f)
    direct.client.hset(direct._stream("k"), field, "1")  # less than the add's 2: 'damaged'
    direct.close()
    with pytest.warns(RuntimeWarning, match=r"could not be settled \(damaged"):
        assert ledger.state("k").totals == {"female": 1.0}
    assert ledger.updates_unsettled == 1 and ledger.updates_undone == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ledger.state("k")  # settled once: no second warning
    ledger.close()


def test_an_add_the_server_refuses_to_settle_is_counted_unsettled_and_warned(redis_server, proxy):
    ledger = RedisLedger(proxy.url, timeout=1.0, deadline=1.0, cooldown=0)
    _raise_an_applied_add(ledger, proxy)
    direct = RedisLedger(redis_server.url)
    direct.client.delete(direct._stream("k"))
    direct.client.set(direct._stream("k"), "not a hash")  # the settle script's HGET errs
    direct.close()
    with pytest.warns(RuntimeWarning, match=r"could not be settled \(refused"):
        with pytest.raises(LedgerCorruptError, match="holds a string"):
            ledger.state("k")
    assert ledger.updates_unsettled == 1 and ledger.updates_undone == 0
    ledger.close()


def test_a_held_request_raises_and_a_late_copy_of_it_applies_nothing(redis_server, proxy):
    ledger = RedisLedger(proxy.url, timeout=1.0, deadline=1.0, cooldown=0)
    ledger.add("k", {"female": 1.0})
    proxy.hold_next()
    with pytest.raises(LedgerUnavailableError, match=r"deadline of 1 s passed"):
        ledger.add("k", {"female": 2.0})
    assert ledger.state("k").totals == {"female": 1.0}  # settles: the add's token voided
    assert ledger.updates_undone == 0
    proxy.release()  # the held add reaches the server now, after its client gave up
    assert proxy.replied_after_release.wait(WAIT)
    stored = _stored(redis_server)
    assert stored.totals == {"female": 1.0} and stored.rankings == 1  # it applied nothing
    ledger.close()


def test_a_server_that_never_answers_raises_within_the_deadline_not_per_socket_wait(
    redis_server, proxy
):
    ledger = RedisLedger(proxy.url, timeout=5.0, deadline=1.0, cooldown=0)
    ledger.add("k", {"female": 1.0})
    proxy.hold_next()
    with pytest.raises(LedgerUnavailableError, match=r"read failed with .* deadline of 1 s passed"):
        ledger.state("k")
    proxy.release()
    assert ledger.state("k").totals == {"female": 1.0}
    ledger.close()


def test_the_deadline_is_a_parameter_of_the_url_and_survives_pickling(redis_server):
    ledger = make_ledger(redis_server.url + "?deadline=0.25&on_reset=adopt")
    assert isinstance(ledger, RedisLedger)
    assert ledger.deadline == 0.25 and ledger.on_reset == "adopt"
    ledger.add("k", {"female": 1.0})
    copy = pickle.loads(pickle.dumps(ledger))
    assert copy.deadline == 0.25 and copy.state("k").totals == {"female": 1.0}
    assert RedisLedger(redis_server.url + "?on_reset=raise&deadline=2").deadline == 2.0
    assert RedisLedger(redis_server.url).deadline == 5.0
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(ValueError, match="deadline"):
            RedisLedger(redis_server.url + f"?deadline={bad}")
    with pytest.raises(ValueError, match="deadline must be a number of seconds > 0"):
        RedisLedger(redis_server.url, deadline=True)
    copy.close()
    ledger.close()


def test_a_frozen_server_raises_at_the_deadline_and_counts_only_served_rankings(redis_server):
    # A frozen (SIGSTOP) server accepts the request in its socket buffer and runs it once thawed,
    # after its client gave up: the next call settles it, whichever of the two runs first.
    ledger = RedisLedger(redis_server.url, timeout=1.0, deadline=1.0, cooldown=0)
    ledger.add("k", {"female": 1.0})
    redis_server.freeze()
    try:
        with pytest.raises(LedgerUnavailableError, match=r"deadline of 1 s passed"):
            ledger.add("k", {"female": 2.0})
    finally:
        redis_server.thaw()
    assert ledger.state("k").totals == {"female": 1.0}
    ledger.add("k", {"female": 1.0})
    assert _stored(redis_server).totals == {"female": 2.0}
    assert ledger.updates_undone in (0, 1) and ledger.updates_unsettled == 0
    ledger.close()


def test_adds_to_a_server_that_is_down_leave_nothing_to_settle(redis_server):
    # Nothing was sent (connection refused): no add to settle, so none outlives its token
    # (token_ttl=1) and warns as unsettled once the server is back.
    ledger = RedisLedger(
        redis_server.url, timeout=0.5, connect_timeout=0.2, deadline=1.0, token_ttl=1, cooldown=0
    )
    ledger.add("k", {"female": 1.0})
    redis_server.stop()
    for _ in range(3):
        with pytest.raises(LedgerUnavailableError, match=r"add failed with ConnectionError"):
            ledger.add("k", {"female": 2.0})
    time.sleep(1.1)  # past token_ttl
    redis_server.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ledger.state("k").totals == {"female": 1.0}
    assert ledger.updates_undone == 0 and ledger.updates_unsettled == 0
    ledger.close()


def test_8_threads_with_every_4th_reply_trickled_count_exactly_the_served_rankings(
    redis_server, proxy
):
    ledger = RedisLedger(proxy.url, timeout=1.0, deadline=1.0, cooldown=0)
    ledger.add("k", {"female": 0.0})
    proxy.reply_gap, proxy.trickle_every = 0.1, 4
    served: list[float] = []
    failed: list[float] = []

    def work(thread: int) -> None:
        for i in range(10):
            value = float(thread * 100 + i + 1)
            try:
                ledger.add("k", {"female": value})
            except LedgerUnavailableError as exc:
                assert "deadline of 1 s passed" in str(exc)
                failed.append(value)
            else:
                served.append(value)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(6 * WAIT)
    assert len(served) + len(failed) == 80 and failed
    proxy.reply_gap = 0.0
    assert ledger.state("k").totals == {"female": sum(served)}  # settled the failed adds first
    stored = _stored(redis_server)
    assert stored.totals == {"female": sum(served)}
    # A failed add ran and was undone, or never ran (a new connection's handshake reply
    # trickled first) and was voided; the count holds the served ones and the undone ones.
    assert ledger.updates_undone <= len(failed)
    assert stored.rankings == 1 + len(served) + ledger.updates_undone
    ledger.close()


def test_pop_url_param_takes_one_parameter_and_keeps_the_others():
    from fairrag_core.ledger.base import pop_url_param

    url = "redis://h:1/0"
    assert pop_url_param(url, "deadline") == (url, None)
    assert pop_url_param(url + "?deadline=2", "deadline") == (url, "2")
    assert pop_url_param(url + "?deadline=2&on_reset=adopt", "deadline") == (
        url + "?on_reset=adopt",
        "2",
    )
    assert pop_url_param(url + "?on_reset=adopt&deadline=2", "deadline") == (
        url + "?on_reset=adopt",
        "2",
    )
    assert pop_url_param(url + "?a=1&deadline=2&b=3", "deadline") == (url + "?a=1&b=3", "2")
    assert pop_url_param(url + "?xdeadline=2", "deadline") == (url + "?xdeadline=2", None)
