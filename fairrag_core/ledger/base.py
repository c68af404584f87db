"""The exposure-ledger interface: named running totals of the exposure each group was served."""

from __future__ import annotations

import contextvars
import json
import math
import os
import re
import reprlib
import secrets
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np

from ..errors import LedgerUnavailableError
from ..validation import check_nesting

__all__ = [
    "DEFAULT_KEY",
    "GENERATION_FIELD",
    "MAX_RANKING_EXPOSURE",
    "MAX_TOTAL",
    "RANKINGS_FIELD",
    "RESET_POLICIES",
    "ExposureLedger",
    "LedgerCorruptError",
    "LedgerResetError",
    "LedgerState",
    "check_key",
    "check_on_reset",
    "decode_label",
    "encode_exposure",
    "encode_label",
]

DEFAULT_KEY = "default"
"""The stream a ranker records into when it is given no ``ledger_key``."""
RANKINGS_FIELD = "#rankings"
"""Where each stored stream keeps its count of rankings; never the encoding of a label."""
GENERATION_FIELD = "#generation"
"""Where a stored stream keeps its generation mark (written once, when the stream is created)."""
MAX_RANKING_EXPOSURE = 1e6
"""The most exposure one ranking may add (all groups): every exposure model's weights are at
most 1, so this is a ranking of a million positions. Lets a read refuse totals no stream of
accepted rankings can reach (docs/SPEC.md item 6, "Damaged values")."""
MAX_TOTAL = float(2**53)
"""The largest stored total or count read as valid: beyond it, adding a ranking's exposure
(weights of at most 1) is lost in the rounding, so no stream reaches it by its rankings."""


RESET_POLICIES = ("raise", "adopt")
"""What a ledger does when a stream it saw was lost, replaced or rolled back (``on_reset``):
``"raise"`` :class:`LedgerResetError` until ``reset``/``adopt`` is called, or ``"adopt"`` the
stream as stored now with a ``RuntimeWarning`` and go on (docs/SPEC.md item 6, "Lost
streams")."""


def check_on_reset(value: object) -> str:
    """A reset policy, one of :data:`RESET_POLICIES`."""
    if value not in RESET_POLICIES:
        raise ValueError(
            f"on_reset must be 'raise' (LedgerResetError until ledger.reset/adopt) or 'adopt' "
            f"(continue from what is stored, with a warning), got {value!r}"
        )
    return str(value)


QUEUED_AT: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "fairrag_ledger_queued_at", default=None
)
"""When (``time.monotonic()``) the request running in this context queued for a thread of the
adapters' ledger pool (:func:`~fairrag_core.ledger.run_off_loop`); a ledger with a deadline
counts that wait against its first call, so a request never waits more than the deadline
behind others (docs/SPEC.md, "Beyond the paper" → reliability)."""


def pop_url_param(url: str, name: str) -> tuple[str, str | None]:
    """``(url without its query parameter name=..., the parameter's text or None)``; the other
    parameters are kept as they were (``?a=1&name=2&b=3`` -> ``?a=1&b=3``)."""
    match = re.search(rf"([?&]){re.escape(name)}=([^&]*)(&?)", url)
    if match is None:
        return url, None
    separator = match.group(1) if match.group(3) else ""
    return url[: match.start()] + separator + url[match.end() :], match.group(2)


def _policy_suffix(on_reset: str) -> str:
    """What a ledger's location adds for its policy (``make_ledger`` reads it back)."""
    return "" if on_reset == "raise" else f"?on_reset={on_reset}"


class LedgerResetError(LedgerUnavailableError):
    """The stream this ledger client had seen was lost, replaced or rolled back (docs/SPEC.md
    item 6, "Lost streams").

    Every stored stream carries a generation mark, written once when it is created; the client
    remembers the mark of each stream it read or wrote, and so does every other client of the
    same store in this process (they share one :class:`StreamMemory`: a client rebuilt for each
    call, or a copy, knows what the first one saw). If the stream vanished (a Redis server
    restarted without persistence, a SQLite file deleted or replaced) or carries another mark
    (recreated, or reset by another client), or holds fewer rankings than the client last saw
    (restored from an older copy: a Redis RDB snapshot, a backup of the SQLite file), the next
    :meth:`ExposureLedger.state` or :meth:`ExposureLedger.add` of that stream raises this error
    and applies nothing, so no
    ranking is drawn from, or added to, a stream that silently started over. Make the reset
    explicit with ``ledger.reset(key)`` (start the stream over from zero, deleting what is
    stored now) or ``ledger.adopt(key)`` (continue from what is stored now, e.g. a stream another
    replica already restarted). A :class:`~fairrag_core.errors.LedgerUnavailableError`.

    Attributes: ``ledger`` (its location), ``key``, ``seen`` (the mark this client knew),
    ``found`` (the mark stored now, ``None`` when the stream is gone), ``seen_rankings`` (the
    most rankings this client saw stored) and ``found_rankings`` (the count stored now), the
    last two set when the stream went back in time.
    """

    def __init__(
        self,
        message: str,
        *,
        ledger: str = "",
        key: str = "",
        seen: int | None = None,
        found: int | None = None,
        seen_rankings: int | None = None,
        found_rankings: int | None = None,
    ) -> None:
        super().__init__(message)
        self.ledger, self.key, self.seen, self.found = ledger, key, seen, found
        self.seen_rankings, self.found_rankings = seen_rankings, found_rankings


class LedgerCorruptError(LedgerUnavailableError):
    """A stored stream holds a value no sequence of accepted updates can produce: a total that
    is not a number, NaN, infinite, negative or beyond what its rankings can have added; a count
    of rankings that is not a whole number >= 0; a label that is not one the encoding rule
    writes; a Redis key of another type (docs/SPEC.md item 6, "Damaged values").

    Nothing is drawn from it or added to it. Attributes: ``ledger`` (its location), ``key`` (the
    stream) and ``field`` (the stored label, ``#rankings`` or ``#generation``; ``None`` for the
    stream as a whole). A :class:`~fairrag_core.errors.LedgerUnavailableError`.
    """

    def __init__(
        self, message: str, *, ledger: str = "", key: str = "", field: str | None = None
    ) -> None:
        super().__init__(message)
        self.ledger, self.key, self.field = ledger, key, field


def encode_label(label: object) -> str:
    """A group label as stored in a ledger: its JSON text.

    The rule: a label is a ``str``, an ``int`` (numpy integers included) or ``None`` (the
    unknown group), and is stored as ``json.dumps(label)``, so ``"1"``, ``1`` and ``None`` stay
    three groups (``'"1"'``, ``'1'``, ``'null'``) and :func:`decode_label` gives back an equal
    label. ``bool`` (equal to 0 and 1 as a dict key), ``float`` and other types are refused.
    """
    try:
        return _encode(label)
    except TypeError:  # unhashable: not a label the rule accepts either
        return _encode_uncached(label)


@lru_cache(maxsize=4096, typed=True)  # typed: True and 1 are equal keys but not equal labels
def _encode(label: object) -> str:
    return _encode_uncached(label)


def _encode_uncached(label: object) -> str:
    if label is None or isinstance(label, str):
        return json.dumps(label, ensure_ascii=False)
    if isinstance(label, (int, np.integer)) and not isinstance(label, (bool, np.bool_)):
        return json.dumps(int(label))
    raise TypeError(
        f"group label {label!r} ({type(label).__name__}) cannot be stored in an exposure ledger; "
        "labels must be str, int or None (stored as JSON text, so they read back equal)"
    )


@lru_cache(maxsize=4096)
def decode_label(text: str) -> Hashable:
    """The label :func:`encode_label` stored as ``text``."""
    return json.loads(text)


def encode_exposure(pairs: Iterable[tuple[Hashable, object]]) -> dict[str, float]:
    """``{encoded label: exposure}`` of ``(label, exposure)`` pairs, a label's values summed.

    Exposures must be numbers (not bools), finite and >= 0; labels follow :func:`encode_label`.
    """
    encoded: dict[str, float] = {}
    for label, value in pairs:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"exposure of group {label!r} must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"exposure of group {label!r} must be finite and >= 0, got {value}")
        name = encode_label(label)
        encoded[name] = encoded.get(name, 0.0) + value
    return encoded


_ADOPT_LOCK = threading.Lock()


def check_seconds(name: str, value: object, what: str = "") -> None:
    """A wait a ledger takes (``timeout``, ``deadline``...): a finite number of seconds > 0, not
    a bool; else a ``ValueError`` naming ``name`` (NaN and infinity too: a deadline of
    ``monotonic() + nan`` is never reached)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        said = f" ({what})" if what else ""
        raise ValueError(f"{name} must be a number of seconds > 0 and finite{said}, got {value!r}")


class StreamMemory:
    """What the clients of one store's streams in this process have seen (docs/SPEC.md item
    6, "Lost streams"): each stream's generation mark, the most rankings seen stored in it,
    how many times it was forgotten (:meth:`ExposureLedger.reset`/``adopt``), and the streams
    adopted under ``on_reset="adopt"``.

    Shared by every client of the same store and reset policy in one process
    (:func:`shared_memory`): a new client, a copy or a client rebuilt for each call (a
    LangChain ``configurable_fields`` call, ``model_copy``) knows what the first one saw, so
    a stream lost or rolled back is noticed by all of them."""

    def __init__(self) -> None:
        self.generations: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.epochs: dict[str, int] = {}
        self.resets_adopted = 0

    def merge(self, generations: Mapping[str, int], counts: Mapping[str, int]) -> None:
        """Learn what a pickled client had seen: a stream's mark when none is known here, and
        its count when the marks agree (a count of another generation says nothing)."""
        with _ADOPT_LOCK:
            for key, mark in generations.items():
                known = self.generations.setdefault(key, mark)
                if known == mark and key in counts:
                    if counts[key] > self.counts.get(key, -1):
                        self.counts[key] = counts[key]


_SHARED: dict[tuple[object, ...], Any] = {}
"""This process's memory of each store, by its identity (:func:`shared_memory`)."""
_SHARED_LOCK = threading.Lock()
_T_shared = TypeVar("_T_shared")


def shared_memory(identity: tuple[object, ...], factory: Callable[[], _T_shared]) -> _T_shared:
    """The object this process keeps for ``identity`` (a store: the SQLite file's resolved
    path, the Redis server and database, ...), made by ``factory`` on first use. Thread-safe;
    kept for the life of the process (a client rebuilt for every call finds what the last one
    left). A forked child keeps what its parent had seen of the streams, and each object's
    ``after_fork()`` (when it has one) drops what belongs to the parent's threads."""
    with _SHARED_LOCK:
        found = _SHARED.get(identity)
        if found is None:
            found = _SHARED[identity] = factory()
        return found


def forget_shared_memory() -> None:
    """For tests: clients built after this call share nothing with those built before, as the
    clients of another process (what older clients saw stays theirs)."""
    with _SHARED_LOCK:
        _SHARED.clear()


def _renew_locks_in_child() -> None:
    """A child forked while a parent's thread held one of these locks would wait for ever."""
    global _ADOPT_LOCK, _SHARED_LOCK
    _ADOPT_LOCK, _SHARED_LOCK = threading.Lock(), threading.Lock()
    for value in list(_SHARED.values()):
        after_fork = getattr(value, "after_fork", None)
        if after_fork is not None:
            after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks_in_child)

MAX_GENERATION = 2**52 + 1
"""The largest generation mark a read or an add accepts (SPEC item 6, "Lost streams")."""


def new_generation() -> int:
    """A fresh generation mark: a random int in [1, 2**52], exact as a float (SQLite's REAL)."""
    return secrets.randbits(52) + 1


class _Damaged(Exception):
    """A stored value failed its check; :meth:`ExposureLedger._damaged` adds where it was."""

    def __init__(self, field: str | None, why: str) -> None:
        super().__init__(why)
        self.field, self.why = field, why


def _stored_number(raw: object, field: str) -> float:
    """A stored value as a float: a number (not a bool), or the text of one (Redis stores text)."""
    if isinstance(raw, (bytes, bytearray)):
        data = bytes(raw)
        try:
            raw = data.decode("ascii")
        except UnicodeDecodeError:
            raise _Damaged(field, f"holds {data[:60]!r}, not a number") from None
    if isinstance(raw, str):
        try:
            return float(raw)
        except ValueError:
            raise _Damaged(field, f"holds the text {raw[:60]!r}, not a number") from None
    if isinstance(raw, (bool, np.bool_)) or not isinstance(raw, (int, float, np.number)):
        raise _Damaged(field, f"holds {raw!r:.60} ({type(raw).__name__}), not a number")
    try:
        return float(raw)
    except OverflowError:  # an int beyond any float
        return math.inf


def check_generation(raw: object) -> int | None:
    """A stored generation mark as an int (``None`` when the stream has none); a mark that is
    not a whole number in [1, 2**52 + 1] raises :class:`_Damaged`."""
    if raw is None:
        return None
    value = _stored_number(raw, GENERATION_FIELD)
    if not (math.isfinite(value) and value == int(value) and 1 <= value <= MAX_GENERATION):
        raise _Damaged(GENERATION_FIELD, f"holds {value!r}, not a generation mark")
    return int(value)


def check_count(raw: object) -> int:
    """A stored count of rankings as an int (0 when there is none): a whole number in
    [0, :data:`MAX_TOTAL`], else :class:`_Damaged` naming ``#rankings``. Read and add use it
    (docs/SPEC.md item 6, "Damaged values")."""
    if raw is None:
        return 0
    if type(raw) is int and 0 <= raw <= MAX_TOTAL:  # the common case, fast
        return raw
    value = _stored_number(raw, RANKINGS_FIELD)
    if not (math.isfinite(value) and value == int(value) and 0 <= value <= MAX_TOTAL):
        raise _Damaged(RANKINGS_FIELD, f"holds {value!r}, not a whole number >= 0")
    return int(value)


def check_total(label: str, raw: object) -> float:
    """A stored group total as a float: a finite number in [0, :data:`MAX_TOTAL`], else
    :class:`_Damaged` naming ``label``. Read and add use it (docs/SPEC.md item 6, "Damaged
    values")."""
    value = raw if type(raw) is float else _stored_number(raw, label)
    if not 0.0 <= value <= MAX_TOTAL:  # false for NaN too
        raise _Damaged(
            label, f"holds the exposure {value!r}, not a finite number in [0, {MAX_TOTAL:g}]"
        )
    return value


def check_stream(
    totals: Mapping[str, object], rankings: object, *, bounded: bool
) -> tuple[dict[str, float], int]:
    """``({encoded label: exposure}, rankings)`` of raw stored values, each checked (SPEC item 6,
    "Damaged values"); the first bad one raises :class:`_Damaged` naming its field.

    A count must be a whole number in [0, :data:`MAX_TOTAL`]; a label the text
    :func:`encode_label` writes for a str, int or None; an exposure a finite number in
    [0, :data:`MAX_TOTAL`]. ``bounded`` (the stores others can write to) also refuses a stream
    whose exposure exceeds what its rankings can have added (each at most
    :data:`MAX_RANKING_EXPOSURE`).
    """
    count = check_count(rankings)
    checked: dict[str, float] = {}
    for label, raw in totals.items():
        if not (isinstance(label, str) and _is_encoded_label(label)):
            raise _Damaged(
                str(label), "is not a stored group label (the JSON text of a str, int or None)"
            )
        checked[label] = check_total(label, raw)
    if bounded:
        total = math.fsum(checked.values())
        if total > count * MAX_RANKING_EXPOSURE * (1 + 1e-9):
            raise _Damaged(
                None,
                f"holds exposure {total!r} over {count} rankings, more than rankings can add "
                f"(at most {MAX_RANKING_EXPOSURE:g} each)",
            )
    return checked, count


@lru_cache(maxsize=4096)
def _is_encoded_label(text: str) -> bool:
    """Whether ``text`` is exactly what :func:`encode_label` writes for some label."""
    try:
        label = decode_label(text)
        return encode_label(label) == text
    except (ValueError, TypeError, RecursionError):
        return False


def check_key(key: object) -> str:
    """A ledger key (the name of one stream: a tenant, a topic, ...): a non-empty ``str``."""
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"ledger_key must be a non-empty string naming the stream (e.g. a tenant), got {key!r}"
        )
    return key


@dataclass(frozen=True)
class LedgerState:
    """One stream of a ledger, read at one instant."""

    key: str
    totals: dict[Hashable, float] = field(default_factory=dict)
    """Accumulated exposure per group label (``None`` = unknown group)."""
    rankings: int = 0
    """How many rankings were added."""
    generation: int | None = field(default=None, compare=False)
    """The stream's generation mark (``None`` for an empty stream or an in-memory ledger); not
    part of :meth:`as_record`."""

    @property
    def total(self) -> float:
        """All the exposure served: the sum of :attr:`totals`."""
        return math.fsum(self.totals.values())

    def as_record(self) -> dict[str, Any]:
        """JSON-ready: ``{"key", "totals": [[label, exposure], ...], "rankings"}`` (pairs, so
        that ``None`` and int labels come back as themselves)."""
        totals = [[label, value] for label, value in self.totals.items()]
        return {"key": self.key, "totals": totals, "rankings": self.rankings}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> LedgerState:
        """The state :meth:`as_record` wrote (e.g. a record's ``ledger_state``); anything else
        (a label twice, a bad label or exposure, a count that is not an int >= 0) is a
        ValueError saying what is accepted."""
        try:
            check_nesting(record, 4, "a ledger state (as_record's: 3 deep)")
            pairs = [(label, value) for label, value in record["totals"]]
            encoded = encode_exposure(pairs)
            rankings = record["rankings"]
            if len(encoded) != len(pairs):
                raise ValueError("a label is given twice")
            if isinstance(rankings, bool) or not isinstance(rankings, int) or rankings < 0:
                raise ValueError(f"rankings must be an int >= 0, got {rankings!r}")
            for name, value in encoded.items():
                if value > MAX_TOTAL:
                    raise ValueError(f"exposure {value!r} of {name} is beyond {MAX_TOTAL:g}")
            totals = {decode_label(name): value for name, value in encoded.items()}
            return cls(check_key(record["key"]), totals, rankings)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                "a ledger state must be {'key': str, 'totals': [[label, exposure], ...], "
                f"'rankings': int}} (what LedgerState.as_record writes): {exc}; "
                f"got {reprlib.repr(record)}"  # bounded in depth and length, never recursing
            ) from exc


class ExposureLedger(ABC):
    """Each named stream's accumulated exposure per group (docs/SPEC.md, "Beyond the paper", 6).

    A stream is named by a key (a tenant, a topic, ...) so that streams never mix. Every
    implementation guarantees:

    - :meth:`add` is atomic: one served ranking's exposure (every group of it) and the count of
      rankings are applied together or not at all, and concurrent adds are never lost (they are
      increments on the store, never a client-side read-modify-write);
    - :meth:`state` reads one stream at one instant (all groups and the count consistent);
    - every value read is checked (:class:`LedgerCorruptError` names the ledger, the stream and
      the field of the first bad one);
    - the stores others can write to (SQLite, Redis) mark each stream with a generation, and a
      client that saw a stream notices when it is lost, replaced or rolled back
      (:class:`LedgerResetError`); what a client saw is shared by every client of the same store
      (and reset policy) in the process (:class:`StreamMemory`), so a client built anew, a
      copy or a client rebuilt for each call notices it too.

    A ledger is shared on purpose: a deep copy of one (e.g. the copy of a ranker holding it) is
    the same ledger object. Labels are stored by :func:`encode_label`'s rule.
    """

    location: str
    """Where the ledger lives, for messages: ``memory``, the SQLite file or the Redis server."""

    _bounded = False
    """Whether reads refuse exposure beyond what the stream's rankings can have added (the
    stores other programs can write to; a snapshot built from totals alone need not be)."""
    _marked = False
    """Whether the store keeps generation marks (:meth:`_add_marked` is then used to add)."""
    _trusted = False
    """Whether every stored value came through :meth:`add`'s checks in this process (the
    in-memory ledger): reads then skip the checks."""

    def state(self, key: str = DEFAULT_KEY) -> LedgerState:
        """The stream ``key`` as it is now (empty when nothing was added to it).

        Raises :class:`LedgerResetError` if this client saw the stream with another generation
        mark or with more rankings (it was lost, replaced or rolled back since; with
        ``on_reset="adopt"`` the stream is adopted with a warning and read again),
        :class:`LedgerCorruptError` if a stored value is damaged.
        """
        key = check_key(key)
        if self._trusted:
            stored_totals, stored_count = self._read(key)
            totals = {decode_label(label): value for label, value in stored_totals.items()}
            return LedgerState(key, totals, stored_count)
        try:
            return self._checked_state(key)
        except LedgerResetError as exc:
            self._adopt_or_raise(key, exc)
            return self._checked_state(key)

    def _checked_state(self, key: str) -> LedgerState:
        # The floor is taken before the read: any count this client saw before the read began
        # was stored before it began, so a store holding fewer went back in time (a count seen
        # by a concurrent thread after the read began is no floor for it).
        # So is the mark: a thread that read before the stream existed, while another created
        # it, finds no mark where the client now knows one, and nothing was lost.
        floor, before, epoch = self._counts.get(key), self._generations.get(key), self._epoch(key)
        stored, rankings, raw_generation = self._read_marked(key)
        try:
            generation = check_generation(raw_generation)
            checked, count = check_stream(stored, rankings, bounded=self._bounded)
        except _Damaged as damaged:
            raise self._damaged(key, damaged) from None
        if self._epoch(key) != epoch:  # a reset or adopt ran meanwhile: what it left stands
            floor, before = self._counts.get(key), self._generations.get(key)
        if generation is not None or before is not None:
            self._notice(key, generation, count, floor, before)
        totals = {decode_label(label): value for label, value in checked.items()}
        return LedgerState(key, totals, count, generation)

    def _adopt_or_raise(self, key: str, exc: LedgerResetError) -> None:
        """With ``on_reset="adopt"``: warn, count, adopt ``key``; else raise ``exc``."""
        if self.on_reset != "adopt":
            raise exc
        memory = self._memory
        with _ADOPT_LOCK:
            memory.resets_adopted += 1
        warnings.warn(
            f"{exc} -- on_reset='adopt': continuing from what is stored now",
            RuntimeWarning,
            stacklevel=3,
        )
        self.adopt(key)

    def totals(self, key: str = DEFAULT_KEY) -> dict[Hashable, float]:
        """``{group label: accumulated exposure}`` of the stream ``key``."""
        return self.state(key).totals

    def add(self, key: str, exposure: Mapping[Hashable, float]) -> None:
        """Record one served ranking: add ``exposure`` (``{group label: exposure}``) to ``key``.

        Atomic: every group's increment and the ranking count are applied together or not at
        all. Exposures must be finite and >= 0, at most :data:`MAX_RANKING_EXPOSURE` in all;
        labels must follow :func:`encode_label`. A stream this client saw that was lost or
        replaced since raises :class:`LedgerResetError` and nothing is applied (the check and
        the update are one step on the store); so does a damaged stored value among those the
        update increments (a group total or the count: :class:`LedgerCorruptError`), checked
        in that same step before anything is written.
        """
        key = check_key(key)
        if not isinstance(exposure, Mapping):
            raise TypeError(
                f"exposure must be a mapping {{group label: exposure}}, got {exposure!r:.200}"
            )
        encoded = encode_exposure(exposure.items())
        total = math.fsum(encoded.values())
        if total > MAX_RANKING_EXPOSURE:
            raise ValueError(
                f"exposure of one ranking must be at most {MAX_RANKING_EXPOSURE:g} in all (every "
                f"position weight is at most 1), got {total!r}"
            )
        if not self._marked:
            self._add(key, encoded)
            return
        try:
            self._add_checked(key, encoded)
        except LedgerResetError as exc:
            self._adopt_or_raise(key, exc)  # nothing was applied: adding again is safe
            self._add_checked(key, encoded)

    def _add_checked(self, key: str, encoded: dict[str, float]) -> None:
        floor, before, epoch = self._counts.get(key), self._generations.get(key), self._epoch(key)
        try:
            # A damaged value among those the update touches raises _Damaged from the store's
            # own atomic step, before anything is written; so does a mark other than the one
            # seen, or a count below the floor, leaving the stream untouched.
            raw, count = self._add_marked(key, encoded, before, new_generation(), floor)
            found = check_generation(raw)
            stored_count = None if count is None else check_count(count)
        except _Damaged as damaged:
            raise self._damaged(key, damaged) from None
        if self._epoch(key) != epoch:  # as in _checked_state
            floor, before = self._counts.get(key), self._generations.get(key)
        self._notice(key, found, stored_count, floor, before)

    def reset(self, key: str = DEFAULT_KEY) -> None:
        """Forget the stream ``key`` (its totals, count and generation mark); other streams are
        untouched. The next :meth:`add` starts it anew, with a new mark."""
        key = check_key(key)
        self._reset(key)
        self._generations.pop(key, None)
        self._counts.pop(key, None)
        self._bump_epoch(key)

    def adopt(self, key: str = DEFAULT_KEY) -> None:
        """Accept the stream ``key`` as it is stored now (after a :class:`LedgerResetError`,
        e.g. when another replica already started the stream over): this client, and every
        other of the same store and policy in this process, forgets the mark it had seen and
        takes the current one at its next read or add. Nothing is stored."""
        self._generations.pop(check_key(key), None)
        self._counts.pop(key, None)
        self._bump_epoch(key)

    def keys(self) -> list[str]:
        """The names of the streams holding at least one ranking, sorted."""
        return sorted(self._keys())

    def close(self) -> None:  # noqa: B027 - a no-op unless the ledger holds a connection
        """Release connections (the ledger reconnects if used again)."""

    on_reset: str = "raise"
    """What to do when a stream this client saw was lost, replaced or rolled back
    (:data:`RESET_POLICIES`)."""

    @property
    def resets_adopted(self) -> int:
        """Streams adopted under ``on_reset="adopt"`` (each with a warning), by this client
        and every other of the same store and policy in this process (:class:`StreamMemory`)."""
        return self._memory.resets_adopted

    @property
    def _memory(self) -> StreamMemory:
        """What this client has seen of its streams: the :class:`StreamMemory` shared by every
        client of the same store in this process (set by the stores with marks when built), or
        one of its own (made on first use, so subclasses need not call an ``__init__``)."""
        memory = self.__dict__.get("_memory")
        if memory is None:
            memory = self.__dict__.setdefault("_memory", StreamMemory())
        return memory

    @property
    def _counts(self) -> dict[str, int]:
        """``{key: the most rankings this client saw stored}``: a store holding fewer went
        back in time."""
        return self._memory.counts

    def _epoch(self, key: str) -> int:
        """How many times this client forgot ``key`` (:meth:`reset`, :meth:`adopt`): a call
        during which it changed checks against what they left, not what it saw first."""
        return self._memory.epochs.get(key, 0)

    def _bump_epoch(self, key: str) -> None:
        epochs = self._memory.epochs
        with _ADOPT_LOCK:
            epochs[key] = epochs.get(key, 0) + 1

    @property
    def _generations(self) -> dict[str, int]:
        """``{key: generation mark}`` of the streams this client has seen."""
        return self._memory.generations

    def _notice(
        self,
        key: str,
        found: int | None,
        rankings: int | None,
        floor: int | None,
        seen: int | None,
    ) -> None:
        """Remember ``found`` as ``key``'s mark and ``rankings`` as its count, or raise
        :class:`LedgerResetError` if this client saw another mark (``seen``) or more rankings
        (``floor``) before the call began, or another thread remembered another mark during it."""
        marks = self._generations
        if seen is None:
            if found is not None:
                seen = marks.setdefault(key, found)  # threads: the first mark remembered wins
                if seen == found:
                    self._count_seen(key, found, rankings, floor)
                    return
            else:
                return
        if found == seen:
            self._count_seen(key, found, rankings, floor)
            return
        if found is None:
            now = "the stream has no mark now"
            if rankings == 0:
                now += ": it is gone"
            elif rankings is not None:
                now += f", {rankings} rankings stored"
        else:
            now = f"the stream stored now has mark {found}" + (
                f" and {rankings} rankings" if rankings is not None else ""
            )
        raise LedgerResetError(
            f"{self._describe_ledger()}: stream {key!r} was lost or replaced since this "
            f"process's clients of it last saw it (its generation mark was {seen}; {now}): a "
            "server restarted without persistence, a file deleted or replaced, or a reset by "
            "another client. Nothing was read into a ranking or added. Call "
            f"ledger.reset({key!r}) to start the stream over from zero, or "
            f"ledger.adopt({key!r}) to continue from what is stored now",
            ledger=self.location,
            key=key,
            seen=seen,
            found=found,
        )

    def _count_seen(
        self, key: str, mark: int | None, rankings: int | None, floor: int | None
    ) -> None:
        """Remember ``rankings`` as the most this client saw of ``key``, or raise
        :class:`LedgerResetError` when it is below ``floor`` (the stream went back in time)."""
        if rankings is None:
            return
        if floor is not None and rankings < floor:
            raise LedgerResetError(
                f"{self._describe_ledger()}: stream {key!r} went back in time: this process's "
                f"clients of it saw {floor} rankings stored, the stream holds {rankings} now "
                f"(same generation mark {mark}): it was restored from an older copy (a Redis RDB "
                "snapshot or replica, a backup of the file), so rankings served since are missing "
                "from it. Nothing was read into a ranking or added. Call "
                f"ledger.adopt({key!r}) to continue from what is stored now, or "
                f"ledger.reset({key!r}) to start over from zero",
                ledger=self.location,
                key=key,
                seen=mark,
                found=mark,
                seen_rankings=floor,
                found_rankings=rankings,
            )
        counts = self._counts
        if rankings > counts.get(key, -1):  # a lost race only lowers the floor: never a false alarm
            counts[key] = rankings

    def _damaged(self, key: str, damaged: _Damaged) -> LedgerCorruptError:
        where = "the stream" if damaged.field is None else f"field {damaged.field!r}"
        return LedgerCorruptError(
            f"{self._describe_ledger()}: stream {key!r} is damaged: {where} {damaged.why}. "
            "Nothing was drawn from it or added to it; repair the value or reset the stream "
            f"(ledger.reset({key!r}))",
            ledger=self.location,
            key=key,
            field=damaged.field,
        )

    def _describe_ledger(self) -> str:
        return f"{type(self).__name__} at {self.location}"

    def _read_marked(self, key: str) -> tuple[Mapping[str, object], object, object]:
        """``({encoded label: stored value}, stored count, stored generation mark)`` of ``key``
        read atomically, values as stored (checked by :meth:`state`); a store without marks
        gives ``None`` as the mark (the default: :meth:`_read`)."""
        totals, rankings = self._read(key)
        return totals, rankings, None

    def _add_marked(
        self,
        key: str,
        exposure: dict[str, float],
        expected: int | None,
        fresh: int,
        floor: int | None = None,
    ) -> tuple[object, object]:
        """Add ``exposure`` and one ranking to ``key`` atomically, unless the stream's mark
        differs from ``expected`` (when given) or its count is below ``floor`` (when given),
        and give ``(the stream's mark, its count)`` after the call (the count as found when
        nothing was applied; ``None`` when unknown).

        Stores with marks do the check and the update in one step: a stream without a mark gets
        ``fresh``; a mark other than ``expected`` (or none, when one was expected) leaves the
        stream untouched and is returned as found. A stored value the update would increment
        that fails :func:`check_total` or :func:`check_count` raises :class:`_Damaged`, in the
        same step and before anything is written. The default (no marks): :meth:`_add`,
        ``(None, None)``.
        """
        self._add(key, exposure)
        return None, None

    @abstractmethod
    def _read(self, key: str) -> tuple[dict[str, float], int]:
        """``({encoded label: exposure}, rankings)`` of ``key``, read atomically."""

    @abstractmethod
    def _add(self, key: str, exposure: dict[str, float]) -> None:
        """Add encoded exposures and one ranking to ``key``, atomically."""

    @abstractmethod
    def _reset(self, key: str) -> None:
        """Delete ``key``."""

    @abstractmethod
    def _keys(self) -> Iterable[str]:
        """Every stored key."""

    def __deepcopy__(self, memo: dict) -> ExposureLedger:
        return self

    def __copy__(self) -> ExposureLedger:
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"


def split_stored(
    pairs: Iterable[tuple[object, object]],
) -> tuple[dict[Any, object], object, object]:
    """``(totals, rankings, generation mark)`` of a stream's stored ``(field, value)`` pairs,
    values as stored: the count and the mark are the fields :data:`RANKINGS_FIELD` and
    :data:`GENERATION_FIELD`, every other field a group's total (checked by
    :meth:`ExposureLedger.state`)."""
    totals: dict[Any, object] = {}
    rankings: object = None
    generation: object = None
    for label, value in pairs:
        if label == RANKINGS_FIELD:
            rankings = value
        elif label == GENERATION_FIELD:
            generation = value
        else:
            totals[label] = value
    return totals, rankings, generation


class StoredLedger(ExposureLedger):
    """A ledger whose streams live outside the process (SQLite, Redis): read through
    :meth:`_read_marked` and checked, so :meth:`_read` is :meth:`state`'s checked totals.

    Every client of one store (and reset policy) in a process shares one
    :class:`StreamMemory` (:meth:`_join`), so what one saw of a stream every other knows: a
    client built anew for each call is checked against what the earlier ones saw (docs/SPEC.md
    item 6, "Lost streams"). A pickled client carries what it saw to the process that loads
    it (:meth:`_seen`, :meth:`_learn`)."""

    def _join(self, *identity: object) -> None:
        """Share this process's memory of the streams of the store ``identity``."""
        self.__dict__["_memory"] = shared_memory(("streams", *identity), StreamMemory)

    def _seen(self) -> dict[str, dict[str, int]]:
        """What this client saw, for its pickled state."""
        return {"generations": dict(self._generations), "counts": dict(self._counts)}

    def _learn(self, state: Mapping[str, Any]) -> None:
        """Add what a pickled client saw (:meth:`_seen`) to this process's memory."""
        self._memory.merge(state.get("generations", {}), state.get("counts", {}))

    def _read(self, key: str) -> tuple[dict[str, float], int]:
        state = self.state(key)
        return {encode_label(label): v for label, v in state.totals.items()}, state.rankings
