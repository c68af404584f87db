"""The representative stochastic ranker: exposure-aware Plackett-Luce (the paper's ranker 4)."""

from __future__ import annotations

import math

import numpy as np

from ..ranking import Ranker
from ..validation import check_alpha
from .stochastic import plackett_luce_log_weights

__all__ = ["RepresentativeStochasticRanker"]


class RepresentativeStochasticRanker(Ranker):
    """Sequential Plackett-Luce draws steered toward the target exposure (SPEC.md, ranker 4).

    The list is built one position at a time. Before the draw for position ``i``:

    1. **Correction.** Each group's exposure share in the partial list,
       ``E_g = sum_{j < i, group(r_j) = g} v_j / sum_{j < i} v_j``, gives the correction
       ``c_g = clip(gain * (target_g - E_g), -1, 1)``, added to the log-weight
       ``w_d = s_norm_d ** alpha`` of every candidate d of group g. The cap of 1.0 is SPEC.md's;
       at alpha = 1 it equals the whole normalised-relevance span [1, 2]. Before the first draw
       no exposure has been given, so no correction is applied (our choice: SPEC.md is silent).
    2. **Look-ahead.** For each group g with candidates left, the best final share it could reach
       if position i went to another group is ``(X_g + v_{i+1} + ... + v_{i+m}) / sum_{j<=k} v_j``
       (``X_g`` its exposure so far, ``m`` = min(its candidates left, positions after i)). If that
       is below ``target_g - tolerance`` the draw is restricted to g (to the union of all such
       groups). When every group with candidates left is in that union, nothing is restricted.
    3. **Draw.** One Plackett-Luce draw over the remaining allowed candidates by the Gumbel trick,
       with fresh noise per position (the weights change between positions).

    Parameters (our defaults, SPEC.md leaves them open): ``gain = 2.0``, so a group entirely
    missing from a parity list (deviation 0.5) gets the full +1.0; ``tolerance = 0.05``, the
    accuracy SPEC.md asks of the mean share. ``alpha`` as for the stochastic ranker (default 4).
    A group with no target share (unnamed groups when the target lists no ``OTHERS``) is never
    forced and is pushed down once shown.
    """

    name = "representative_stochastic"

    def __init__(
        self, *, alpha: float = 4.0, gain: float = 2.0, tolerance: float = 0.05, **fairness
    ) -> None:
        self.alpha = check_alpha(alpha)
        if (
            isinstance(gain, bool)
            or not isinstance(gain, (int, float))
            or not math.isfinite(gain)
            or gain < 0
        ):
            raise ValueError(f"gain must be a finite number >= 0, got {gain!r}")
        if (
            isinstance(tolerance, bool)
            or not isinstance(tolerance, (int, float))
            or not 0 <= tolerance < 1
        ):
            raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
        self.gain = float(gain)
        self.tolerance = float(tolerance)
        super().__init__(**fairness)

    def _rank(self, pool, k, rng) -> np.ndarray:
        codes = pool.codes
        share_list = self.target.shares.tolist()
        n_groups = len(share_list)
        log_weights = plackett_luce_log_weights(pool.scores, self.alpha, pool.low, pool.high)
        # The correction is constant within a group, so a draw factorises exactly into
        # (a) a group, with P(g) proportional to exp(c_g) * Z_g (Z_g = sum of exp(w_d) over g's
        # remaining candidates), then (b) g's next candidate in a Plackett-Luce order of g alone,
        # sampled once up front by the Gumbel trick. Same distribution as adding c_g to every
        # log-weight and drawing from the whole pool, at the cost of G numbers per position.
        keys = rng.gumbel(size=log_weights.shape[0])
        keys += log_weights
        order = (-keys).argsort()
        ordered_codes = codes[order]
        queues = []  # per group: its candidates in sampled order
        log_mass = []  # per group: log Z_g of its queue from position j on (j <= k)
        for g in range(n_groups):
            members = order[ordered_codes == g]
            queues.append(members.tolist())
            tail = np.logaddexp.accumulate(log_weights[members[::-1]])
            log_mass.append(tail[: -k - 2 : -1].tolist())
        uniforms = rng.random(k).tolist()
        weights = self.exposure.weights(k).tolist()
        after = _suffix_sums(weights)  # after[p] = v_{p+1} + ... + v_k (0-based p)
        floors = [(share - self.tolerance) * after[0] - 1e-12 for share in share_list]
        gain = self.gain
        left = [len(queue) for queue in queues]
        heads = [0] * n_groups
        given = [0.0] * n_groups
        given_total = 0.0
        chosen = []
        for position in range(k):
            live = []
            forced = []
            for g in range(n_groups):
                if left[g]:
                    live.append(g)
                    # Look-ahead: g must get this position if, should it go elsewhere, even the
                    # next left[g] positions all going to g could not lift g to target - tolerance.
                    reachable = (
                        given[g] + after[position + 1] - after[min(k, position + 1 + left[g])]
                    )
                    if reachable < floors[g] and share_list[g] > 0:
                        forced.append(g)
            allowed = forced or live
            if len(allowed) == 1:
                g = allowed[0]
            else:
                logits = []
                for h in allowed:
                    correction = 0.0
                    if given_total > 0:
                        deviation = share_list[h] - given[h] / given_total
                        correction = min(1.0, max(-1.0, gain * deviation))
                    logits.append(log_mass[h][heads[h]] + correction)
                g = allowed[_sample_index(logits, uniforms[position])]
            chosen.append(queues[g][heads[g]])
            heads[g] += 1
            left[g] -= 1
            given[g] += weights[position]
            given_total += weights[position]
        return np.asarray(chosen, dtype=np.intp)

    def __repr__(self) -> str:
        target = self.target.as_dict()
        return (
            f"RepresentativeStochasticRanker(target={target}, alpha={self.alpha}, "
            f"gain={self.gain}, tolerance={self.tolerance}, seed={self.seed!r})"
        )


def _suffix_sums(weights: list[float]) -> list[float]:
    """``out[p] = sum(weights[p:])`` for p = 0..len(weights), so ``out[len] = 0``."""
    out = [0.0] * (len(weights) + 1)
    for p in range(len(weights) - 1, -1, -1):
        out[p] = out[p + 1] + weights[p]
    return out


def _sample_index(logits: list[float], uniform: float) -> int:
    """Index i drawn with probability softmax(logits)_i, by inverting the CDF at ``uniform``."""
    top = max(logits)
    masses = [math.exp(x - top) for x in logits]
    threshold = uniform * math.fsum(masses)
    running = 0.0
    for i, mass in enumerate(masses):
        running += mass
        if threshold < running:
            return i
    return len(masses) - 1
