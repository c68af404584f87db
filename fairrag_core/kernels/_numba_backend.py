"""The numba kernel backend (``pip install fairrag[fast]``): the same numbers as the numpy
backend, computed in compiled loops, so a 50-candidate pool costs one call instead of ten.

Compiled on first use and cached on disk (``cache=True``); ``fastmath`` stays off so every
operation rounds as numpy's does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

__all__ = ["NAME", "jit", "plackett_luce_log_weights", "plackett_luce_top_k", "score_range"]

NAME = "numba"

_compile = numba.njit(cache=True)


@_compile
def score_range(scores):
    """Minimum and maximum of a non-empty 1-D float array (NaN when any value is NaN)."""
    low = scores[0]
    high = scores[0]
    for x in scores:
        if x < low:
            low = x
        elif x > high:
            high = x
        elif x != x:
            return x, x  # NaN
    return low, high


@numba.extending.register_jitable
def _exponent(alpha):
    """``fairrag_core.plackett_luce.integer_exponent``: alpha as an int in 1..64, else 0."""
    return int(alpha) if alpha == math.floor(alpha) and 1 <= alpha <= 64 else 0


@numba.extending.register_jitable
def _log_weight(score, scale, shift, alpha, exponent):
    """``s_norm ** alpha`` of one score, with the operations of ``plackett_luce_log_weights``."""
    base = score * scale + shift
    if exponent == 0:
        return base**alpha
    # Repeated squaring, multiplying in the order of fairrag_core.plackett_luce._power.
    result = 1.0
    first = True
    while True:
        if exponent & 1:
            result = base if first else result * base
            first = False
        exponent >>= 1
        if exponent == 0:
            return result
        base = base * base


@numba.extending.register_jitable
def _normalisation(low, high):
    """``(scale, shift)`` with ``score * scale + shift`` in [1, 2]; all 1 for a constant pool."""
    if high > low:
        scale = 1.0 / (high - low)
        return scale, 1.0 - low * scale
    return 0.0, 1.0


@_compile
def plackett_luce_log_weights(scores, alpha, low, high):
    """``s_norm ** alpha`` of a 1-D pool with known range (see ``fairrag_core.plackett_luce``)."""
    scale, shift = _normalisation(low, high)
    exponent = _exponent(alpha)
    out = np.empty(scores.shape[0])
    for i in range(scores.shape[0]):
        out[i] = _log_weight(scores[i], scale, shift, alpha, exponent)
    return out


@_compile
def plackett_luce_top_k(scores, alpha, low, high, exponentials, k):
    """The ``k`` largest of ``plackett_luce_log_weights(scores) - log(exponentials)``, best first.

    ``-log`` of an Exponential(1) draw is a Gumbel(0, 1) draw. ``exponentials`` is overwritten.
    """
    scale, shift = _normalisation(low, high)
    exponent = _exponent(alpha)
    n = scores.shape[0]
    keys = exponentials
    for i in range(n):
        keys[i] = _log_weight(scores[i], scale, shift, alpha, exponent) - math.log(keys[i])
    if 4 * k > n:
        return np.argsort(keys)[: -k - 1 : -1]
    out = np.empty(k, dtype=np.intp)
    for position in range(k):  # k passes of argmax beat a sort for small k
        best = 0
        for i in range(1, n):
            if keys[i] > keys[best]:
                best = i
        out[position] = best
        keys[best] = -np.inf
    return out


def jit(function: Callable) -> Callable:
    """``function`` compiled in nopython mode (cached on disk)."""
    return _compile(function)
