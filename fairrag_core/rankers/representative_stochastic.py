"""The representative stochastic ranker: exposure-aware Plackett-Luce (the paper's ranker 4)."""

from __future__ import annotations

import math
from functools import cache, lru_cache

import numpy as np

from .. import kernels
from ..plackett_luce import gumbel_order
from ..ranking import Ranker
from ..validation import check_alpha

__all__ = ["RepresentativeStochasticRanker"]


class RepresentativeStochasticRanker(Ranker):
    """Sequential Plackett-Luce draws steered toward the target exposure (docs/SPEC.md, ranker 4).

    The list is built one position at a time. Before the draw for position ``i``:

    1. **Correction.** Each group's exposure share in the partial list,
       ``E_g = sum_{j < i, group(r_j) = g} v_j / sum_{j < i} v_j``, gives the correction
       ``c_g = clip(gain * (target_g - E_g), -1, 1)``, added to the log-weight
       ``w_d = s_norm_d ** alpha`` of every candidate d of group g. The cap of 1.0 is SPEC.md's;
       at alpha = 1 it equals the whole normalised-relevance span [1, 2]. Before the first draw
       no exposure has been given, so no correction is applied (our choice: docs/SPEC.md is silent).
    2. **Look-ahead.** Every group g with a target share is owed ``floor_g = (target_g -
       tolerance) * sum_{j<=k} v_j`` by the end of the list. If position i went to group h, g
       could still gain at most the weights of the next positions its remaining candidates can
       fill. docs/SPEC.md's rule: when g could not reach ``floor_g`` even if every later position
       went to g, and position i goes to another group, the draw is restricted to g (to the
       union of such groups). With several groups that rule alone lets each group believe it
       can have every later position, so we check them jointly: h may take position i when,
       after it does, every owed group can still reach its floor individually *and* their
       deficits together fit in the exposure of the positions left. The draw is restricted to
       the groups h for which that holds; when none does, docs/SPEC.md's union rule applies; when
       every group qualifies, nothing is restricted. For two groups (the paper's case) the
       joint check adds nothing, since the floors sum to at most the total: the result is
       exactly docs/SPEC.md's rule. Candidates left in the pool limit every reach.
    3. **Draw.** One Plackett-Luce draw over the remaining candidates of the allowed groups.
       Because the correction is constant within a group, the draw is done exactly in two
       steps: a group g with probability proportional to ``exp(c_g) * Z_g`` (``Z_g`` the sum
       of ``exp(w_d)`` over g's remaining candidates), then g's next candidate in a
       Plackett-Luce order of g alone, sampled once up front by the Gumbel trick.

    Parameters (our defaults, docs/SPEC.md leaves them open): ``gain = 2.0``, so a group entirely
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
        backend = kernels.active
        log_weights = backend.plackett_luce_log_weights(
            pool.scores, self.alpha, pool.low, pool.high
        )
        # Step 3 of the docstring: every group's Plackett-Luce order comes from one Gumbel-trick
        # order of the whole pool, sampled up front; then one uniform per position.
        gumbels = rng.gumbel(size=log_weights.shape[0])
        order = gumbel_order(log_weights + gumbels, gumbels)
        uniforms = rng.random(k)
        weights, after = _weights_and_suffix_sums(self.exposure, k)
        shares = self.target.shares
        floors = (shares - self.tolerance) * after[0] - 1e-12
        return _compiled_draw(backend)(
            order, pool.codes, log_weights, shares, weights, after, floors, self.gain, uniforms
        )

    def __repr__(self) -> str:
        target = self.target.as_dict()
        return (
            f"RepresentativeStochasticRanker(target={target}, alpha={self.alpha}, "
            f"gain={self.gain}, tolerance={self.tolerance}, seed={self.seed!r})"
        )


@lru_cache(maxsize=128)
def _weights_and_suffix_sums(exposure, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The weights ``v_1..v_k`` and ``after[p] = v_{p+1} + ... + v_k`` (0-based p, after[k] = 0)."""
    weights = exposure.weights(k).astype(float)
    after = np.zeros(k + 1)
    for p in range(k - 1, -1, -1):
        after[p] = after[p + 1] + weights[p]
    weights.setflags(write=False)
    after.setflags(write=False)
    return weights, after


@cache
def _compiled_draw(backend):
    """:func:`_draw_ranking` for a kernel backend (compiled by numba, or run on lists)."""
    return backend.jit(_draw_ranking)


def _draw_ranking(order, codes, log_weights, shares, weights, after, floors, gain, uniforms):
    """Steps 1-3 of :class:`RepresentativeStochasticRanker`, position by position.

    ``order`` is a Plackett-Luce order of the whole pool (its restriction to a group is that
    group's order), ``codes`` each candidate's target bucket, ``weights``/``after`` the position
    weights and their suffix sums, ``floors`` the exposure each bucket is owed, ``uniforms`` one
    number in [0, 1) per position. Written in plain loops so that numba can compile it
    (``fairrag_core.kernels``); it runs as Python on lists when numba is absent.
    """
    k = len(uniforms)
    n = len(order)
    n_groups = len(shares)
    # Each group's queue (its candidates in sampled order), stored group after group.
    starts = [0] * (n_groups + 1)
    for i in range(n):
        starts[codes[i] + 1] += 1
    for g in range(n_groups):
        starts[g + 1] += starts[g]
    fill = starts[:n_groups]  # where each group's next member goes
    queue = [0] * n
    for i in range(n):
        g = codes[order[i]]
        queue[fill[g]] = order[i]
        fill[g] += 1
    heads = starts[:n_groups]  # each group's next candidate to show
    # log Z of each queue from each of its positions on (a suffix log-sum-exp).
    log_mass = [0.0] * n
    for g in range(n_groups):
        running = -math.inf
        for j in range(starts[g + 1] - 1, starts[g] - 1, -1):
            running = _logaddexp(running, log_weights[queue[j]])
            log_mass[j] = running
    left = [starts[g + 1] - starts[g] for g in range(n_groups)]
    owed = [shares[g] > 0 for g in range(n_groups)]
    given = [0.0] * n_groups
    given_total = 0.0
    chosen = np.empty(k, dtype=np.intp)
    for position in range(k):
        allowed = _allowed_groups(position, k, left, given, floors, owed, after)
        g = allowed[0]
        if len(allowed) > 1:
            logits = [log_mass[heads[h]] for h in allowed]
            if given_total > 0:
                for i in range(len(allowed)):
                    deviation = shares[allowed[i]] - given[allowed[i]] / given_total
                    logits[i] += min(1.0, max(-1.0, gain * deviation))
            g = allowed[_sample_index(logits, uniforms[position])]
        chosen[position] = queue[heads[g]]
        heads[g] += 1
        left[g] -= 1
        given[g] += weights[position]
        given_total += weights[position]
    return chosen


@kernels.jitable
def _logaddexp(a, b):
    """``log(exp(a) + exp(b))`` without overflow; ``a`` may be -inf."""
    if a == -math.inf:
        return b
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@kernels.jitable
def _allowed_groups(position, k, left, given, floors, owed, after):
    """Groups that may take ``position`` after the look-ahead (see the class docstring).

    ``owed[g]``: whether group g has a target share. Relies on non-increasing position weights
    (true of every exposure model offered).
    """
    n_groups = len(left)
    live = [g for g in range(n_groups) if left[g] > 0]
    capacity = after[position + 1]  # exposure of every position after this one
    weight = after[position] - capacity
    # Fast path: every owed group can reach its floor even without this position, and whoever
    # takes it, the deficits left fit in the positions after it. Then any group may take it.
    total_deficit = 0.0
    reachable = True
    for g in range(n_groups):
        deficit = floors[g] - given[g]
        if owed[g] and deficit > 0:
            if deficit > capacity - after[min(k, position + 1 + left[g])]:
                reachable = False
                break
            total_deficit += deficit
    if reachable:
        least = math.inf
        for h in live:
            relief = min(weight, max(0.0, floors[h] - given[h])) if owed[h] else 0.0
            least = min(least, relief)
        if total_deficit - least <= capacity + 1e-12:
            return live
    feasible = []
    forced = []
    for h in live:
        missing = 0.0
        coverable = 0.0
        for g in range(n_groups):
            if not owed[g]:
                continue
            own = 1 if g == h else 0
            deficit = floors[g] - given[g] - (weight if own else 0.0)
            if deficit <= 0:
                continue
            room = capacity - after[min(k, position + 1 + left[g] - own)]
            missing += max(0.0, deficit - room)
            coverable += min(deficit, room)
        if missing <= 0 and coverable <= capacity + 1e-12:
            feasible.append(h)
        if owed[h] and given[h] + capacity - after[min(k, position + 1 + left[h])] < floors[h]:
            forced.append(h)  # docs/SPEC.md's rule: h cannot reach its floor without this slot
    if len(feasible) > 0:
        return feasible
    if len(forced) > 0:
        return forced
    return live


@kernels.jitable
def _sample_index(logits, uniform):
    """Index i drawn with probability softmax(logits)_i, by inverting the CDF at ``uniform``."""
    if len(logits) == 2:
        difference = logits[1] - logits[0]
        first = 1.0 / (1.0 + math.exp(difference)) if difference < 700 else 0.0
        return 0 if uniform < first else 1
    top = max(logits)
    masses = [math.exp(x - top) for x in logits]
    total = 0.0
    for mass in masses:  # left to right, as numba does (Python 3.12's sum() compensates)
        total += mass
    threshold = uniform * total
    running = 0.0
    for i in range(len(masses)):
        running += masses[i]
        if threshold < running:
            return i
    return len(masses) - 1
