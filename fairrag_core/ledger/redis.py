"""An exposure ledger on a Redis server: shared by replicas on several machines.

Needs the ``redis`` client (``pip install 'fairrag[redis]'``), imported only when a
:class:`RedisLedger` is built.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..errors import LedgerUnavailableError
from .base import (
    GENERATION_FIELD,
    MAX_GENERATION,
    MAX_TOTAL,
    RANKINGS_FIELD,
    LedgerCorruptError,
    StoredLedger,
    _Damaged,
    _policy_suffix,
    check_count,
    check_generation,
    check_on_reset,
    check_total,
    new_generation,
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
# increment. Returns {'mark', the stream's mark or '', its count or ''} (the count after the
# update, or as found when nothing was applied), or {'damaged', field, value} when a stored
# value the update builds on is damaged: the mark not a whole number in [1, 2^52 + 1], a total
# the update increments not finite in [0, MAX_TOTAL], the count not a whole number in
# [0, MAX_TOTAL] (the read side's limits; the client names the damage). Those checks run before
# any write: a failing HINCRBYFLOAT mid-script would leave the mark and the earlier increments
# written (Redis scripts do not roll back).
_ADD_SCRIPT = f"""
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
if not redis.call('SET', KEYS[3], '1', 'NX', 'EX', ARGV[2]) then
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
_RESET_SCRIPT = """
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
"""


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
    retry can never count a ranking twice. If the server dies while the reply is on its way,
    the error is raised though the update may have been applied whole: never half.

    Lost streams: each stream's hash holds a generation mark (``#generation``, a random whole
    number set by the update that creates the stream). A client that saw a stream and finds it
    gone or marked anew (a server restarted without persistence, a flushed database, a stream
    reset by another client) raises :class:`~fairrag_core.ledger.LedgerResetError`, checked
    inside the update's script so nothing is applied to a stream that silently started over.
    Values are checked on read, and the fields an update increments inside its script before
    any write (:class:`~fairrag_core.ledger.LedgerCorruptError` names the field, or the key when
    it holds another Redis type).

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
    ) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:
            raise ImportError(
                "RedisLedger needs the redis client: pip install 'fairrag[redis]'"
            ) from exc
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        if isinstance(token_ttl, bool) or not isinstance(token_ttl, int) or token_ttl < 1:
            raise ValueError(f"token_ttl must be an int number of seconds >= 1, got {token_ttl!r}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {prefix!r}")
        if client is None:
            if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError(
                    f"url must be a Redis URL (redis://host:port/db, rediss://..., unix://...), "
                    f"got {url!r}"
                )
            client = redis.Redis.from_url(
                url,
                socket_timeout=timeout,
                socket_connect_timeout=connect_timeout,
                retry=Retry(NoBackoff(), 1),
                retry_on_error=[redis.ConnectionError, redis.TimeoutError],
            )
        self.on_reset = check_on_reset(on_reset)
        self.url = url
        self.prefix = prefix
        self.token_ttl = token_ttl
        self.client = client
        self.location = _describe(client) + _policy_suffix(self.on_reset)
        self._redis_error = redis.RedisError
        self._transport_errors = (redis.ConnectionError, redis.TimeoutError, OSError)
        self._add_script = client.register_script(_ADD_SCRIPT)
        self._reset_script = client.register_script(_RESET_SCRIPT)
        self._streams = prefix + "streams"

    def _stream(self, key: str) -> str:
        return f"{self.prefix}stream:{key}"

    def _call(self, operation: str, work: Callable[[], _T], key: str | None = None) -> _T:
        try:
            return work()
        except self._transport_errors as exc:
            raise LedgerUnavailableError(
                f"Redis ledger at {self.location} is unavailable: {operation} failed with "
                f"{type(exc).__name__}: {exc or 'no detail'}; start the server or check the "
                "URL (the ledger reconnects on the next call)"
            ) from exc
        except self._redis_error as exc:
            if key is not None and "WRONGTYPE" in str(exc):
                raise self._wrong_type(key) from exc
            raise LedgerUnavailableError(
                f"Redis ledger at {self.location} refused {operation}: {type(exc).__name__}: {exc}"
            ) from exc

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
        found = self._call(
            "add",
            lambda: self._add_script(keys=[self._stream(key), self._streams, token], args=args),
            key,
        )
        return _script_reply(found)

    def _add(self, key: str, exposure: dict[str, float]) -> None:
        self._add_marked(key, exposure, None, new_generation())

    def _reset(self, key: str) -> None:
        self._call(
            "reset",
            lambda: self._reset_script(keys=[self._stream(key), self._streams], args=[key]),
        )

    def _keys(self) -> Iterable[str]:
        members = self._call("list keys", lambda: self.client.smembers(self._streams))
        return [m.decode() if isinstance(m, bytes) else m for m in members]

    def close(self) -> None:
        self.client.close()

    def __getstate__(self) -> dict:
        return {
            "url": self.url,
            "prefix": self.prefix,
            "token_ttl": self.token_ttl,
            "on_reset": self.on_reset,
            "generations": dict(self._generations),
            "counts": dict(self._counts),
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(  # type: ignore[misc]
            state["url"],
            prefix=state["prefix"],
            token_ttl=state["token_ttl"],
            on_reset=state.get("on_reset", "raise"),
        )
        self._generations.update(state.get("generations", {}))
        self._counts.update(state.get("counts", {}))


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
