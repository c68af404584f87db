"""Plackett-Luce log-weights from relevance scores (docs/SPEC.md, ranker 2), vectorised with numpy.

Shared by the stochastic rankers and the numpy kernel backend; the numba backend computes the
same numbers element by element (:mod:`fairrag_core.kernels._numba_backend`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["gumbel_order", "integer_exponent", "plackett_luce_log_weights"]


def plackett_luce_log_weights(
    scores: np.ndarray, alpha: float, low: float | None = None, high: float | None = None
) -> np.ndarray:
    """``w = s_norm ** alpha`` with ``s_norm`` the scores min-max normalised to [1, 2].

    A pool whose scores are all equal normalises to all 1 (docs/SPEC.md, ranker 2). ``low``/``high``
    may pass a 1-D pool's known range; a (B, n) batch is normalised pool by pool.
    """
    if scores.ndim == 1:
        low = float(scores.min()) if low is None else low
        high = float(scores.max()) if high is None else high
        if high > low:
            scale = 1.0 / (high - low)
            normalised = scores * scale
            normalised += 1.0 - low * scale
        else:
            return np.ones_like(scores)  # 1 ** alpha
    else:  # the same operations, row by row, so a batch row equals a single call bit for bit
        low_rows = scores.min(axis=-1, keepdims=True)
        span = scores.max(axis=-1, keepdims=True) - low_rows
        scale = np.divide(1.0, span, out=np.zeros_like(span), where=span > 0)
        normalised = scores * scale
        normalised += 1.0 - low_rows * scale
    return _power(normalised, alpha)


def gumbel_order(keys: np.ndarray, gumbels: np.ndarray) -> np.ndarray:
    """Indices sorting ``keys = log_weights + gumbels`` descending along the last axis, equal
    keys by their Gumbel noise, descending.

    With large alpha (log-weights near ``2 ** alpha``, alpha above about 40) adding the noise
    rounds it away, so candidates with equal scores get equal keys; ordering those by their own
    noise keeps the draw uniform among them, where a plain sort would fall back to pool order.
    The numba kernels apply the same rule.
    """
    # lexsort sorts ascending by the last key, then the one before: read it backwards.
    return np.lexsort((gumbels, keys), axis=-1)[..., ::-1]


def integer_exponent(alpha: float) -> int:
    """``alpha`` as an int in 1..64 when it is one (then powers go by repeated squaring), else 0."""
    exponent = int(alpha)
    return exponent if exponent == alpha and 1 <= exponent <= 64 else 0


def _power(base: np.ndarray, alpha: float) -> np.ndarray:
    """``base ** alpha``, overwriting ``base`` (a fresh array the caller owns).

    Integer alphas (Kim & Diaz's 1, 2, 4, 8, ...) go by repeated squaring in place, which is
    faster than ``pow``: two multiplications for alpha = 4. The numba kernels multiply in the
    same order, so both give the same bits.
    """
    exponent = integer_exponent(alpha)
    if not exponent:
        return np.power(base, alpha, out=base)
    result = None
    square = base
    while True:
        if exponent & 1:
            if result is None:
                result = square
            else:
                result *= square
        exponent >>= 1
        if not exponent:
            return result
        square = square * square if result is square else np.multiply(square, square, out=square)
