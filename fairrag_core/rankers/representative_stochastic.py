"""The representative stochastic ranker: exposure-aware Plackett-Luce (the paper's ranker 4)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from ..exposure import ExposureModel
from ..plackett_luce import plackett_luce_log_weights
from ..ranking import CandidatePool, Ranker
from ..target import Target
from ..validation import check_alpha, check_gain

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

    Under a per-group fitted exposure model (weights ``lambda_g * v_i``, docs/SPEC.md
    "Exposure model" → Fitted, per group) the steps run on ``v`` with the target shares
    ``t'_g ∝ t_g / lambda_g`` (:meth:`~fairrag_core.exposure.ExposureModel.effective_shares`),
    which are exactly the target shares of the expected attributions.

    :meth:`sample` runs these steps on all draws at once, position by position. Steps 1 and 2
    depend only on the groups chosen so far and on each group's candidate count (capped at k),
    so their decisions are computed once per pool make-up for every history of choices (when
    there are at most 4,096) and looked up; otherwise they run on each draw's state. A few
    draws (a single :meth:`rank`) run them on each draw's state in plain Python floats, the
    same operations in the same order, so the same rankings at a cost linear in k (issue 37:
    the tree's G ** k growth made k = 13 cost 10x k = 5).
    """

    name = "representative_stochastic"
    targets_exposure = True
    in_default_study = True
    knobs = ("alpha", "gain", "tolerance")
    sweep_grid = MappingProxyType({"alpha": (1.0, 2.0, 4.0, 8.0, 16.0), "gain": (2.0,)})

    def __init__(
        self,
        *,
        alpha: float = 4.0,
        gain: float = 2.0,
        tolerance: float = 0.05,
        **fairness: Any,
    ) -> None:
        self.alpha = check_alpha(alpha)
        self.gain = check_gain(gain)
        if (
            isinstance(tolerance, (bool, np.bool_))
            or not isinstance(tolerance, (int, float, np.integer, np.floating))
            or not 0 <= tolerance < 1
        ):
            raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
        self.tolerance = float(tolerance)
        super().__init__(**fairness)
        self.exposure.effective_shares(self._target)  # a per-group curve naming the target's
        # groups: refused now, not at the first ranking (a user trial)
        curve = self.exposure.curve
        weights = () if curve is None else tuple(curve.weights)
        # a rise beyond rounding (a curve normalised to sum 1 may move by 1e-16)
        rises = [i + 1 for i in range(1, len(weights)) if weights[i] > weights[i - 1] + 1e-9]
        if rises:
            warnings.warn(
                f"representative_stochastic under a position curve that rises (at positions "
                f"{rises}: {list(weights)}): its look-ahead counts the exposure "
                "a group can still get as if later positions weighed no more than earlier ones, "
                'so its tolerance band is not guaranteed (docs/SPEC.md, "Properties every ranker '
                'is tested for"); amortized ranking reaches the target over its stream',
                RuntimeWarning,
                stacklevel=2,
            )
        # Caches by k and pool make-up; the parameters above are fixed once the ranker is built.
        self._rules_by_k: dict[int, _Rules] = {}
        self._trees: dict[tuple[int, tuple[int, ...]], _Tree | None] = {}
        self._layouts: dict[tuple[int, tuple[int, ...]], _Layout] = {}

    def _rank(self, pool: CandidatePool, k: int, rng: np.random.Generator) -> np.ndarray:
        return self._sample(pool, k, 1, rng)[0]

    def _sample(
        self, pool: CandidatePool, k: int, n_samples: int, rng: np.random.Generator
    ) -> np.ndarray:
        codes = pool.codes
        assert codes is not None  # uses_groups
        log_weights = plackett_luce_log_weights(pool.scores, self.alpha, pool.low, pool.high)
        layout = self._layout(k, codes)
        n = log_weights.shape[0]
        n_groups = layout.sizes.shape[0]
        out = np.empty((n_samples, k), dtype=np.intp)
        for start in range(0, n_samples, _CHUNK):
            rows = min(_CHUNK, n_samples - start)
            # Gumbel noise for step 3: each draw's Plackett-Luce order of the pool (its
            # restriction to a group is that group's order), then one choice of group per
            # position (the Gumbel-max trick over the groups' logits).
            gumbels = rng.standard_exponential((rows, n + k * n_groups))
            np.log(gumbels, out=gumbels)
            np.negative(gumbels, out=gumbels)
            queues = _GroupQueues(log_weights, codes, layout, gumbels[:, :n], k)
            choice_noise = gumbels[:, n:].reshape(rows, k, n_groups)
            out[start : start + rows] = _draw(queues, layout, choice_noise)
        return out

    def _rules(self, k: int) -> _Rules:
        rules = self._rules_by_k.get(k)
        if rules is None:
            rules = self._rules_by_k[k] = _Rules.build(self, k)
        return rules

    def _layout(self, k: int, codes: np.ndarray) -> _Layout:
        """What the draw needs to know of a pool's make-up (its groups' sizes), cached."""
        sizes = np.bincount(codes, minlength=len(self._target.groups))
        key = (k, tuple(sizes.tolist()))
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) >= 256:
                self._layouts.clear()
            rules = self._rules(k)
            layout = self._layouts[key] = _Layout.build(rules, sizes, self._tree(rules, sizes))
        return layout

    def _tree(self, rules: _Rules, sizes: np.ndarray) -> _Tree | None:
        """The look-ahead's decisions for every history of group choices (None if too many).

        They depend on the pool only through each group's candidate count capped at k, so one
        tree serves every pool of the same make-up (a 50-pool with at least k of each group
        always has the same one).
        """
        capped = np.minimum(sizes, rules.k)
        key = (rules.k, tuple(capped.tolist()))
        cached = self._trees.get(key, _UNSET)
        if cached is not _UNSET:
            return cached  # type: ignore[return-value]
        if len(self._trees) >= 256:  # bounded; returned from a local, so safe across threads
            self._trees.clear()
        tree = self._trees[key] = _decision_tree(rules, capped)
        return tree

    @property
    def _target(self) -> Target:
        assert self.target is not None  # requires_target
        return self.target

    def __repr__(self) -> str:
        target = self._target.as_dict()
        return (
            f"RepresentativeStochasticRanker(target={target}, alpha={self.alpha}, "
            f"gain={self.gain}, tolerance={self.tolerance}, seed={self.seed!r})"
        )


_UNSET = object()
_CHUNK = 8192
"""Draws per block in :meth:`RepresentativeStochasticRanker.sample` (bounds memory)."""
_MAX_TREE_NODES = 4096
"""Largest decision tree kept (histories of group choices, 1 + G + ... + G ** (k - 1))."""
_WHOLE_TREE = 4096
"""Largest draws x nodes x groups for which :func:`_draw_whole_tree` replaces the walk."""


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
        # A per-group fitted model: the shares of v that give each group its target share of
        # the expected attributions (ExposureModel.effective_shares).
        shares = ranker.exposure.effective_shares(ranker._target)
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

    bias: np.ndarray
    """(histories, groups): the correction ``c_g`` of each group allowed, -inf for the others."""
    places: np.ndarray
    """(histories, groups): ``g * k + heads_g``, where group g's next candidate is among its
    first k (``heads_g``: how many candidates g has given so far)."""


def _look_ahead(
    rules: _Rules, position: int, sizes: np.ndarray, heads: np.ndarray, given: np.ndarray
) -> np.ndarray:
    """Steps 2 and 1 of :class:`RepresentativeStochasticRanker` for many states at once.

    A state (a row of ``heads``/``given``) is how many candidates each group has shown and the
    exposure it has had before ``position``; ``sizes`` are the groups' candidate counts (capped
    at k). Returns (states, groups): the correction ``c_g`` of every group allowed to take the
    position, -inf for the others. Relies on non-increasing position weights (true of every
    exposure model offered).
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
    missing = short & (deficits > rooms)
    coverable = np.where(short, np.minimum(deficits, rooms), 0.0).sum(axis=2)
    feasible = live & ~missing.any(axis=2) & (coverable <= capacity + 1e-12)
    # docs/SPEC.md's rule: h cannot reach its floor without this position.
    forced = live & rules.owed & (given + room < rules.floors)
    allowed = np.where(feasible.any(axis=1)[:, None], feasible, forced)
    allowed = np.where(allowed.any(axis=1)[:, None], allowed, live)
    given_total = after[0] - after[position]
    if given_total > 0:
        correction = np.clip(rules.gain * (rules.shares - given / given_total), -1.0, 1.0)
    else:  # nothing shown yet: no share to correct
        correction = np.zeros_like(given)
    return np.where(allowed, correction, -np.inf)


class _Tree(NamedTuple):
    """:func:`_look_ahead`'s decisions for every history of group choices.

    Nodes are numbered level by level (the root 0, then the G histories of length 1, ...);
    ``levels[p]`` views the nodes of position p, ``bias``/``places`` hold every node's.
    """

    levels: list[_Decisions]
    bias: np.ndarray
    """(nodes, groups): as :attr:`_Decisions.bias`."""
    places: np.ndarray
    """(nodes, groups): as :attr:`_Decisions.places`."""
    position: np.ndarray
    """(nodes,): the position each node decides."""
    child: np.ndarray
    """(nodes * groups,): the node that follows when group g is chosen at node i, at
    ``i * G + g`` (0 after the last position)."""


def _decision_tree(rules: _Rules, sizes: np.ndarray) -> _Tree | None:
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
        bias = _look_ahead(rules, position, sizes, heads, given)
        levels.append(_Decisions(bias, heads + np.arange(n_groups) * rules.k))
        heads = (heads[:, None, :] + step).reshape(-1, n_groups)
        given = (given[:, None, :] + rules.weights[position] * step).reshape(-1, n_groups)
    counts = [level.bias.shape[0] for level in levels]
    nodes = sum(counts)
    child = np.arange(1, nodes * n_groups + 1)  # children follow their level, in order
    child[nodes * n_groups - counts[-1] * n_groups :] = 0
    bias = np.concatenate([level.bias for level in levels])
    places = np.concatenate([level.places for level in levels])
    positions = np.repeat(np.arange(rules.k), counts)
    starts = np.cumsum(counts) - counts
    levels = [
        _Decisions(bias[a : a + c], places[a : a + c]) for a, c in zip(starts, counts, strict=True)
    ]
    return _Tree(levels, bias, places, positions, child)


@dataclass(frozen=True, eq=False)
class _Layout:
    """A pool make-up (candidates per group, for a top-k): its rules, decision tree (None when
    too large) and where each group's queue goes in :class:`_GroupQueues`' padded rows."""

    rules: _Rules
    sizes: np.ndarray
    tree: _Tree | None
    width: int
    """Columns per group in the padded rows: the largest group, at least k."""
    column: np.ndarray
    """Padded column of each place of a queue grouped by bucket."""

    @classmethod
    def build(cls, rules: _Rules, sizes: np.ndarray, tree: _Tree | None) -> _Layout:
        width = max(rules.k, int(sizes.max()))
        starts = np.cumsum(sizes) - sizes
        places = np.arange(int(sizes.sum()))
        column = places + np.repeat(np.arange(sizes.shape[0]) * width - starts, sizes)
        return cls(rules, sizes, tree, width, column)


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
        layout: _Layout,
        gumbels: np.ndarray,
        k: int,
    ) -> None:
        m, n = gumbels.shape
        n_groups, width = layout.sizes.shape[0], layout.width
        # gumbel_order, grouped by bucket (ascending): group g fills a fixed range of places.
        by_bucket = np.empty((m, n), dtype=np.intp)
        by_bucket[:] = -codes
        queue = np.lexsort((gumbels, gumbels + log_weights, by_bucket), axis=-1)[:, ::-1]
        # Each group in a row of its own, padded with -inf to ``width``.
        padded = np.empty((m, n_groups * width))
        padded.fill(-np.inf)
        padded[:, layout.column] = log_weights[queue]
        padded = padded.reshape(m, n_groups, width)[:, :, ::-1]
        suffix = np.logaddexp.accumulate(padded, axis=2)[:, :, ::-1][:, :, :k]
        self.log_mass = suffix.reshape(-1)
        candidates = np.zeros((m, n_groups * width), dtype=np.intp)
        candidates[:, layout.column] = queue
        self.candidates = candidates.reshape(m, n_groups, width)[:, :, :k].reshape(-1)


def _draw(queues: _GroupQueues, layout: _Layout, choice_noise: np.ndarray) -> np.ndarray:
    """Steps 1-3 for m draws at once, position by position: (m, k) rankings.

    ``choice_noise`` (m, k, G) is Gumbel noise for the choice of group at each position: the
    group is the argmax of ``log Z_g + c_g + noise`` over the allowed groups, i.e. drawn with
    probability ∝ ``exp(c_g) Z_g``. With a decision tree each draw follows its history's node;
    without one (too many histories) the look-ahead runs on the draws' states directly.
    """
    m, k, n_groups = choice_noise.shape
    rules, tree = layout.rules, layout.tree
    rows = np.arange(m)
    first = rows[:, None] * (n_groups * k)  # where each draw's queues start
    if m <= _SCALAR_DRAWS and n_groups <= _SCALAR_GROUPS:
        return _draw_scalar(queues, layout, choice_noise)
    if tree is not None and m * tree.bias.size <= _WHOLE_TREE:
        return _draw_whole_tree(queues, tree, choice_noise, first)
    chosen = np.empty((m, k), dtype=np.intp)
    if tree is not None:
        node = np.zeros(m, dtype=np.intp)
    else:
        first = first + np.arange(n_groups) * k
        heads = np.zeros((m, n_groups), dtype=np.intp)
        given = np.zeros((m, n_groups))
        capped = np.minimum(layout.sizes, k)
    for position in range(k):
        if tree is not None:
            level = tree.levels[position]
            bias = level.bias[node]
            at = first + level.places[node]  # each group's next candidate
        else:
            bias = _look_ahead(rules, position, capped, heads, given)
            at = first + heads
        logits = queues.log_mass[at] + bias
        # Shifted so the largest is 0: equal logits (as equal scores give at large alpha, where
        # they exceed the noise's precision) still tie-break by the noise.
        logits -= np.maximum.reduce(logits, axis=1)[:, None]
        logits += choice_noise[:, position]
        group = logits.argmax(axis=1)
        chosen[:, position] = queues.candidates[at[rows, group]]
        if tree is not None:
            node = node * n_groups + group
        else:
            heads[rows, group] += 1
            given[rows, group] += rules.weights[position]
    return chosen


def _draw_whole_tree(
    queues: _GroupQueues, tree: _Tree, choice_noise: np.ndarray, first: np.ndarray
) -> np.ndarray:
    """:func:`_draw` for few draws: the choice every node of the tree would make is computed at
    once (the same logits and noise as :func:`_draw`'s walk, so the same rankings), then each
    draw follows its path, one lookup per position. Fewer numpy calls than the walk, more
    arithmetic: for a single ranking, not for thousands."""
    m, k, n_groups = choice_noise.shape
    at = first[:, :, None] + tree.places  # (m, nodes, groups): each group's next candidate
    logits = queues.log_mass[at] + tree.bias
    logits -= np.maximum.reduce(logits, axis=2)[:, :, None]
    logits += choice_noise[:, tree.position]
    choice = logits.argmax(axis=2) + np.arange(tree.position.shape[0]) * n_groups
    taken = at.reshape(m, -1)[np.arange(m)[:, None], choice]  # (m, nodes)
    following = tree.child[choice]
    rows = np.arange(m)
    path = np.empty((m, k), dtype=np.intp)
    node = np.zeros(m, dtype=np.intp)
    for position in range(k):
        path[:, position] = node
        node = following[rows, node]
    return queues.candidates[taken[rows[:, None], path]]


def _draw_scalar(queues: _GroupQueues, layout: _Layout, choice_noise: np.ndarray) -> np.ndarray:
    """:func:`_draw` for a few draws in plain Python floats: the same operations on the same
    float64 values in the same order as :func:`_look_ahead` and the walk, so the same rankings,
    without numpy's per-call overhead, which dominates at a few draws (this path keeps a single
    ranking's cost linear in k: no decision tree, whose size grows as G ** k, is needed)."""
    m, k, n_groups = choice_noise.shape
    plain = _ScalarRules.of(layout)
    log_mass = queues.log_mass.tolist()
    candidates = queues.candidates.tolist()
    noise = choice_noise.tolist()
    width = n_groups * k
    chosen = [_walk(plain, log_mass, candidates, noise[row], row * width) for row in range(m)]
    return np.array(chosen, dtype=np.intp).reshape(m, k)


@dataclass(frozen=True, eq=False)
class _ScalarRules:
    """:class:`_Rules` and a layout's capped sizes as Python lists, for :func:`_walk`."""

    k: int
    groups: range
    sizes: list[int]
    weights: list[float]
    after: list[float]
    floors: list[float]
    shares: list[float]
    owed: list[bool]
    gain: float

    @classmethod
    def of(cls, layout: _Layout) -> _ScalarRules:
        cached = _SCALAR_RULES.get(id(layout))
        if cached is not None and cached[0] is layout:
            return cached[1]
        rules = layout.rules
        plain = cls(
            k=rules.k,
            groups=range(layout.sizes.shape[0]),
            sizes=np.minimum(layout.sizes, rules.k).tolist(),
            weights=rules.weights.tolist(),
            after=rules.after.tolist(),
            floors=rules.floors.tolist(),
            shares=rules.shares.tolist(),
            owed=rules.owed.tolist(),
            gain=float(rules.gain),
        )
        if len(_SCALAR_RULES) >= 256:
            _SCALAR_RULES.clear()
        _SCALAR_RULES[id(layout)] = (layout, plain)
        return plain


_SCALAR_RULES: dict[int, tuple[_Layout, _ScalarRules]] = {}
_SCALAR_DRAWS = 8
"""Draws up to which :func:`_draw` walks in Python floats rather than in numpy."""
_SCALAR_GROUPS = 8
"""Groups up to which the walk in Python floats sums as numpy's reduction does (sequentially)."""


def _walk(
    plain: _ScalarRules,
    log_mass: list[float],
    candidates: list[int],
    noise: list[list[float]],
    first: int,
) -> list[int]:
    """One draw of :func:`_draw`, position by position, :func:`_look_ahead` on one state."""
    k, groups, sizes, after = plain.k, plain.groups, plain.sizes, plain.after
    floors, owed, shares, gain = plain.floors, plain.owed, plain.shares, plain.gain
    heads = [0] * len(groups)
    given = [0.0] * len(groups)
    starts = [first + g * k for g in groups]
    chosen = []
    minus_inf = -math.inf
    for position in range(k):
        weight = plain.weights[position]
        capacity = after[position + 1]
        left = [max(sizes[g] - heads[g], 0) for g in groups]
        deficit = [floors[g] - given[g] for g in groups]
        room = [capacity - after[position + 1 + left[g]] for g in groups]
        feasible = []
        for h in groups:
            ok = left[h] > 0
            if ok:
                # numpy's add.reduce over a row: the first term plus the sum of the others.
                head_term = 0.0
                rest = 0.0
                for g in groups:
                    if g == h:
                        d = deficit[g] - weight
                        r = capacity - after[position + left[g]]
                    else:
                        d, r = deficit[g], room[g]
                    term = 0.0
                    if owed[g] and d > 0:
                        if d > r:
                            ok = False
                            break
                        term = min(d, r)
                    if g == 0:
                        head_term = term
                    else:
                        rest += term
                ok = ok and head_term + rest <= capacity + 1e-12
            feasible.append(ok)
        if any(feasible):
            allowed = feasible
        else:
            allowed = [left[g] > 0 and owed[g] and given[g] + room[g] < floors[g] for g in groups]
            if not any(allowed):
                allowed = [left[g] > 0 for g in groups]
        given_total = after[0] - after[position]
        logits = []
        for g in groups:
            if not allowed[g]:
                logits.append(minus_inf)
                continue
            if given_total > 0:
                correction = min(max(gain * (shares[g] - given[g] / given_total), -1.0), 1.0)
            else:
                correction = 0.0
            logits.append(log_mass[starts[g] + heads[g]] + correction)
        top = max(logits)
        row = noise[position]
        best, group = minus_inf, 0
        for g in groups:
            value = (logits[g] - top) + row[g]
            if value > best:
                best, group = value, g
        chosen.append(candidates[starts[group] + heads[group]])
        heads[group] += 1
        given[group] += weight
    return chosen


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
