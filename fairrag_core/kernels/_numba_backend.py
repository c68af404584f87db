"""The numba kernel backend (``pip install fairrag[fast]``): the same numbers as the numpy
backend, computed in compiled loops, so a 50-candidate pool costs one call instead of ten.

Compiled on first use and cached on disk; ``fastmath`` stays off so every operation rounds as
IEEE arithmetic says. Log-weights are bit-equal to numpy's for integer alpha (the same
multiplications); for other alphas and for ``log`` the two libraries may differ in the last
place, which changes a ranking only if two keys lie within one ulp of each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from ..plackett_luce import integer_exponent

__all__ = ["NAME", "jit", "plackett_luce_log_weights", "plackett_luce_top_k", "score_range"]

NAME = "numba"



def _compile(function):
    """``function`` compiled in nopython mode, cached on disk when a cache folder is writable
    (numba refuses ``cache=True`` at once when none is, e.g. a read-only install and home)."""
    try:
        return numba.njit(cache=True)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(function)


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


# The rule for when powers go by repeated squaring, compiled into the kernels below.
_exponent = numba.extending.register_jitable(integer_exponent)


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
    """The ``k`` largest keys ``plackett_luce_log_weights(scores) + G``, best first, with
    ``G = -log(exponentials)``; equal keys go by larger ``G`` (``plackett_luce.gumbel_order``).
    ``exponentials`` is overwritten with ``G``.
    """
    scale, shift = _normalisation(low, high)
    exponent = _exponent(alpha)
    n = scores.shape[0]
    gumbels = exponentials
    keys = np.empty(n)
    for i in range(n):
        gumbels[i] = -math.log(gumbels[i])
        keys[i] = _log_weight(scores[i], scale, shift, alpha, exponent) + gumbels[i]
    if 4 * k > n:  # by noise, then stably by key: the order of gumbel_order
        by_noise = np.argsort(-gumbels, kind="mergesort")
        return by_noise[np.argsort(-keys[by_noise], kind="mergesort")][:k]
    out = np.empty(k, dtype=np.intp)
    for position in range(k):  # k passes of argmax beat a sort for small k
        best = 0
        for i in range(1, n):
            if keys[i] > keys[best] or (keys[i] == keys[best] and gumbels[i] > gumbels[best]):
                best = i
        out[position] = best
        keys[best] = -np.inf
    return out


def jit(function: Callable) -> Callable:
    """``function`` compiled in nopython mode (cached on disk when possible)."""
    return _compile(function)
