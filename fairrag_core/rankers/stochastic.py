"""The stochastic ranker: Plackett-Luce sampling over relevance (Kim & Diaz 2025)."""

from __future__ import annotations

import numpy as np

from .. import kernels
from ..plackett_luce import gumbel_order, plackett_luce_log_weights
from ..ranking import Ranker
from ..validation import as_rng, check_alpha, check_k, check_score_batch

__all__ = ["StochasticRanker", "plackett_luce_log_weights"]


class StochasticRanker(Ranker):
    """Plackett-Luce sampling (Kim & Diaz 2025; docs/SPEC.md, ranker 2).

    Scores are min-max normalised to [1, 2] (all equal -> all 1); ``w = s_norm ** alpha`` are
    log-weights, ``P(d first) = exp(w_d) / sum_j exp(w_j)``, and a ranking is sampled without
    replacement by the Gumbel trick: the top-k of ``w + G`` with ``G ~ Gumbel(0, 1)`` i.i.d.,
    drawn as ``G = -log(E)``, ``E ~ Exponential(1)``. Large ``alpha`` approaches the standard
    ranking; small ``alpha`` spreads exposure evenly. Default ``alpha = 4`` (Kim & Diaz swept 1,
    2, 4, 8). Groups are ignored.

    The single call runs in a compiled kernel when numba is installed
    (:mod:`fairrag_core.kernels`); :meth:`rank_batch` draws in numpy. Both consume the
    generator the same way, so ``rank_batch(pools)`` with a seed gives the rankings of
    successive :meth:`rank` calls with that seed.
    """

    name = "stochastic"
    uses_groups = False
    requires_target = False

    def __init__(self, *, alpha: float = 4.0, **fairness) -> None:
        self.alpha = check_alpha(alpha)
        super().__init__(**fairness)

    def _rank(self, pool, k, rng) -> np.ndarray:
        exponentials = rng.standard_exponential(pool.scores.shape[0])
        return kernels.active.plackett_luce_top_k(
            pool.scores, self.alpha, pool.low, pool.high, exponentials, k
        )

    def rank_batch(
        self, scores: np.ndarray, k: int = 5, *, rng: np.random.Generator | int | None = None
    ) -> np.ndarray:
        """One independent Plackett-Luce draw per pool: (B, n) scores -> (B, min(k, n)) indices.

        Row b is the ranking the (b+1)-th successive :meth:`rank` call would give from the same
        generator state (same normalisation, same draws).
        """
        scores = check_score_batch(scores)
        k = min(check_k(k), scores.shape[1])
        generator = self._rng if rng is None else as_rng(rng)
        if scores.size == 0:
            return np.empty((scores.shape[0], 0), dtype=np.intp)
        gumbels = np.log(generator.standard_exponential(size=scores.shape))
        np.negative(gumbels, out=gumbels)
        keys = plackett_luce_log_weights(scores, self.alpha)
        keys += gumbels
        if k * 4 > scores.shape[1]:
            return gumbel_order(keys, gumbels)[:, :k]
        # Small k: k rounds of row-wise argmax (equal keys by larger noise, as gumbel_order),
        # best first, beat two sorts.
        rows = np.arange(keys.shape[0])
        out = np.empty((keys.shape[0], k), dtype=np.intp)
        for position in range(k):
            top = keys.max(axis=1, keepdims=True)
            best = np.where(keys == top, gumbels, -np.inf).argmax(axis=1)
            out[:, position] = best
            keys[rows, best] = -np.inf
        return out

    def __repr__(self) -> str:
        return f"StochasticRanker(alpha={self.alpha}, seed={self.seed!r})"
