"""Plackett-Luce sampling by the Gumbel trick (docs/SPEC.md, ranker 2), in numpy, vectorised
across draws: one ranking costs a few array operations, a thousand cost hardly more."""

from __future__ import annotations

import numpy as np

__all__ = ["gumbel_order", "gumbel_top_k", "plackett_luce_log_weights", "sample_plackett_luce"]


def plackett_luce_log_weights(
    scores: np.ndarray, alpha: float, low: float | None = None, high: float | None = None
) -> np.ndarray:
    """``w = s_norm ** alpha`` with ``s_norm = 1 + (s - min) / (max - min)``, in [1, 2].

    A pool whose scores are all equal normalises to all 1 (docs/SPEC.md, ranker 2). ``low``/
    ``high`` may pass a 1-D pool's known range; a (B, n) batch is normalised pool by pool. A range
    wider than the largest float (``max - min`` overflows, e.g. -1e308 and 1e308) is normalised
    from halved scores, which gives the same ``s_norm`` without overflow. ``alpha`` must keep
    ``2 ** alpha`` finite (at most 1,000; :func:`fairrag_core.validation.check_alpha`).
    """
    scores = np.asarray(scores, dtype=float)
    if scores.ndim == 1:
        low = float(scores.min()) if low is None else low
        high = float(scores.max()) if high is None else high
        if not high > low:
            return np.ones_like(scores)  # 1 ** alpha
        span = high - low
        if span == np.inf:  # halving is exact for every float this large
            normalised = (scores * 0.5 - low * 0.5) / (high * 0.5 - low * 0.5)
        else:
            normalised = (scores - low) / span
    else:
        low_rows = scores.min(axis=-1, keepdims=True)
        high_rows = scores.max(axis=-1, keepdims=True)
        with np.errstate(over="ignore"):
            span = high_rows - low_rows
        if np.isinf(span).any():  # halve the rows whose range overflows
            factor = np.where(np.isinf(span), 0.5, 1.0)
            low_rows = low_rows * factor
            span = high_rows * factor - low_rows
            normalised = scores * factor
            normalised -= low_rows
        else:
            normalised = scores - low_rows
        np.divide(normalised, span, out=normalised, where=span > 0)  # constant pools stay 0
    normalised += 1.0
    return _power(normalised, alpha)


def gumbel_order(keys: np.ndarray, gumbels: np.ndarray) -> np.ndarray:
    """Indices sorting ``keys = log_weights + gumbels`` descending along the last axis, equal
    keys by their Gumbel noise, descending.

    With large alpha (log-weights near ``2 ** alpha``, alpha above about 40) adding the noise
    rounds it away, so candidates with equal scores get equal keys; ordering those by their own
    noise keeps the draw uniform among them, where a plain sort would fall back to pool order.
    """
    # lexsort sorts ascending by the last key, then the one before: read it backwards.
    return np.lexsort((gumbels, keys), axis=-1)[..., ::-1]


def gumbel_top_k(keys: np.ndarray, gumbels: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` of :func:`gumbel_order` along the last axis, for a 1-D or 2-D ``keys``.

    For a 2-D ``keys`` a partial sort replaces the full one; both give the same indices.
    """
    n = keys.shape[-1]
    if keys.ndim == 1 or k >= n:
        return gumbel_order(keys, gumbels)[..., :k]
    # Many rows: partition out the k + 1 largest keys (ascending partition: faster than on
    # -keys), order the k largest by (key, noise), and re-sort the rare rows where equal keys
    # straddle the k-th place (only at large alpha).
    part = np.argpartition(keys, n - k - 1, axis=1)
    rows = np.arange(keys.shape[0])[:, None]
    top = part[:, n - k :]
    top_keys = keys[rows, top]
    order = np.lexsort((gumbels[rows, top], top_keys), axis=1)[:, ::-1]
    out = top[rows, order]
    straddle = np.flatnonzero(top_keys.min(axis=1) == keys[rows[:, 0], part[:, n - k - 1]])
    if straddle.size:
        out[straddle] = gumbel_order(keys[straddle], gumbels[straddle])[:, :k]
    return out


def sample_plackett_luce(
    log_weights: np.ndarray, k: int, rng: np.random.Generator, n_samples: int | None = None
) -> np.ndarray:
    """Top-``k`` prefixes of Plackett-Luce rankings with ``P(d first) ∝ exp(log_weights_d)``.

    The Gumbel trick (docs/SPEC.md, ranker 2): the top-k of ``w + G``, ``G = -log(E)`` with
    ``E ~ Exponential(1)`` i.i.d., equal keys by larger ``G``. ``log_weights`` of shape (n,) give
    one ranking (k,), or ``n_samples`` independent rankings (n_samples, k); of shape (B, n), one
    ranking per row (B, k). Draws are taken row after row, so row b of a batch is exactly the
    (b+1)-th of successive single draws from the same generator.
    """
    shape = log_weights.shape if n_samples is None else (n_samples, log_weights.shape[-1])
    gumbels = rng.standard_exponential(shape)
    np.log(gumbels, out=gumbels)
    np.negative(gumbels, out=gumbels)
    keys = gumbels + log_weights
    return gumbel_top_k(keys, gumbels, k)


def _power(base: np.ndarray, alpha: float) -> np.ndarray:
    """``base ** alpha``, overwriting ``base`` (a fresh array the caller owns).

    Integer alphas from 1 to 64 (Kim & Diaz's 1, 2, 4, 8, ...) go by repeated squaring in place,
    faster than ``pow``: two multiplications for alpha = 4.
    """
    exponent = int(alpha)
    if exponent != alpha or not 1 <= exponent <= 64:
        return np.power(base, alpha, out=base)
    result: np.ndarray | None = None
    square = base
    while True:
        if exponent & 1:
            if result is None:
                result = square
            else:
                result *= square
        exponent >>= 1
        if not exponent:
            assert result is not None  # the top bit of exponent >= 1 was set
            return result
        square = square * square if result is square else np.multiply(square, square, out=square)
