"""Input checks shared by every ranker and metric: fail before any work, naming the argument."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence, Set
from decimal import Decimal
from typing import NoReturn

import numpy as np

__all__ = [
    "ALPHA_MAX",
    "as_rng",
    "as_score_array",
    "check_alpha",
    "check_groups",
    "check_k",
    "check_n_samples",
    "check_nesting",
    "check_score_batch",
    "check_scores",
    "refuse_unordered",
]

ALPHA_MAX = 1000.0
"""Largest Plackett-Luce alpha accepted: log-weights reach ``2 ** alpha``, which overflows above
1,023. From alpha of about 64 on, the ranking is already the standard one in 99% of draws."""

_NUMBERS = (int, float, np.integer, np.floating)
_PLAIN_NUMBERS = frozenset({float, int, np.float64, np.float32, np.int64, np.int32})
_ACCEPTED_SCORES = "real numbers (int or float; not bool, str or None)"


def as_score_array(scores: object, shape: str = "a 1-D sequence") -> np.ndarray:
    """``scores`` as a float64 array; bools, strings and other non-numbers are a TypeError
    naming the value and its position (finiteness and shape are left to the caller).

    numpy alone would turn ``[True, 0.5]`` into ``[1.0, 0.5]`` and ``["0.5"]`` into ``[0.5]``:
    lists are checked element by element (by type, in one pass) before they are converted.
    """
    if isinstance(scores, np.ndarray):
        arr = scores
    elif isinstance(scores, (list, tuple)) and set(map(type, scores)) <= _PLAIN_NUMBERS:
        try:
            return np.asarray(scores, dtype=float)
        except OverflowError:
            _too_large(scores, shape)
    else:
        try:
            arr = np.asarray(scores, dtype=object)  # bools and strings stay what they are
        except ValueError:
            raise TypeError(
                f"scores must be {shape} of {_ACCEPTED_SCORES}, got {scores!r:.200}"
            ) from None
    kind = arr.dtype.kind
    if kind == "f":
        return arr if arr.dtype == np.float64 else arr.astype(float)
    if kind in "iu":
        return arr.astype(float)
    if kind == "O":
        flat = arr.ravel().tolist()
        bad = next(
            (
                (position, value)
                for position, value in enumerate(flat)
                if isinstance(value, (bool, np.bool_)) or not isinstance(value, _NUMBERS)
            ),
            None,
        )
        if bad is None:
            try:
                return arr.astype(float)
            except OverflowError:
                _too_large(flat, shape)
        position, value = bad
        raise TypeError(
            f"scores must be {shape} of {_ACCEPTED_SCORES}; got {value!r:.100} "
            f"({type(value).__name__}) at position {position}"
        )
    raise TypeError(
        f"scores must be {shape} of {_ACCEPTED_SCORES}, got values of type {arr.dtype} "
        f"({scores!r:.200})"
    )


def _too_large(values: Sequence[object], shape: str) -> NoReturn:
    """The error of a score (a Python int) too large for a float."""
    position = next(
        (i for i, v in enumerate(values) if isinstance(v, int) and abs(v) > _LARGEST_FLOAT), None
    )
    raise ValueError(
        f"scores must be {shape} of finite real numbers; got an int beyond a float's range "
        f"(about 1.8e308) at position {position}"
    )


_LARGEST_FLOAT = int(np.finfo(float).max)


def check_scores(scores: object) -> tuple[np.ndarray, float, float]:
    """``scores`` as a 1-D float array with its minimum and maximum.

    Rejects bools, strings and other non-numbers (TypeError), non-1-D and non-finite values
    (ValueError). The range is returned because rankers that normalise scores need it and it
    also proves finiteness (NaN and inf reach min or max). An empty array has range (0.0, 0.0).
    """
    arr = as_score_array(scores, "a 1-D sequence")
    if arr.ndim != 1:
        raise ValueError(f"scores must be 1-D (one score per candidate), got shape {arr.shape}")
    if arr.shape[0] == 0:
        return arr, 0.0, 0.0
    low = float(_min(arr))
    high = float(_max(arr))
    if not (_isfinite(low) and _isfinite(high)):
        bad = np.flatnonzero(~np.isfinite(arr))[:5].tolist()
        raise ValueError(
            f"scores must be finite; non-finite values (NaN or inf) at pool positions {bad}"
        )
    return arr, low, high


_min = np.minimum.reduce
_max = np.maximum.reduce
_isfinite = math.isfinite


def refuse_unordered(values: object, name: str) -> None:
    """A TypeError naming ``name`` when ``values`` is a mapping or a set: labels are read by
    position (candidate or rank order), and a dict's keys or a set's iteration order are not
    positions (a set's order even changes with ``PYTHONHASHSEED``)."""
    if isinstance(values, (Mapping, Set)):
        raise TypeError(
            f"{name} must be a sequence of labels in order (a list, tuple or 1-D array), one "
            f"per position; got a {type(values).__name__}, whose keys or order are not positions"
        )


def is_missing(label: object) -> bool:
    """Whether a group label is a missing value other than ``None``: a float NaN (pandas'
    missing value in a column of labels, numpy's; a ``Decimal`` NaN), ``pandas.NA`` or
    ``pandas.NaT``."""
    if isinstance(label, (float, np.floating, Decimal)):
        return bool(label != label)  # NaN is the one value unequal to itself
    return type(label).__name__ in ("NAType", "NaTType")  # pandas.NA, pandas.NaT


def missing_as_none(labels: Sequence[Hashable]) -> Sequence[Hashable]:
    """``labels`` with every missing value (:func:`is_missing`) read as ``None``, the unknown
    group (docs/SPEC.md, "Inputs"): NaN is unequal to itself, so each would be a group of its
    own. The same sequence when it holds none."""
    if not any(not isinstance(label, str) and is_missing(label) for label in labels):
        return labels  # (text, the common label, is never missing: one check per label)
    return [None if is_missing(label) else label for label in labels]


def check_groups(groups: Sequence[Hashable] | None, n: int) -> Sequence[Hashable]:
    """One hashable group label per candidate; ``None`` means "all unknown".

    A list, dict or other unhashable label is a TypeError naming its position, whatever the
    ranker (the fairness-aware ones look labels up in the target, the others would ignore them).
    """
    if groups is None:
        return [None] * n
    if isinstance(groups, (str, bytes)):
        raise TypeError("groups must be a sequence of labels, one per candidate, not a string")
    refuse_unordered(groups, "groups")
    if not isinstance(groups, Sequence):
        groups = list(groups) if not isinstance(groups, np.ndarray) else groups.tolist()
    if len(groups) != n:
        raise ValueError(
            f"groups has {len(groups)} labels but scores has {n} candidates; give one per candidate"
        )
    groups = missing_as_none(groups)
    try:
        frozenset(groups)
    except TypeError:
        for position, label in enumerate(groups):
            try:
                hash(label)
            except TypeError:
                raise TypeError(
                    f"groups must hold hashable labels (str, int, None, ...); got "
                    f"{type(label).__name__} {label!r:.100} at position {position}"
                ) from None
        raise
    return groups


def check_k(k: object) -> int:
    """``k`` as an int >= 1."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer >= 1, got {k!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    return int(k)


def check_gain(gain: object) -> float:
    """The correction gain of the representative and amortized rankers: finite and >= 0."""
    if isinstance(gain, (bool, np.bool_)) or not isinstance(
        gain, (int, float, np.integer, np.floating)
    ):  # numpy numbers accepted, as alpha's check does
        raise TypeError(f"gain must be a finite number >= 0, got {gain!r}")
    if not math.isfinite(gain) or gain < 0:
        raise ValueError(f"gain must be a finite number >= 0, got {gain!r}")
    return float(gain)


def check_alpha(alpha: object) -> float:
    """``alpha`` (the Plackett-Luce sharpness) as a float in (0, :data:`ALPHA_MAX`]."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise TypeError(f"alpha must be a number > 0, got {alpha!r}")
    if not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
    if alpha > ALPHA_MAX:
        raise ValueError(
            f"alpha must be at most {ALPHA_MAX:,.0f}, got {alpha!r}: log-weights 2 ** alpha "
            "overflow above 1,023, and from about 64 on the ranking is already the standard one"
        )
    return float(alpha)


def check_n_samples(n_samples: object) -> int:
    """``n_samples`` (rankings to draw) as an int >= 1."""
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)):
        raise TypeError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples!r}")
    return int(n_samples)


def as_rng(rng: object, name: str = "rng") -> np.random.Generator:
    """A ``numpy.random.Generator`` from a Generator, an int seed >= 0, or a SeedSequence.

    ``name`` is the argument the value came from, for the error message.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if rng < 0:
            raise ValueError(f"{name} must be an int >= 0 or a numpy.random.Generator, got {rng!r}")
        return np.random.default_rng(rng)
    if isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    raise TypeError(f"{name} must be a numpy.random.Generator or an int seed, got {rng!r}")


def check_score_batch(scores: object) -> np.ndarray:
    """A (pools x candidates) float array of finite scores, for the batch paths."""
    arr = as_score_array(scores, "a 2-D array (pools x candidates)")
    if arr.ndim != 2:
        raise ValueError(
            f"scores must be 2-D (pools x candidates) for rank_batch, got shape {arr.shape}"
        )
    if not np.isfinite(arr).all():
        rows = np.flatnonzero(~np.isfinite(arr).all(axis=1))[:5].tolist()
        raise ValueError(f"scores must be finite; non-finite values in pools {rows}")
    return arr


def check_nesting(value: object, limit: int, what: str) -> None:
    """Refuse ``value`` (``what``: named in the message) nested deeper than ``limit`` levels of
    dicts, lists and tuples, walking it level by level without recursion: a value nested 10^5
    deep raised ``RecursionError`` in the first repr or comparison of it (issue 36)."""
    level: list[object] = [value]
    for _ in range(limit + 1):
        level = [
            child
            for item in level
            if isinstance(item, (Mapping, list, tuple))
            for child in (item.values() if isinstance(item, Mapping) else item)
        ]
        if not level:
            return
    raise ValueError(f"{what} is nested deeper than {limit} levels of dicts and lists")
