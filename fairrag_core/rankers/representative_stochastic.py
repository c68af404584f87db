"""The representative stochastic ranker: exposure-aware Plackett-Luce (the paper's ranker 4)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ..exposure import ExposureModel
from ..plackett_luce import plackett_luce_log_weights
from ..ranking import CandidatePool, Ranker
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

    :meth:`sample` runs these steps on all draws at once, position by position. Steps 1 and 2
    depend only on the groups chosen so far and on each group's candidate count (capped at k),
    so their decisions are computed once per pool make-up for every history of choices (when
    there are at most 4,096) and looked up; otherwise they run on each draw's state.
    """

    name = "representative_stochastic"

    def __init__(
        self,
        *,
        alpha: float = 4.0,
        gain: float = 2.0,
        tolerance: float = 0.05,
        **fairness: Any,
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
        self._rules_by_k: dict[int, _Rules] = {}
        self._trees: dict[tuple[int, tuple[int, ...]], list[_Decisions] | None] = {}

    def _rank(self, pool: CandidatePool, k: int, rng: np.random.Generator) -> np.ndarray:
        return self._sample(pool, k, 1, rng)[0]

    def _sample(
        self, pool: CandidatePool, k: int, n_samples: int, rng: np.random.Generator
    ) -> np.ndarray:
        log_weights = plackett_luce_log_weights(pool.scores, self.alpha, pool.low, pool.high)
        sizes = np.bincount(pool.codes, minlength=len(self.target.groups))
        rules = self._rules(k)
        tree = self._tree(rules, sizes)
        out = np.empty((n_samples, k), dtype=np.intp)
        for start in range(0, n_samples, _CHUNK):
            rows = min(_CHUNK, n_samples - start)
            # Step 3: each draw's Plackett-Luce order of the pool, sampled up front (its
            # restriction to a group is that group's order); then one uniform per position.
            gumbels = rng.standard_exponential((rows, log_weights.shape[0]))
            np.log(gumbels, out=gumbels)
            np.negative(gumbels, out=gumbels)
            uniforms = rng.random((rows, k))
            queues = _GroupQueues(log_weights, pool.codes, sizes, gumbels, k)
            out[start : start + rows] = _draw(queues, rules, sizes, tree, uniforms)
        return out

    def _rules(self, k: int) -> _Rules:
        rules = self._rules_by_k.get(k)
        if rules is None:
            rules = self._rules_by_k[k] = _Rules.build(self, k)
        return rules

    def _tree(self, rules: _Rules, sizes: np.ndarray) -> list[_Decisions] | None:
        """The look-ahead's decisions for every history of group choices (None if too many).

        They depend on the pool only through each group's candidate count capped at k, so one
        tree serves every pool of the same make-up (a 50-pool with at least k of each group
        always has the same one).
        """
        capped = np.minimum(sizes, rules.k)
        key = (rules.k, tuple(capped.tolist()))
        if key not in self._trees:
            if len(self._trees) >= 256:
                self._trees.clear()
            self._trees[key] = _decision_tree(rules, capped)
        return self._trees[key]

    def __repr__(self) -> str:
        target = self.target.as_dict()
        return (
            f"RepresentativeStochasticRanker(target={target}, alpha={self.alpha}, "
            f"gain={self.gain}, tolerance={self.tolerance}, seed={self.seed!r})"
        )


_CHUNK = 8192
"""Draws per block in :meth:`RepresentativeStochasticRanker.sample` (bounds memory)."""
_MAX_TREE_NODES = 4096
"""Largest decision tree kept (histories of group choices, 1 + G + ... + G ** (k - 1))."""


@dataclass(frozen=True, eq=False)
class _Rules:
    """What the look-ahead and the correction need for a top-k, whatever the pool."""

    k: int
    shares: np.ndarray
    owed: np.ndarray
    """Whether each group has a target share (only those are owed exposure)."""
    weights: np.ndarray
    """Position weights ``v_1..v_k``."""
    after: np.ndarray
    """``after[j] = after[min(k, j)] = v_{j+1} + ... + v_k``: 0 from j = k on (length 3k + 3)."""
    floors: np.ndarray
    """``(target_g - tolerance) * sum_{j<=k} v_j``: the exposure each group is owed."""
    gain: float

    @classmethod
    def build(cls, ranker: RepresentativeStochasticRanker, k: int) -> _Rules:
        weights, after = _weights_and_suffix_sums(ranker.exposure, k)
        shares = ranker.target.shares
        return cls(
            k=k,
            shares=shares,
            owed=shares > 0,
            weights=weights,
            after=np.concatenate((after, np.zeros(2 * k + 2))),
            floors=(shares - ranker.tolerance) * after[0] - 1e-12,
            gain=ranker.gain,
        )


class _Decisions(NamedTuple):
    """The look-ahead's decisions for the histories of one position, one row each."""

    allowed: np.ndarray
    """(histories, groups): which groups may take the position."""
    correction: np.ndarray
    """(histories, groups): ``c_g``, added to the log-weights of group g's candidates."""
    heads: np.ndarray
    """(histories, groups): how many candidates each group has given so far."""
    last_allowed: np.ndarray
    """(histories,): the last allowed group (where rounding at the top of the CDF lands)."""


def _look_ahead(
    rules: _Rules, position: int, sizes: np.ndarray, heads: np.ndarray, given: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Steps 2 and 1 of :class:`RepresentativeStochasticRanker` for many states at once.

    A state (a row of ``heads``/``given``) is how many candidates each group has shown and the
    exposure it has had before ``position``; ``sizes`` are the groups' candidate counts (capped
    at k). Returns ``(allowed, correction)``, both (states, groups). Relies on non-increasing
    position weights (true of every exposure model offered).
    """
    after = rules.after
    weight = rules.weights[position]
    capacity = after[position + 1]  # exposure of every position after this one
    left = np.maximum(sizes - heads, 0)
    live = left > 0
    # Row h of the (states, h, g) arrays supposes group h takes the position; g could still
    # gain at most the positions after it that its remaining candidates can fill.
    deficit = rules.floors - given
    room = capacity - after[position + 1 + left]
    room_taking = capacity - after[position + left]
    others = ~np.eye(sizes.shape[0], dtype=bool)
    deficits = np.where(others, deficit[:, None, :], (deficit - weight)[:, None, :])
    rooms = np.where(others, room[:, None, :], room_taking[:, None, :])
    short = rules.owed & (deficits > 0)
    missing = _any(short & (deficits > rooms))
    coverable = np.add.reduce(np.where(short, np.minimum(deficits, rooms), 0.0), axis=2)
    feasible = live & ~missing & (coverable <= capacity + 1e-12)
    # docs/SPEC.md's rule: h cannot reach its floor without this position.
    forced = live & rules.owed & (given + room < rules.floors)
    allowed = np.where(_any(feasible)[:, None], feasible, forced)
    allowed = np.where(_any(allowed)[:, None], allowed, live)
    given_total = after[0] - after[position]
    if given_total > 0:
        correction = np.clip(rules.gain * (rules.shares - given / given_total), -1.0, 1.0)
    else:  # nothing shown yet: no share to correct
        correction = np.zeros_like(given)
    return allowed, correction


def _decision_tree(rules: _Rules, sizes: np.ndarray) -> list[_Decisions] | None:
    """:func:`_look_ahead` for every history of group choices, position by position.

    History ``i`` at position p has children ``i * G + g`` (group g takes p) at p + 1.
    """
    n_groups = sizes.shape[0]
    if sum(n_groups**p for p in range(rules.k)) > _MAX_TREE_NODES:
        return None
    step = np.eye(n_groups, dtype=np.intp)
    heads = np.zeros((1, n_groups), dtype=np.intp)
    given = np.zeros((1, n_groups))
    levels = []
    for position in range(rules.k):
        allowed, correction = _look_ahead(rules, position, sizes, heads, given)
        levels.append(_Decisions(allowed, correction, heads, _last_true(allowed)))
        heads = (heads[:, None, :] + step).reshape(-1, n_groups)
        given = (given[:, None, :] + rules.weights[position] * step).reshape(-1, n_groups)
    return levels


class _GroupQueues:
    """Each draw's queue of every group (its candidates in sampled Plackett-Luce order) as far
    as the first k, and ``log Z`` (log-sum-exp of the log-weights still queued) before each.

    Stored flat: entry ``(draw * G + g) * k + j`` is group g's j-th candidate in that draw
    (``candidates``) and the log-mass of g's queue from it on (``log_mass``, -inf past the
    group's last candidate).
    """

    def __init__(
        self,
        log_weights: np.ndarray,
        codes: np.ndarray,
        sizes: np.ndarray,
        gumbels: np.ndarray,
        k: int,
    ) -> None:
        m, n = gumbels.shape
        n_groups = sizes.shape[0]
        # gumbel_order, grouped by bucket (ascending): group g fills a fixed range of columns.
        keys = gumbels + log_weights
        queue = np.lexsort((gumbels, keys, np.broadcast_to(-codes, (m, n))), axis=-1)[:, ::-1]
        # Each group in a row of its own, padded with -inf to the longest group (and to k).
        width = max(k, int(sizes.max()))
        starts = np.cumsum(sizes) - sizes
        column = np.arange(n) + np.repeat(np.arange(n_groups) * width - starts, sizes)
        padded = np.full((m, n_groups * width), -np.inf)
        padded[:, column] = log_weights[queue]
        padded = padded.reshape(m, n_groups, width)[:, :, ::-1]
        suffix = np.logaddexp.accumulate(padded, axis=2)[:, :, ::-1][:, :, :k]
        self.log_mass = suffix.reshape(-1)
        candidates = np.zeros((m, n_groups * width), dtype=np.intp)
        candidates[:, column] = queue
        self.candidates = candidates.reshape(m, n_groups, width)[:, :, :k].reshape(-1)


def _draw(
    queues: _GroupQueues,
    rules: _Rules,
    sizes: np.ndarray,
    tree: list[_Decisions] | None,
    uniforms: np.ndarray,
) -> np.ndarray:
    """Steps 1-3 for m draws at once, position by position: (m, k) rankings.

    With a decision tree each draw follows its history's node; without one (too many
    histories) the look-ahead runs on the draws' states directly.
    """
    m, k = uniforms.shape
    n_groups = sizes.shape[0]
    rows = np.arange(m)
    slot = (rows[:, None] * n_groups + np.arange(n_groups)) * k  # each group's first candidate
    chosen = np.empty((m, k), dtype=np.intp)
    node = np.zeros(m, dtype=np.intp)
    heads = np.zeros((m, n_groups), dtype=np.intp)
    given = np.zeros((m, n_groups))
    capped = np.minimum(sizes, k)
    for position in range(k):
        if tree is not None:
            level = tree[position]
            allowed = level.allowed[node]
            correction = level.correction[node]
            heads = level.heads[node]
            last_allowed = level.last_allowed[node]
        else:
            allowed, correction = _look_ahead(rules, position, capped, heads, given)
            last_allowed = _last_true(allowed)
        at = slot + heads  # each group's next candidate
        logits = np.where(allowed, queues.log_mass[at] + correction, -np.inf)
        # A group with probability ∝ exp(c_g) Z_g, by inverting the CDF at the uniform.
        masses = np.exp(logits - np.maximum.reduce(logits, axis=1)[:, None])
        cumulative = np.add.accumulate(masses, axis=1)
        threshold = uniforms[:, position] * cumulative[:, -1]
        group = np.add.reduce(cumulative <= threshold[:, None], axis=1)
        group = np.minimum(group, last_allowed)  # u * total may round up to total
        taken = at.reshape(-1)[rows * n_groups + group]
        chosen[:, position] = queues.candidates[taken]
        if tree is not None:
            node = node * n_groups + group
        else:
            heads = heads.copy()
            heads.reshape(-1)[rows * n_groups + group] += 1
            given.reshape(-1)[rows * n_groups + group] += rules.weights[position]
    return chosen


def _any(flags: np.ndarray) -> np.ndarray:
    """``flags.any(axis=-1)``, without the method's overhead on small arrays."""
    return np.logical_or.reduce(flags, axis=-1)


def _last_true(flags: np.ndarray) -> np.ndarray:
    """Index of the last True in each row of a (rows, groups) boolean array."""
    return flags.shape[1] - 1 - np.argmax(flags[:, ::-1], axis=1)


@lru_cache(maxsize=128)
def _weights_and_suffix_sums(exposure: ExposureModel, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The weights ``v_1..v_k`` and ``after[p] = v_{p+1} + ... + v_k`` (0-based p, after[k] = 0)."""
    weights = exposure.weights(k).astype(float)
    after = np.zeros(k + 1)
    for p in range(k - 1, -1, -1):
        after[p] = after[p + 1] + weights[p]
    weights.setflags(write=False)
    after.setflags(write=False)
    return weights, after
