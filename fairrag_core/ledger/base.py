"""The exposure-ledger interface: named running totals of the exposure each group was served."""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_KEY",
    "RANKINGS_FIELD",
    "ExposureLedger",
    "LedgerState",
    "check_key",
    "decode_label",
    "encode_exposure",
    "encode_label",
]

DEFAULT_KEY = "default"
"""The stream a ranker records into when it is given no ``ledger_key``."""
RANKINGS_FIELD = "#rankings"
"""Where each stored stream keeps its count of rankings; never the encoding of a label."""


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
            pairs = [(label, value) for label, value in record["totals"]]
            encoded = encode_exposure(pairs)
            rankings = record["rankings"]
            if len(encoded) != len(pairs):
                raise ValueError("a label is given twice")
            if isinstance(rankings, bool) or not isinstance(rankings, int) or rankings < 0:
                raise ValueError(f"rankings must be an int >= 0, got {rankings!r}")
            totals = {decode_label(name): value for name, value in encoded.items()}
            return cls(check_key(record["key"]), totals, rankings)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                "a ledger state must be {'key': str, 'totals': [[label, exposure], ...], "
                f"'rankings': int}} (what LedgerState.as_record writes): {exc}; "
                f"got {record!r:.200}"
            ) from exc

    def replay(self) -> ExposureLedger:
        """A new in-memory ledger holding this state: the same seed on it re-draws the ranking
        drawn from this state (docs/SPEC.md item 6, "Re-drawing")."""
        from .memory import MemoryLedger  # the module imports this one

        ledger = MemoryLedger()
        ledger._restore(self.key, self.totals, self.rankings)
        return ledger


class ExposureLedger(ABC):
    """Each named stream's accumulated exposure per group (docs/SPEC.md, "Beyond the paper", 6).

    A stream is named by a key (a tenant, a topic, ...) so that streams never mix. Every
    implementation guarantees:

    - :meth:`add` is atomic: one served ranking's exposure (every group of it) and the count of
      rankings are applied together or not at all, and concurrent adds are never lost (they are
      increments on the store, never a client-side read-modify-write);
    - :meth:`state` reads one stream at one instant (all groups and the count consistent).

    A ledger is shared on purpose: a deep copy of one (e.g. the copy of a ranker holding it) is
    the same ledger object. Labels are stored by :func:`encode_label`'s rule.
    """

    location: str
    """Where the ledger lives, for messages: ``memory``, the SQLite file or the Redis server."""

    def state(self, key: str = DEFAULT_KEY) -> LedgerState:
        """The stream ``key`` as it is now (empty when nothing was added to it)."""
        key = check_key(key)
        stored, rankings = self._read(key)
        totals = {decode_label(label): value for label, value in stored.items()}
        return LedgerState(key, totals, rankings)

    def totals(self, key: str = DEFAULT_KEY) -> dict[Hashable, float]:
        """``{group label: accumulated exposure}`` of the stream ``key``."""
        return self.state(key).totals

    def add(self, key: str, exposure: Mapping[Hashable, float]) -> None:
        """Record one served ranking: add ``exposure`` (``{group label: exposure}``) to ``key``.

        Atomic: every group's increment and the ranking count are applied together or not at
        all. Exposures must be finite and >= 0; labels must follow :func:`encode_label`.
        """
        key = check_key(key)
        if not isinstance(exposure, Mapping):
            raise TypeError(
                f"exposure must be a mapping {{group label: exposure}}, got {exposure!r:.200}"
            )
        self._add(key, encode_exposure(exposure.items()))

    def reset(self, key: str = DEFAULT_KEY) -> None:
        """Forget the stream ``key`` (its totals and count); other streams are untouched."""
        self._reset(check_key(key))

    def keys(self) -> list[str]:
        """The names of the streams holding at least one ranking, sorted."""
        return sorted(self._keys())

    def close(self) -> None:  # noqa: B027 - a no-op unless the ledger holds a connection
        """Release connections (the ledger reconnects if used again)."""

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
