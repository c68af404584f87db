"""Input checks shared by every ranker and metric: fail before any work, naming the argument."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from . import kernels

__all__ = ["as_rng", "check_alpha", "check_groups", "check_k", "check_score_batch", "check_scores"]


def check_scores(scores: object) -> tuple[np.ndarray, float, float]:
    """``scores`` as a 1-D float array with its minimum and maximum.

    Rejects non-numeric, non-1-D and non-finite values. The range is returned because rankers
    that normalise scores need it and it also proves finiteness (NaN and inf reach min or max).
    An empty array has range (0.0, 0.0).
    """
    try:
        arr = np.asarray(scores, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"scores must be a 1-D sequence of numbers, got {scores!r:.200}") from None
    if arr.ndim != 1:
        raise ValueError(f"scores must be 1-D (one score per candidate), got shape {arr.shape}")
    if arr.shape[0] == 0:
        return arr, 0.0, 0.0
    low, high = kernels.active.score_range(arr)
    if not (_isfinite(low) and _isfinite(high)):
        bad = np.flatnonzero(~np.isfinite(arr))[:5].tolist()
        raise ValueError(
            f"scores must be finite; non-finite values (NaN or inf) at pool positions {bad}"
        )
    return arr, low, high


_isfinite = math.isfinite


def check_groups(groups: Sequence[Hashable] | None, n: int) -> Sequence[Hashable]:
    """One group label per candidate; ``None`` means "all unknown"."""
    if groups is None:
        return [None] * n
    if isinstance(groups, (str, bytes)):
        raise TypeError("groups must be a sequence of labels, one per candidate, not a string")
    if not isinstance(groups, Sequence):
        groups = list(groups) if not isinstance(groups, np.ndarray) else groups.tolist()
    if len(groups) != n:
        raise ValueError(
            f"groups has {len(groups)} labels but scores has {n} candidates; give one per candidate"
        )
    return groups


def check_k(k: object) -> int:
    """``k`` as an int >= 1."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer >= 1, got {k!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    return int(k)


def check_alpha(alpha: object) -> float:
    """``alpha`` (the Plackett-Luce sharpness) as a finite float > 0."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise TypeError(f"alpha must be a number > 0, got {alpha!r}")
    if not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
    return float(alpha)


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
    try:
        arr = np.asarray(scores, dtype=float)
    except (TypeError, ValueError):
        raise TypeError("scores must be a 2-D array of numbers (pools x candidates)") from None
    if arr.ndim != 2:
        raise ValueError(
            f"scores must be 2-D (pools x candidates) for rank_batch, got shape {arr.shape}"
        )
    if not np.isfinite(arr).all():
        rows = np.flatnonzero(~np.isfinite(arr).all(axis=1))[:5].tolist()
        raise ValueError(f"scores must be finite; non-finite values in pools {rows}")
    return arr
