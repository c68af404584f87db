"""The standard ranker: relevance order, no fairness intervention (the paper's baseline)."""

from __future__ import annotations

import numpy as np

from ..ranking import CandidatePool, Ranker
from ..validation import check_k, check_score_batch

__all__ = ["StandardRanker"]


class StandardRanker(Ranker):
    """Sort by score, descending; ties keep pool order (docs/SPEC.md, ranker 1).

    ``ranking = argsort(-scores, stable)[:k]``. Deterministic; groups are ignored. A fairness
    target may still be given (it is kept on ``self.target`` for the metrics) but is optional.
    """

    name = "standard"
    deterministic = True
    uses_groups = False
    requires_target = False
    in_default_study = True

    def _rank(self, pool: CandidatePool, k: int, rng: np.random.Generator) -> np.ndarray:
        return (-pool.scores).argsort(kind="stable")[:k]

    def rank_batch(self, scores: np.ndarray, k: int = 5) -> np.ndarray:
        """Rank many pools at once: (B, n) scores -> (B, min(k, n)) indices."""
        scores = check_score_batch(scores)
        k = min(check_k(k), scores.shape[1])
        return np.argsort(-scores, axis=1, kind="stable")[:, :k]
