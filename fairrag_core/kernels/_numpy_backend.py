"""The numpy kernel backend: always available, vectorised where the work allows it."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ..plackett_luce import gumbel_order, plackett_luce_log_weights

__all__ = ["NAME", "jit", "plackett_luce_log_weights", "plackett_luce_top_k", "score_range"]

NAME = "numpy"

_min = np.minimum.reduce
_max = np.maximum.reduce


def score_range(scores: np.ndarray) -> tuple[float, float]:
    """Minimum and maximum of a non-empty 1-D float array (NaN when any value is NaN)."""
    return float(_min(scores)), float(_max(scores))


def plackett_luce_top_k(
    scores: np.ndarray, alpha: float, low: float, high: float, exponentials: np.ndarray, k: int
) -> np.ndarray:
    """The ``k`` largest keys ``plackett_luce_log_weights(scores) + G``, best first, with
    ``G = -log(exponentials)`` (Gumbel(0, 1)); equal keys go by larger ``G`` (:func:`gumbel_order`).
    """
    gumbels = np.log(exponentials)
    np.negative(gumbels, out=gumbels)
    keys = plackett_luce_log_weights(scores, alpha, low, high)
    keys += gumbels
    return gumbel_order(keys, gumbels)[:k]


def jit(function: Callable) -> Callable:
    """``function`` run as plain Python, its array arguments passed as lists (faster to index)."""

    @functools.wraps(function)
    def on_lists(*args):
        return function(*[a.tolist() if isinstance(a, np.ndarray) else a for a in args])

    return on_lists
