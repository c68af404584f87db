"""An exposure ledger on a Redis server: shared by replicas on several machines.

Needs the ``redis`` client (``pip install 'fairrag[redis]'``), imported only when a
:class:`RedisLedger` is built.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlparse

from ..breaker import CircuitBreaker, check_cooldown
from ..errors import LedgerUnavailableError
from .base import (
    GENERATION_FIELD,
    MAX_GENERATION,
    MAX_TOTAL,
    QUEUED_AT,
    RANKINGS_FIELD,
    LedgerCorruptError,
    StoredLedger,
    _Damaged,
    _policy_suffix,
    check_count,
    check_generation,
    check_on_reset,
    check_seconds,
    check_total,
    new_generation,
    pop_url_param,
    shared_memory,
    split_stored,
)

__all__ = ["RedisLedger"]

_T = TypeVar("_T")

# KEYS: the stream's hash, the set of stream names, the update's token.
# ARGV: stream name, token lifetime (s), the generation mark the client saw ('' = none), a fresh
# mark, the fewest rankings the stream may hold ('' = any), then label, exposure, label, ...
# Runs atomically on the server. A stream whose mark is not the one the client saw (gone after
# a restart without persistence, or recreated), or holding fewer rankings than the client saw
# (restored from an RDB snapshot or an older copy), is left untouched. The token makes a resent
# update (after a connection lost while the reply was on its way) a no-op instead of a second
# increment; it holds the mark the update was applied under (read by _SETTLE_SCRIPT). Returns
# {'mark', the stream's mark or '', its count or ''} (the count after the
# update, or as found when nothing was applied), or {'damaged', field, value} when a stored
# value the update builds on is damaged: the mark not a whole number in [1, 2^52 + 1], a total
# the update increments not finite in [0, MAX_TOTAL], the count not a whole number in
# [0, MAX_TOTAL] (the read side's limits; the client names the damage). Those checks run before
# any write: a failing HINCRBYFLOAT mid-script would leave the mark and the earlier increments
# written (Redis scripts do not roll back). So does the type of the set of stream names: a set
# of another type returns {'wrongtype', its type, ''} before anything is written (its SADD, the
# script's last write, would fail after the increments).
_ADD_SCRIPT = f"""
local names = redis.call('TYPE', KEYS[2])['ok']
if names ~= 'set' and names ~= 'none' then
  return {{'wrongtype', names, ''}}
end
local mark = redis.call('HGET', KEYS[1], '{GENERATION_FIELD}')
local count = redis.call('HGET', KEYS[1], '{RANKINGS_FIELD}')
if ARGV[3] ~= '' and mark ~= ARGV[3] then
  return {{'mark', mark or '', count or ''}}
end
if mark and not (string.find(mark, '^[0-9]+$') and tonumber(mark) >= 1
                 and tonumber(mark) <= {MAX_GENERATION}) then
  return {{'damaged', '{GENERATION_FIELD}', mark}}
end
local limit = {MAX_TOTAL:.0f}
for i = 6, #ARGV, 2 do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then
    local n = tonumber(v)
    if not n or string.find(v, '[^0-9%.eE%+%-]') or not (n >= 0 and n <= limit) then
      return {{'damaged', ARGV[i], v}}
    end
  end
end
if count and (not string.find(count, '^[0-9]+$') or tonumber(count) > limit) then
  return {{'damaged', '{RANKINGS_FIELD}', count}}
end
if ARGV[5] ~= '' and tonumber(count or '0') < tonumber(ARGV[5]) then
  return {{'mark', mark or '', count or '0'}}
end
if not redis.call('SET', KEYS[3], mark or ARGV[4], 'NX', 'EX', ARGV[2]) then
  return {{'mark', mark or '', count or '0'}}
end
if not mark then
  mark = ARGV[4]
  redis.call('HSET', KEYS[1], '{GENERATION_FIELD}', mark)
end
for i = 6, #ARGV, 2 do
  redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
end
count = redis.call('HINCRBY', KEYS[1], '{RANKINGS_FIELD}', 1)
redis.call('SADD', KEYS[2], ARGV[1])
return {{'mark', mark, tostring(count)}}
"""
# KEYS: the stream's hash, the token of an add whose call raised. ARGV: token lifetime (s), then
# label, exposure, label, ... (the add's). Settles an add the client gave up on: a token not
# set yet is set to 'void' (the add never ran, and a late copy of it now finds its token taken
# and applies nothing); a token holding the mark of the stream as it is now (the add ran) has
# the add's exposure subtracted, the count kept (it only grows: a lower count would read as a
# rollback to every client that saw it), and becomes 'undone'. Nothing is written to a stream
# marked anew since ('gone') or holding less than the add's exposure ('damaged'). A token settled
# before ('was void', 'was undone': a settle whose reply was lost) is left as it is.
_SETTLE_SCRIPT = f"""
if redis.call('SET', KEYS[2], 'void', 'NX', 'EX', ARGV[1]) then
  return 'void'
end
local applied = redis.call('GET', KEYS[2])
if applied == 'void' or applied == 'undone' then
  return 'was ' .. applied
end
if redis.call('HGET', KEYS[1], '{GENERATION_FIELD}') ~= applied then
  redis.call('SET', KEYS[2], 'undone', 'KEEPTTL')
  return 'gone'
end
for i = 2, #ARGV, 2 do
  local v = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '')
  if not v or v < tonumber(ARGV[i + 1]) then
    return 'damaged'
  end
end
for i = 2, #ARGV, 2 do
  redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], '-' .. ARGV[i + 1])
end
redis.call('SET', KEYS[2], 'undone', 'KEEPTTL')
return 'undone'
"""
_RESET_SCRIPT = """
local names = redis.call('TYPE', KEYS[2])['ok']
if names ~= 'set' and names ~= 'none' then
  return names
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
"""

# The end (time.monotonic()) of the ledger call running in this thread, or absent: read by the
# sockets of the connections a RedisLedger builds, so every wait of a call (connect, send,
# each read of a reply trickling in, the retry's reconnect) is bounded by what is left of it;
# ``sent`` tells whether the call's work sent anything (no: the server never saw the request).
_CALL_END = threading.local()


def _left() -> float | None:
    """Seconds left of this thread's ledger call (``None``: no call running); raises
    ``TimeoutError`` (``socket.timeout``) once it is over."""
    end = getattr(_CALL_END, "end", None)
    if end is None:
        return None
    left = end - time.monotonic()
    if left <= 0:
        raise TimeoutError("the ledger call's deadline passed")
    return left


class _DeadlineSocket:
    """A connected socket whose sends and reads wait at most what is left of the call."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._timeout = sock.gettimeout()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def settimeout(self, value: float | None) -> None:
        self._timeout = value
        self._sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._timeout

    def _bound(self) -> None:
        left = _left()
        if left is not None:
            self._sock.settimeout(left if self._timeout is None else min(left, self._timeout))

    def recv(self, *args: Any) -> Any:
        self._bound()
        return self._sock.recv(*args)

    def recv_into(self, *args: Any) -> Any:
        self._bound()
        return self._sock.recv_into(*args)

    def sendall(self, *args: Any) -> Any:
        self._bound()
        _CALL_END.sent = True
        return self._sock.sendall(*args)


def _deadline_connection(base: type) -> type:
    """``base`` (a redis-py connection class) whose sockets keep the call's deadline."""

    def _connect(self: Any) -> Any:
        left = _left()
        timeout = self.socket_connect_timeout
        if left is not None and (timeout is None or left < timeout):
            self.socket_connect_timeout = left
        try:
            return _DeadlineSocket(base._connect(self))  # type: ignore[attr-defined]
        finally:
            self.socket_connect_timeout = timeout

    return type(f"Deadline{base.__name__}", (base,), {"_connect": _connect})


def redacted(url: str) -> str:
    """``url`` with its password written ``***`` (what an error message may show)."""
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    user = parsed.username or ""
    host = parsed.netloc.rsplit("@", 1)[-1]
    return parsed._replace(netloc=f"{user}:***@{host}").geturl()


def _check_database(url: str) -> None:
    """A ``ValueError`` naming ``url`` when its path is not a database number, or it gives the
    database twice (redis-py reads ``redis://host/x`` as database 0 and lets ``?db=`` override
    the path, silently)."""
    parsed = urlparse(url)
    shown = redacted(url)
    if parsed.scheme == "unix":
        return  # the path is the socket's; the database is ?db=
    path = parsed.path.strip("/")
    if path and not path.isdigit():
        raise ValueError(
            f"url {shown!r}: the path must be a database number (/0, /1, ...), got {path!r}"
        )
    if path and "db" in parse_qs(parsed.query):
        raise ValueError(f"url {shown!r} gives the database twice (/{path} and ?db=): give one")


class RedisLedger(StoredLedger):
    """Streams in Redis hashes, every update one atomic Lua script.

    A stream ``key`` is the hash ``<prefix>stream:<key>`` (field = encoded label, value = its
    exposure, ``#rankings`` = the count), incremented with ``HINCRBYFLOAT`` inside one script:
    concurrent replicas never lose an update and never see half of one. The stream names are
    the set ``<prefix>streams``.

    Failures: a server that is down, restarting or silent for ``timeout`` seconds raises
    :class:`~fairrag_core.errors.LedgerUnavailableError` naming the server, after one
    immediate retry on a fresh connection (so a connection broken by a restart is replaced,
    never reused). Each update carries a unique token (kept ``token_ttl`` seconds), so that
    retry can never count a ranking twice.

    Deadline: each call (``state``, ``add``, ``reset``, ``keys``) completes within ``deadline``
    seconds (default 5; also ``?deadline=SECONDS`` in the URL) or raises
    :class:`~fairrag_core.errors.LedgerUnavailableError` naming it: ``timeout`` bounds one
    socket wait, the deadline the whole call (connect, send, a reply trickling in byte by byte,
    a script reload, the retry). An ``add`` that raised may still have been applied on the
    server (a reply lost or late, a request held in the network); its ranking was not served,
    so the next call of this client (or of any client of the same server in this process)
    settles it first: an add that never ran is voided (its
    token taken, so a late copy applies nothing) and one that ran has its exposure subtracted
    (``updates_undone``; the stream's ``#rankings`` keeps it, a count only grows). Settling
    needs the token, kept ``token_ttl`` seconds: an add not settled within ``token_ttl`` minus
    ``deadline`` seconds of its call's start, or one the server cannot settle (the key holds
    another type, or the stream less than the add's exposure), is counted in
    ``updates_unsettled`` with a ``RuntimeWarning`` (it may hold one ranking not served). Only
    clients the ledger builds from ``url`` keep the deadline; a ``client`` of your own keeps
    its own timeouts (its adds are settled all the same).

    Lost streams: each stream's hash holds a generation mark (``#generation``, a random whole
    number set by the update that creates the stream). A client that saw a stream and finds it
    gone or marked anew (a server restarted without persistence, a flushed database, a stream
    reset by another client) raises :class:`~fairrag_core.ledger.LedgerResetError`, checked
    inside the update's script so nothing is applied to a stream that silently started over.
    Values are checked on read, and the fields an update increments inside its script before
    any write (:class:`~fairrag_core.ledger.LedgerCorruptError` names the field, or the key when
    it holds another Redis type).

    Shared in the process: every client built from a URL of the same server and database
    (``redis://host:port/db``, whatever its other options) shares the adds left to settle,
    ``updates_undone``, ``updates_unsettled`` and, per ``cooldown``, the circuit breaker; every
    such client of the same server, database, ``prefix`` and ``on_reset`` shares what it saw of
    the streams (marks and counts). A ``client`` given keeps its own (Sentinel's
    ``master_for`` and a cluster client describe no single server; copies of a component share
    it as they share this ledger object). So a client built anew from a URL, a copy, or a
    client rebuilt for each call (a LangChain ``configurable_fields`` call, ``model_copy``)
    behaves as the first one: it fails fast while
    the breaker is open, settles an add an earlier client gave up on, and notices a stream an
    earlier one saw lost or rolled back (docs/SPEC.md item 6, "Lost streams", "Deadlines"). A
    new process shares nothing; a forked child keeps what was seen of the streams but none of
    its parent's adds to settle (the parent settles them) and starts with closed breakers.

    Tokens are keys of their own (``<prefix>token:<uuid>``, about 100 bytes each) that expire
    after ``token_ttl`` seconds: at 1,000 rankings a second, about 6 MB with the default 60 s.
    Every key of a ledger carries the prefix's hash tag (``{ledger}`` by default), so one
    script's keys share a Redis Cluster slot; keep a hash tag in a prefix of your own.

    Give ``url`` (``redis://[:password@]host:port/db``) or a ready ``redis.Redis`` client
    (then its own timeouts and retries apply, and with ``decode_responses`` off).
    """

    _bounded = True
    _marked = True

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: Any = None,
        prefix: str = "fairrag:{ledger}:",
        timeout: float = 2.0,
        connect_timeout: float = 1.0,
        token_ttl: int = 60,
        on_reset: str = "raise",
        deadline: float = 5.0,
        cooldown: float = 1.0,
    ) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:
            raise ImportError(
                "RedisLedger needs the redis client: pip install 'fairrag[redis]'"
            ) from exc
        if client is None and isinstance(url, str):
            url, reset_in_url = pop_url_param(url, "on_reset")
            if reset_in_url is not None:
                if on_reset not in ("raise", reset_in_url):
                    raise ValueError(
                        f"on_reset={on_reset!r} and the URL's on_reset={reset_in_url!r} differ: "
                        "give one"
                    )
                on_reset = reset_in_url
            url, deadline = _seconds_in_url(url, "deadline", "> 0", deadline)
            url, cooldown = _seconds_in_url(url, "cooldown", ">= 0", cooldown)
        for name, value in (
            ("timeout", timeout),
            ("connect_timeout", connect_timeout),
            ("deadline", deadline),
        ):
            check_seconds(name, value)
        if isinstance(token_ttl, bool) or not isinstance(token_ttl, int) or token_ttl < 1:
            raise ValueError(f"token_ttl must be an int number of seconds >= 1, got {token_ttl!r}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {prefix!r}")
        self._builds_client = client is None
        if client is None:
            if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError(
                    f"url must be a Redis URL (redis://host:port/db, rediss://..., unix://...), "
                    f"got {url!r}"
                )
            scheme = url.split(":", 1)[0]
            base = {
                "rediss": redis.SSLConnection,
                "unix": redis.UnixDomainSocketConnection,
            }.get(scheme, redis.Connection)
            _check_database(url)
            try:  # a connection object is built, not connected: the URL's options checked now
                client = redis.Redis.from_url(
                    url,
                    connection_class=_deadline_connection(base),
                    socket_timeout=timeout,
                    socket_connect_timeout=connect_timeout,
                    retry=Retry(NoBackoff(), 1),
                    retry_on_error=[redis.ConnectionError, redis.TimeoutError],
                )
                pool = client.connection_pool
                pool.connection_class(**pool.connection_kwargs)
                for key, value in pool.connection_kwargs.items():
                    if isinstance(value, float) and not (math.isfinite(value) and value >= 0):
                        raise ValueError(f"{key} must be a finite number >= 0, got {value!r}")
                    if key in _WAITS and value is not None and not value > 0:
                        # 0 makes the socket non-blocking: every call would fail at once
                        raise ValueError(f"{key} must be a number of seconds > 0, got {value!r}")
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"url {redacted(url)!r}: the Redis client refuses it ({exc}); the ledger "
                    "takes on_reset, deadline and cooldown as query parameters, redis-py the "
                    "rest (db, socket_timeout, ...)"
                ) from None
        self.on_reset = check_on_reset(on_reset)
        self.deadline = float(deadline)
        self.url = url
        self.prefix = prefix
        self.token_ttl = token_ttl
        self.client = client
        server = _describe(client)
        self.location = server + _policy_suffix(self.on_reset)
        if self._builds_client:  # a URL names the server: its clients in the process share
            self._server = shared_memory(("redis", server), lambda: _ServerMemory(server))
        else:  # a client given (Sentinel's master_for, a cluster, a proxy): its own memory,
            # which copies of a component share as they share this ledger object (its
            # description may not tell two servers apart, nor one server's two clients)
            self._server = _ServerMemory(server)
            _OWN_MEMORIES.add(self._server)
        try:
            self._cooldown = check_cooldown(cooldown)
        except ValueError as exc:
            raise ValueError(f"{exc} (the circuit breaker's cool-down)") from None
        if self._builds_client:
            self._join("redis", server, prefix, self.on_reset)
        self._redis_error = redis.RedisError
        self._transport_errors = (redis.ConnectionError, redis.TimeoutError, OSError)
        self._add_script = client.register_script(_ADD_SCRIPT)
        self._reset_script = client.register_script(_RESET_SCRIPT)
        self._settle_script = client.register_script(_SETTLE_SCRIPT)
        self._streams = prefix + "streams"

    @property
    def updates_undone(self) -> int:
        """Adds whose calls raised, found applied and undone when settled (by any client of
        this server in this process: they share the adds left to settle)."""
        return self._server.updates_undone

    @property
    def updates_unsettled(self) -> int:
        """Adds whose calls raised that could not be settled (each with a ``RuntimeWarning``),
        by any client of this server in this process."""
        return self._server.updates_unsettled

    @property
    def _breaker(self) -> CircuitBreaker:
        """The circuit breaker of this server and cool-down, shared by every client of them in
        this process (a client rebuilt for each call fails fast as the first one would)."""
        return self._server.breaker(self._cooldown)

    def _stream(self, key: str) -> str:
        return f"{self.prefix}stream:{key}"

    def _call(self, operation: str, work: Callable[[], _T], key: str | None = None) -> _T:
        """``work()`` within the deadline, counted from when the request queued for a thread of
        the adapters' ledger pool (:func:`~fairrag_core.ledger.run_off_loop`) for the first
        call of that request; refused at once while the circuit breaker is open. A call that
        ran out of a deadline the queue took most of (it ran less than half of it) says nothing
        of the server: it opens no circuit."""
        _CALL_END.sent = False  # nothing sent yet: a call refused below sent nothing
        now = time.monotonic()
        queued = QUEUED_AT.get()
        if queued is not None:
            QUEUED_AT.set(None)  # the wait counts once, against the request's first call
            if queued + self.deadline <= now:
                raise LedgerUnavailableError(
                    f"Redis ledger at {self.location}: {operation} waited {now - queued:.1f} s "
                    f"for a thread of the ledger pool, past its deadline of {self.deadline:g} s; "
                    "nothing was sent (more requests wait on the ledger than it has threads)"
                )
        breaker = self._breaker if self._cooldown else None  # cooldown 0: none
        if breaker is not None:
            breaker.check(operation)
        _CALL_END.end = min(now, queued or now) + self.deadline
        _CALL_END.sent = False
        try:
            self._settle()
            _CALL_END.sent = False  # set by a send of the work itself
            result = work()
        except self._transport_errors as exc:
            late = getattr(_CALL_END, "end", 0.0) <= time.monotonic()
            passed = f" (the call's deadline of {self.deadline:g} s passed)" if late else ""
            if breaker is not None:
                # a deadline the queue took most of: the server had less than half of it
                if late and time.monotonic() - now < self.deadline / 2:
                    breaker.abandoned()  # the queue took the time, not the server
                else:
                    breaker.failed(exc, f"{operation}: {type(exc).__name__}{passed}")
            raise LedgerUnavailableError(
                f"Redis ledger at {self.location} is unavailable: {operation} failed with "
                f"{type(exc).__name__}: {exc or 'no detail'}{passed}; start the server or check "
                "the URL (the ledger reconnects on the next call)"
            ) from exc
        except self._redis_error as exc:
            if breaker is not None:
                breaker.succeeded()  # the server answered, with an error of its own
            if key is not None and "WRONGTYPE" in str(exc):
                raise self._wrong_type(key) from exc
            raise LedgerUnavailableError(
                f"Redis ledger at {self.location} refused {operation}: {type(exc).__name__}: {exc}"
            ) from exc
        except Exception:
            if breaker is not None:
                breaker.succeeded()  # the server answered (a reset stream, a damaged value)
            raise
        except BaseException:
            if breaker is not None:
                breaker.abandoned()  # stopped (KeyboardInterrupt): nothing learnt of the server
            raise
        finally:
            _CALL_END.end = None
        if breaker is not None:
            breaker.succeeded()
        return result

    def _settle(self) -> None:
        """Settle the adds whose calls raised (see the class docstring), oldest first; one
        that cannot be settled now stays for the next call. The adds left to settle are the
        server's, shared by every client of it in this process: a client rebuilt for each
        call settles the add an earlier one gave up on."""
        server = self._server
        if not server.pending:
            return
        with server.lock:
            pending, server.pending = server.pending, []
        try:
            while pending:
                since, stream, token, args, tried, ttl = pending[0]
                # The token lives ttl (the adding client's token_ttl) from the add's run (after
                # ``since``, the add call's start); the settle reaches the server within this
                # call's deadline.
                if time.monotonic() - since + self.deadline >= ttl:
                    with server.lock:
                        server.updates_unsettled += 1
                    warnings.warn(
                        f"Redis ledger at {self.location}: an add whose call raised was not "
                        f"settled within token_ttl={ttl} s; {stream!r} may hold "
                        "one ranking that was not served",
                        RuntimeWarning,
                        stacklevel=4,
                    )
                else:
                    pending[0] = (since, stream, token, args, True, ttl)
                    try:
                        done = self._settle_script(keys=[stream, token], args=[ttl, *args])
                    except self._transport_errors:
                        raise  # the server is still out of reach: settle on a later call
                    except self._redis_error:
                        done = "refused"  # e.g. the key holds another type
                    done = done.decode() if isinstance(done, bytes) else done
                    if done == "undone" or (done == "was undone" and tried):
                        with server.lock:
                            server.updates_undone += 1
                    elif done in ("refused", "damaged"):
                        with server.lock:
                            server.updates_unsettled += 1
                        warnings.warn(
                            f"Redis ledger at {self.location}: an add whose call raised could "
                            f"not be settled ({done}: the key holds another type, or the stream "
                            f"less than the add's exposure); {stream!r} may hold one ranking "
                            "that was not served",
                            RuntimeWarning,
                            stacklevel=4,
                        )
                pending.pop(0)
        finally:
            if pending:
                with server.lock:
                    server.pending[:0] = pending

    def _wrong_type(self, key: str) -> LedgerCorruptError:
        name = self._stream(key)
        try:
            kind = self.client.type(name)
            kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        except self._redis_error:
            kind = "another type"
        return LedgerCorruptError(
            f"{type(self).__name__} at {self.location}: stream {key!r} is damaged: the Redis key "
            f"{name!r} holds a {kind}, not a hash. Nothing was drawn from it or added to it; "
            f"delete the key or reset the stream (ledger.reset({key!r}))",
            ledger=self.location,
            key=key,
        )

    def _read_marked(self, key: str) -> tuple[dict[Any, object], object, object]:
        stored = self._call("read", lambda: self.client.hgetall(self._stream(key)), key)
        return split_stored(
            (_text(raw_label), raw_value) for raw_label, raw_value in stored.items()
        )

    def _add_marked(
        self,
        key: str,
        exposure: dict[str, float],
        expected: int | None,
        fresh: int,
        floor: int | None = None,
    ) -> tuple[object, object]:
        token = f"{self.prefix}token:{uuid.uuid4().hex}"
        args: list[Any] = [
            key,
            self.token_ttl,
            "" if expected is None else str(expected),
            fresh,
            "" if floor is None else str(floor),
        ]
        for label, value in exposure.items():
            args += [label, repr(float(value))]
        started = time.monotonic()
        try:
            found = self._call(
                "add",
                lambda: self._add_script(keys=[self._stream(key), self._streams, token], args=args),
                key,
            )
        except LedgerUnavailableError as exc:
            may_have_run = not self._builds_client or _CALL_END.sent
            if isinstance(exc.__cause__, self._transport_errors) and may_have_run:
                server = self._server
                with server.lock:
                    server.pending.append(
                        (started, self._stream(key), token, args[5:], False, self.token_ttl)
                    )
            raise
        if found[0] in (b"wrongtype", "wrongtype"):  # nothing was written
            raise self._names_damaged(found[1], key)
        return _script_reply(found)

    def _add(self, key: str, exposure: dict[str, float]) -> None:
        self._add_marked(key, exposure, None, new_generation())

    def _reset(self, key: str) -> None:
        done = self._call(
            "reset",
            lambda: self._reset_script(keys=[self._stream(key), self._streams], args=[key]),
        )
        if done != 1:  # the set of stream names holds another type: nothing was deleted
            raise self._names_damaged(done, key)

    def _keys(self) -> Iterable[str]:
        def members() -> Any:
            try:
                return self.client.smembers(self._streams)
            except self._redis_error as exc:
                if "WRONGTYPE" not in str(exc):
                    raise
                return _NamesDamaged(self.client.type(self._streams))

        found = self._call("list keys", members)
        if isinstance(found, _NamesDamaged):
            raise self._names_damaged(found.kind)
        return [m.decode() if isinstance(m, bytes) else m for m in found]

    def _names_damaged(self, kind: object, key: str = "") -> LedgerCorruptError:
        """The set of stream names (``<prefix>streams``) holds ``kind``, another Redis type."""
        kind = kind.decode() if isinstance(kind, bytes) else kind
        return LedgerCorruptError(
            f"{type(self).__name__} at {self.location}: the Redis key {self._streams!r} (the set "
            f"of stream names) holds a {kind}, not a set. Nothing was added, reset or listed; "
            "delete that key (streams are listed again as they are next added)",
            ledger=self.location,
            key=key,
        )

    def close(self) -> None:
        self.client.close()

    def __getstate__(self) -> dict:
        return {
            "url": self.url,
            "prefix": self.prefix,
            "token_ttl": self.token_ttl,
            "on_reset": self.on_reset,
            "deadline": self.deadline,
            "cooldown": self._cooldown,
            **self._seen(),
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(  # type: ignore[misc]
            state["url"],
            prefix=state["prefix"],
            token_ttl=state["token_ttl"],
            on_reset=state.get("on_reset", "raise"),
            deadline=state.get("deadline", 5.0),
            cooldown=state.get("cooldown", 1.0),
        )
        self._learn(state)


def _seconds_in_url(url: str, name: str, accepted: str, given: float) -> tuple[str, float]:
    """``url`` without its ``name=SECONDS`` parameter, and those seconds (else ``given``)."""
    url, in_url = pop_url_param(url, name)
    if in_url is None:
        return url, given
    try:
        return url, float(in_url)
    except ValueError:
        raise ValueError(
            f"{name} in the ledger URL must be a number of seconds {accepted}, got {in_url!r}"
        ) from None


class _ServerMemory:
    """What this process keeps of one Redis server and database (``redis://host:port/db``),
    shared by every client of it (docs/SPEC.md item 6, "Deadlines"): the adds whose calls
    raised, left to settle (``pending``: the add call's start, the stream's key, the token,
    the label/exposure arguments, whether a settle was tried, the token's lifetime), the counts
    of those undone and unsettled, and a circuit breaker per cool-down. A client built anew,
    a copy or a client rebuilt for each call thus settles what an earlier one left and fails
    fast while an earlier one found the server down. A forked child starts with none of its
    parent's pending adds (the parent settles them) and closed breakers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.pending: list[tuple[float, str, str, list[Any], bool, int]] = []
        self.updates_undone = 0
        self.updates_unsettled = 0
        self._breakers: dict[float, CircuitBreaker] = {}

    def breaker(self, cooldown: float) -> CircuitBreaker:
        """The breaker of this server for ``cooldown`` (a ``ValueError`` for a bad one)."""
        cooldown = check_cooldown(cooldown)
        found = self._breakers.get(cooldown)
        if found is None:
            with self.lock:
                found = self._breakers.get(cooldown)
                if found is None:
                    found = CircuitBreaker(
                        f"Redis ledger at {self.name}", cooldown, LedgerUnavailableError
                    )
                    self._breakers[cooldown] = found
        return found

    def after_fork(self) -> None:
        """In a forked child: new locks, no pending adds, closed breakers."""
        self.lock = threading.Lock()
        self.pending = []
        self._breakers = {}


_OWN_MEMORIES: weakref.WeakSet[_ServerMemory] = weakref.WeakSet()
"""The memories of ledgers given their client (not in the process-wide registry), renewed in
a forked child as the registry's are."""


def _renew_own_in_child() -> None:
    for memory in list(_OWN_MEMORIES):
        memory.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_own_in_child)


_WAITS = ("socket_timeout", "socket_connect_timeout")
"""The URL's waits, in seconds: 0 would make every call fail at once."""


@dataclass(frozen=True)
class _NamesDamaged:
    """SMEMBERS found the set of stream names holding another type, ``kind``."""

    kind: object


def _script_reply(found: Any) -> tuple[object, object]:
    """``(mark, count)`` of the add script's reply (``None`` for ''); a refused damaged value
    raises :class:`_Damaged` naming its field."""
    kind = found[0].decode() if isinstance(found[0], bytes) else found[0]
    first, second = found[1], found[2]
    if kind == "damaged":  # the script refused a damaged value, wrote nothing
        field = first.decode() if isinstance(first, bytes) else str(first)
        value = second
        if field == GENERATION_FIELD:
            check_generation(value)
        elif field == RANKINGS_FIELD:
            check_count(value)
        else:
            check_total(field, value)
        # Python reads it as a number, Redis cannot increment it (e.g. '1_0', ' 5').
        raise _Damaged(field, f"holds {value!r:.60}, not a number Redis can increment")
    return (first or None), (second or None)


def _text(raw_label: object) -> object:
    """A stored field name as text; bytes that are not UTF-8 kept as bytes (reported as a
    label that is not one)."""
    if isinstance(raw_label, bytes):
        try:
            return raw_label.decode()
        except UnicodeDecodeError:
            pass
    return raw_label


def _describe(client: Any) -> str:
    """``redis://host:port/db`` of a client (never its password)."""
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        return repr(client)
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    return f"redis://{host}:{port}/{kwargs.get('db', 0)}"
