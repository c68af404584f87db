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
            normalised = np.ones_like(scores)
    else:
        low_rows = scores.min(axis=-1, keepdims=True)
        span = scores.max(axis=-1, keepdims=True) - low_rows
        normalised = 1.0 + (scores - low_rows) / np.where(span > 0, span, 1.0)
    return normalised**alpha


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
        keys += generator.gumbel(size=scores.shape)
        if k < scores.shape[1]:
            top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
        else:
            top = np.broadcast_to(np.arange(k), keys.shape).copy()
        order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1)

    def __repr__(self) -> str:
        return f"StochasticRanker(alpha={self.alpha}, seed={self.seed!r})"
