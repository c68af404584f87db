"""The stochastic ranker: Plackett-Luce sampling over relevance (Kim & Diaz 2025)."""

from __future__ import annotations

import numpy as np

from ..ranking import Ranker
from ..validation import as_rng, check_alpha, check_k, check_score_batch

__all__ = ["StochasticRanker", "plackett_luce_log_weights"]


def plackett_luce_log_weights(
    scores: np.ndarray, alpha: float, low: float | None = None, high: float | None = None
) -> np.ndarray:
    """``w = s_norm ** alpha`` with ``s_norm`` the scores min-max normalised to [1, 2].

    A pool whose scores are all equal normalises to all 1 (SPEC.md, ranker 2). ``low``/``high``
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
    else:
        low_rows = scores.min(axis=-1, keepdims=True)
        span = scores.max(axis=-1, keepdims=True) - low_rows
        normalised = 1.0 + (scores - low_rows) / np.where(span > 0, span, 1.0)
    return _power(normalised, alpha)


def _power(base: np.ndarray, alpha: float) -> np.ndarray:
    """``base ** alpha``, overwriting ``base`` (a fresh array the caller owns).

    Integer alphas (Kim & Diaz's 1, 2, 4, 8, ...) go by repeated squaring in place, which is
    faster than ``pow``: two multiplications for alpha = 4.
    """
    exponent = int(alpha)
    if exponent != alpha or not 1 <= exponent <= 64:
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


class StochasticRanker(Ranker):
    """Plackett-Luce sampling (Kim & Diaz 2025; SPEC.md, ranker 2).

    Scores are min-max normalised to [1, 2] (all equal -> all 1); ``w = s_norm ** alpha`` are
    log-weights, ``P(d first) = exp(w_d) / sum_j exp(w_j)``, and a ranking is sampled without
    replacement by the Gumbel trick: the top-k of ``w + G`` with ``G ~ Gumbel(0, 1)`` i.i.d.
    Large ``alpha`` approaches the standard ranking; small ``alpha`` spreads exposure evenly.
    Default ``alpha = 4`` (Kim & Diaz swept 1, 2, 4, 8). Groups are ignored.
    """

    name = "stochastic"
    uses_groups = False
    requires_target = False

    def __init__(self, *, alpha: float = 4.0, **fairness) -> None:
        self.alpha = check_alpha(alpha)
        super().__init__(**fairness)

    def _rank(self, pool, k, rng) -> np.ndarray:
        keys = plackett_luce_log_weights(pool.scores, self.alpha, pool.low, pool.high)
        keys += rng.gumbel(size=keys.shape[0])
        # Ascending argsort read backwards: continuous noise makes ties a null event.
        return keys.argsort()[: -k - 1 : -1]

    def rank_batch(
        self, scores: np.ndarray, k: int = 5, *, rng: np.random.Generator | int | None = None
    ) -> np.ndarray:
        """One independent Plackett-Luce draw per pool: (B, n) scores -> (B, min(k, n)) indices."""
        scores = check_score_batch(scores)
        k = min(check_k(k), scores.shape[1])
        generator = self._rng if rng is None else as_rng(rng)
        if scores.size == 0:
            return np.empty((scores.shape[0], 0), dtype=np.intp)
        keys = plackett_luce_log_weights(scores, self.alpha)
        # Gumbel(0, 1) = -log(Exponential(1)); faster than Generator.gumbel on large arrays.
        keys -= np.log(generator.standard_exponential(size=scores.shape))
        if k * 4 > scores.shape[1]:
            return np.argsort(-keys, axis=1)[:, :k]
        # Small k: k rounds of row-wise argmax, best first, beat a partition plus a sort.
        rows = np.arange(keys.shape[0])
        out = np.empty((keys.shape[0], k), dtype=np.intp)
        for position in range(k):
            best = keys.argmax(axis=1)
            out[:, position] = best
            keys[rows, best] = -np.inf
        return out

    def __repr__(self) -> str:
        return f"StochasticRanker(alpha={self.alpha}, seed={self.seed!r})"
