"""The forced-exposure ranker: deterministic per-group slot quotas (the paper's ranker 3)."""

from __future__ import annotations

import math
from collections.abc import Hashable
from types import MappingProxyType

import numpy as np

from ..ranking import CandidatePool, Ranker, RankingResult

__all__ = ["ForcedExposureRanker", "slot_quotas"]

# floor(k * share) must not lose a slot to floating point (e.g. 10 * 0.7 = 7.000000000000001
# is fine, but 100 * 0.29 = 28.999999999999996 is not).
_FLOOR_EPS = 1e-9


def slot_quotas(k: int, shares: np.ndarray) -> np.ndarray:
    """``floor(k * share_g)`` for every group: the slots each group is owed in a top-k."""
    return np.floor(k * shares + _FLOOR_EPS).astype(np.intp)


class ForcedExposureRanker(Ranker):
    """Count quotas, filled greedily by score (docs/SPEC.md, ranker 3).

    Each group g is owed ``q_g = floor(k * target_g)`` slots (k = 5 at parity: 2 each; the fifth
    goes by score). Positions are filled one at a time: among each group's best remaining
    candidate the best-scoring one is taken, except that when the positions left equal the slots
    still owed to under-quota groups, only those groups may take the position. A group with
    fewer candidates than its quota gives the missing slots back to the others; the shortfall is
    reported in :attr:`RankingResult.quota_shortfall`. Ties go to the earlier pool position.
    On a pool whose plain top-k already meets the quotas the result is the top-k by score.
    Deterministic; ``seed`` is accepted for a uniform interface and unused.
    """

    name = "forced_exposure"
    deterministic = True
    in_default_study = True
    knobs = ("target_share",)
    binary_knobs = ("target_share",)
    sweep_grid = MappingProxyType({"target_share": (0.3, 0.4, 0.5, 0.6)})

    def _rank(self, pool: CandidatePool, k: int, rng: np.random.Generator) -> np.ndarray:
        return self._rank_detailed(pool, k, rng).indices

    def _rank_detailed(
        self, pool: CandidatePool, k: int, rng: np.random.Generator
    ) -> RankingResult:
        scores, codes, target = pool.scores, pool.codes, self.target
        assert codes is not None and target is not None  # uses_groups, requires_target
        n_groups = len(target.groups)
        order = np.argsort(-scores, kind="stable")
        ordered_codes = codes[order]
        # Each group's candidates, best first (a queue consumed from the front).
        queues = [order[ordered_codes == g].tolist() for g in range(n_groups)]
        quotas = slot_quotas(k, target.shares).tolist()
        shortfall: dict[Hashable, int] = {}
        for g in range(n_groups):
            if quotas[g] > len(queues[g]):
                shortfall[target.groups[g]] = quotas[g] - len(queues[g])
                quotas[g] = len(queues[g])
        heads = [0] * n_groups
        owed = quotas[:]  # slots still owed per group
        total_owed = sum(owed)
        chosen: list[int] = []
        for position in range(k):
            must_fill = k - position == total_owed
            best_g, best_idx, best_score = -1, -1, -math.inf
            for g in range(n_groups):
                if heads[g] >= len(queues[g]) or (must_fill and owed[g] == 0):
                    continue
                idx = queues[g][heads[g]]
                s = scores[idx]
                if s > best_score or (s == best_score and idx < best_idx):
                    best_g, best_idx, best_score = g, idx, s
            chosen.append(best_idx)
            heads[best_g] += 1
            if owed[best_g] > 0:
                owed[best_g] -= 1
                total_owed -= 1
        return RankingResult(np.asarray(chosen, dtype=np.intp), shortfall)
