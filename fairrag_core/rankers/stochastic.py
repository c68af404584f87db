"""The stochastic ranker: Plackett-Luce sampling over relevance (Kim & Diaz 2025)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import numpy as np

from ..plackett_luce import plackett_luce_log_weights, sample_plackett_luce
from ..ranking import CandidatePool, Ranker
from ..validation import as_rng, check_alpha, check_k, check_score_batch

__all__ = ["StochasticRanker", "plackett_luce_log_weights"]


class StochasticRanker(Ranker):
    """Plackett-Luce sampling (Kim & Diaz 2025; docs/SPEC.md, ranker 2).

    Scores are min-max normalised to [1, 2] (all equal -> all 1); ``w = s_norm ** alpha`` are
    log-weights, ``P(d first) = exp(w_d) / sum_j exp(w_j)``, and a ranking is sampled without
    replacement by the Gumbel trick: the top-k of ``w + G`` with ``G ~ Gumbel(0, 1)`` i.i.d.,
    drawn as ``G = -log(E)``, ``E ~ Exponential(1)``; equal keys (equal scores at large alpha,
    where ``2 ** alpha`` rounds the noise away) go by larger ``G``, so tied candidates share the
    top places evenly. Large ``alpha`` approaches the standard ranking; small ``alpha`` spreads
    exposure evenly. Default ``alpha = 4`` (Kim & Diaz swept 1, 2, 4, 8); at most 1,000
    (:data:`fairrag_core.validation.ALPHA_MAX`). Groups are ignored.

    :meth:`sample` draws many rankings of one pool at once and :meth:`rank_batch` one ranking
    of each of many pools; both draw row after row from the generator, so row b is exactly the
    ranking the (b+1)-th successive :meth:`rank` call with the same seed gives.
    """

    name = "stochastic"
    uses_groups = False
    requires_target = False
    in_default_study = True
    knobs = ("alpha",)
    sweep_grid = MappingProxyType({"alpha": (1.0, 2.0, 4.0, 8.0)})

    def __init__(self, *, alpha: float = 4.0, **fairness: Any) -> None:
        self.alpha = check_alpha(alpha)
        super().__init__(**fairness)

    def _log_weights(self, pool: CandidatePool) -> np.ndarray:
        return plackett_luce_log_weights(pool.scores, self.alpha, pool.low, pool.high)

    def _rank(self, pool: CandidatePool, k: int, rng: np.random.Generator) -> np.ndarray:
        return sample_plackett_luce(self._log_weights(pool), k, rng)

    def _sample(
        self, pool: CandidatePool, k: int, n_samples: int, rng: np.random.Generator
    ) -> np.ndarray:
        return sample_plackett_luce(self._log_weights(pool), k, rng, n_samples)

    def rank_batch(
        self, scores: np.ndarray, k: int = 5, *, rng: np.random.Generator | int | None = None
    ) -> np.ndarray:
        """One independent draw for each of B pools: (B, n) scores -> (B, min(k, n)) indices.

        Row b is the ranking the (b+1)-th successive :meth:`rank` call would give from the same
        generator state. For many draws of *one* pool, use :meth:`sample`.
        """
        scores = check_score_batch(scores)
        k = min(check_k(k), scores.shape[1])
        generator = self._rng if rng is None else as_rng(rng)
        if scores.size == 0:
            return np.empty((scores.shape[0], 0), dtype=np.intp)
        return sample_plackett_luce(plackett_luce_log_weights(scores, self.alpha), k, generator)

    def __repr__(self) -> str:
        return f"StochasticRanker(alpha={self.alpha}, seed={self.seed!r})"
