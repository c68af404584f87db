"""The amortized ranker: representative_stochastic with a memory of the stream's exposure."""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple, cast

import numpy as np

from ..ledger import ExposureLedger, make_ledger
from ..ledger.base import DEFAULT_KEY, LedgerState, check_key, encode_label
from ..plackett_luce import gumbel_order, plackett_luce_log_weights
from ..ranking import Ranker, RankingResult
from ..validation import check_alpha, check_gain, check_groups, refuse_unordered

__all__ = ["AmortizedRanker", "AmortizedRankingResult"]

DEFAULT_ALPHA = 7.0
DEFAULT_GAIN = 80.0
DEFAULT_SPREAD: float | None = 4.0
"""docs/SPEC.md item 6 leaves alpha and the gain open; alpha, the gain and ``spread`` are chosen
on the study's stream (there, "Defaults" and "Spread": alpha 7 with spread 4 meets the stream's
parity, the document-level EE-L and the nDCG@5 goals of issue 26 at once). Before issue 26 the
defaults were alpha 8 without spread: ``alpha=8, spread=None`` draws exactly what they drew."""


class _LabelledPool(NamedTuple):
    """:class:`fairrag_core.ranking.CandidatePool` plus the raw labels the ledger stores."""

    scores: np.ndarray
    low: float
    high: float
    codes: np.ndarray
    labels: Sequence[Hashable]


@dataclass(frozen=True)
class AmortizedRankingResult(RankingResult):
    """A ranking of :class:`AmortizedRanker` with the ledger state it was drawn from."""

    ledger_state: LedgerState | None = None
    """The stream as read before the draw: the same seed on a ledger holding these totals
    draws the same ranking (a record that keeps both can be re-drawn)."""


class AmortizedRanker(Ranker):
    """Plackett-Luce draws steered toward the target over a stream (docs/SPEC.md, item 6).

    A ledger (:mod:`fairrag_core.ledger`) holds, for the stream ``ledger_key``, each group's
    accumulated exposure ``L_g`` (position weights ``v_i`` summed over every ranking served)
    and their total ``L``. The list is built one position at a time; before the draw for
    position ``i`` (1-based), with ``P_g = sum_{j < i, group(r_j) = g} v_j`` the partial list's
    exposure and ``P`` its total:

    - ``share_g = (L_g + P_g) / (L + P)`` (no correction while ``L + P = 0``: an empty stream);
    - ``c_g = R * clip(gain * (target_g - share_g), -1, 1)``, added to the log-weight
      ``w_d = s_norm_d ** alpha`` of every remaining candidate d of group g, where
      ``R = 2 ** alpha - 1`` is the whole range of the log-weights (``s_norm`` spans [1, 2]).
      SPEC.md caps the correction at "the whole relevance range", 1.0 at alpha = 1 (there
      ``R = 1`` and this is its formula exactly); at other alphas we cap it at the range of the
      log-weights it is added to (our reading, docs/SPEC.md item 6: with 1.0 at alpha = 4 the
      study's stream cannot get past a 0.39 share);
    - one Plackett-Luce draw: ``P(d) ∝ exp(w_d + c_group(d))`` over the remaining candidates,
      sampled exactly in two steps, a group then its next candidate (:func:`draw_amortized`).

    ``spread`` (default :data:`DEFAULT_SPREAD`, 4; None: the log-weights above) replaces the
    log-weights by flat-topped ones over the same range,
    ``w_d = R * (1 - (1 - u_d) ** spread)`` with ``u_d = s_norm_d - 1`` in [0, 1]
    (:func:`flat_top_log_weights`): candidates near the top score get nearly equal weights, so
    the draws vary among them, while low scores stay far below. ``s_norm ** alpha`` is convex
    (the top candidates are the furthest apart, so at alpha 8 without spread, the defaults
    before issue 26, the draws barely differ); spread 4 at alpha 7, the defaults, gives
    rankings that vary with less relevance lost (measured in docs/SPEC.md item 6, "Spread").
    ``alpha=8, spread=None`` is the old behaviour, bit for bit.

    Under a per-group fitted exposure model (docs/SPEC.md, "Exposure model" → Fitted, per
    group) ``target_g`` is ``t'_g ∝ t_g / lambda_g`` and the ledger holds ``v`` units
    (:meth:`~fairrag_core.exposure.ExposureModel.effective_shares`): the stream's share of the
    generator's expected attributions is the target.

    No look-ahead: a single list may miss the target; the stream must reach it. Once drawn, the
    ranking's exposure per group label is added to the ledger in one atomic update; the
    ranking is returned only after that update succeeded (a ledger failure raises
    :class:`~fairrag_core.errors.LedgerUnavailableError` and nothing is served; so do its
    subclasses :class:`~fairrag_core.ledger.LedgerResetError`, for a stream lost or replaced
    behind the ledger's back, and :class:`~fairrag_core.ledger.LedgerCorruptError`, for a
    damaged stored value: docs/SPEC.md item 6).

    Consistency under concurrency (several threads, processes or replicas on one ledger):
    read, draw and add are not one transaction. Updates are never lost (each add is an atomic
    increment on the store), so the ledger always equals the sum of the rankings served; but
    a draw sees the ledger as it was when it was read, missing the rankings of requests in
    flight at the same time (at most one per concurrent request). The correction only
    lags by those rankings; it does not drift.

    Parameters: ``ledger`` (an :class:`~fairrag_core.ledger.ExposureLedger`, a URL or path for
    :func:`~fairrag_core.ledger.make_ledger`; default a new in-memory ledger), ``ledger_key``
    (the stream's name, default ``"default"``), ``gain`` (default :data:`DEFAULT_GAIN`) and
    ``alpha`` (default :data:`DEFAULT_ALPHA`; our choices, measured in docs/SPEC.md item 6),
    ``spread`` (default :data:`DEFAULT_SPREAD`; None, or a finite number >= 1: the power of the
    flat-topped log-weights), and
    the fairness target of every ranker. Group labels must be str, int or None
    (:func:`~fairrag_core.ledger.encode_label`).
    """

    name = "amortized"
    stateful = True
    targets_exposure = True
    in_default_study = True
    knobs = ("gain", "alpha", "spread")  # spread: a user trial could not sweep it
    sweep_grid = MappingProxyType({"gain": (20.0, 80.0), "alpha": (4.0, 8.0)})

    def __init__(
        self,
        *,
        alpha: float = DEFAULT_ALPHA,
        gain: float = DEFAULT_GAIN,
        spread: float | None = DEFAULT_SPREAD,
        ledger: ExposureLedger | str | os.PathLike[str] | None = None,
        ledger_key: str = DEFAULT_KEY,
        **fairness: object,
    ) -> None:
        self.alpha = check_alpha(alpha)
        self.gain = check_gain(gain)
        self.spread = _check_spread(spread)
        self.ledger = make_ledger(ledger)
        self.ledger_key = check_key(ledger_key)
        super().__init__(**fairness)  # type: ignore[arg-type]
        assert self.target is not None  # requires_target
        self.exposure.effective_shares(self.target)  # a per-group curve naming the target's
        # groups: refused now, not at the first ranking (a user trial)

    def _prepare(  # type: ignore[override]  # the pool it returns also carries the labels
        self,
        scores: object,
        groups: Iterable[Hashable] | None,
        k: object,
        rng: np.random.Generator | int | None,
    ) -> tuple[_LabelledPool | None, int, np.random.Generator]:
        if groups is not None and not isinstance(groups, (Sequence, np.ndarray, str, bytes)):
            refuse_unordered(groups, "groups")
            groups = list(groups)  # read once: the labels are needed again below
        pool, k, generator = super()._prepare(
            scores, cast("Sequence[Hashable] | None", groups), k, rng
        )
        if pool is None:
            return pool, k, generator
        labels = check_groups(cast("Sequence[Hashable] | None", groups), pool.scores.shape[0])
        for label in labels:  # refuse a label the ledger cannot store before any work (cached)
            encode_label(label)
        assert pool.codes is not None  # a ranker with a target encodes the groups
        labelled = _LabelledPool(pool.scores, pool.low, pool.high, pool.codes, labels)
        return labelled, k, generator

    def _rank(self, pool: _LabelledPool, k: int, rng: np.random.Generator) -> np.ndarray:  # type: ignore[override]
        return self._rank_detailed(pool, k, rng).indices

    def _rank_detailed(  # type: ignore[override]
        self, pool: _LabelledPool, k: int, rng: np.random.Generator
    ) -> AmortizedRankingResult:
        state = self.ledger.state(self.ledger_key)
        weights = self.exposure.weights(k)
        chosen = self._draw(pool, weights, self._past(state), rng)
        served: dict[Hashable, float] = {}
        for position, index in enumerate(chosen.tolist()):
            label = pool.labels[index]
            served[label] = served.get(label, 0.0) + float(weights[position])
        self.ledger.add(self.ledger_key, served)
        return AmortizedRankingResult(chosen, ledger_state=state)

    def _sample(  # type: ignore[override]
        self, pool: _LabelledPool, k: int, n_samples: int, rng: np.random.Generator
    ) -> np.ndarray:
        """``n_samples`` rankings drawn from the ledger as it is now, none of them served.

        The ledger is read once and left unchanged: each row is distributed as the next
        :meth:`rank` call would be (an independent draw from the same state), and measuring a
        ranker (:func:`~fairrag_core.metrics.expected_exposure_of`) never adds exposure no user
        saw to the stream. Row b is exactly the ranking the (b+1)-th of successive single
        draws from this state would be with the same generator (row 0: what :meth:`rank` with
        the same seed draws on a ledger in this state); all rows are drawn at once, position
        by position (:func:`draw_amortized_many`).
        """
        assert self.target is not None  # requires_target: built in __init__
        weights = self.exposure.weights(k)
        past = self._past(self.ledger.state(self.ledger_key))
        log_weights = self._log_weights(pool)
        out = np.empty((n_samples, k), dtype=np.intp)
        for start in range(0, n_samples, _CHUNK):
            rows = min(_CHUNK, n_samples - start)
            orders, uniforms = _successive_noise(rng, log_weights, rows, k)
            out[start : start + rows] = draw_amortized_many(
                log_weights,
                pool.codes,
                self.exposure.effective_shares(self.target),
                past,
                weights,
                self.gain,
                self.span,
                orders,
                uniforms,
            )
        return out

    def _past(self, state: LedgerState) -> np.ndarray:
        """The ledger's exposure per target bucket (labels mapped as the ranker buckets them)."""
        target = self.target
        assert target is not None  # requires_target: built in __init__
        past = np.zeros(len(target.groups))
        for label, exposure in state.totals.items():
            past[target.bucket(label)] += exposure
        return past

    def _draw(
        self, pool: _LabelledPool, weights: np.ndarray, past: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        assert self.target is not None  # requires_target: built in __init__
        log_weights = self._log_weights(pool)
        shares = self.exposure.effective_shares(self.target)
        return draw_amortized(
            log_weights, pool.codes, shares, past, weights, self.gain, self.span, rng
        )

    def _log_weights(self, pool: _LabelledPool) -> np.ndarray:
        """``s_norm ** alpha``, or with ``spread`` the flat-topped weights over the same range."""
        if self.spread is None:
            return plackett_luce_log_weights(pool.scores, self.alpha, pool.low, pool.high)
        return flat_top_log_weights(pool.scores, self.span, self.spread, pool.low, pool.high)

    @property
    def span(self) -> float:
        """``R = 2 ** alpha - 1``: the range of the log-weights, and the correction's cap."""
        return 2.0 ** min(self.alpha, 1000.0) - 1.0  # beyond, 2 ** alpha overflows a float

    def __repr__(self) -> str:
        target = None if self.target is None else self.target.as_dict()
        return (
            f"AmortizedRanker(target={target}, alpha={self.alpha}, "
            f"gain={self.gain}, spread={self.spread}, ledger={self.ledger!r}, "
            f"ledger_key={self.ledger_key!r}, "
            f"seed={self.seed!r})"
        )


def flat_top_log_weights(
    scores: np.ndarray, span: float, spread: float, low: float, high: float
) -> np.ndarray:
    """``span * (1 - (1 - u) ** spread)``, ``u = s_norm - 1`` in [0, 1] (``s_norm`` as in
    :func:`~fairrag_core.plackett_luce.plackett_luce_log_weights`, so a pool of equal scores
    has u = 0 everywhere): concave in the score, the same range [0, span] as ``s_norm ** alpha``
    (up to a constant, which a Plackett-Luce draw ignores); docs/SPEC.md item 6, "Spread"."""
    u = np.clip(plackett_luce_log_weights(scores, 1.0, low, high) - 1.0, 0.0, 1.0)
    return span * (1.0 - (1.0 - u) ** spread)


def _check_spread(spread: object) -> float | None:
    """``spread`` as None or a float >= 1 (a finite power)."""
    if spread is None:
        return None
    if isinstance(spread, bool) or not isinstance(spread, (int, float, np.integer, np.floating)):
        raise TypeError(f"spread must be None or a number >= 1, got {spread!r}")
    if not math.isfinite(spread) or spread < 1:
        raise ValueError(
            f"spread must be None or a finite number >= 1 (the power of the flat-topped "
            f"log-weights; 1 is linear in the score), got {spread!r}"
        )
    return float(spread)


def draw_amortized(
    log_weights: np.ndarray,
    codes: np.ndarray,
    shares: np.ndarray,
    past: np.ndarray,
    weights: np.ndarray,
    gain: float,
    span: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """One ranking of :class:`AmortizedRanker`: ``len(weights)`` pool indices, best first.

    ``past[g]`` is the ledger's exposure of target bucket g, ``codes`` each candidate's bucket;
    the correction is ``c_g = span * clip(gain * (target_g - share_g), -1, 1)``.
    Because the correction is the same for every candidate of a group, the sequential draw
    ``P(d) ∝ exp(w_d + c_group(d))`` is sampled exactly in two steps, as
    representative_stochastic does: each group's Plackett-Luce order is the restriction of one
    Gumbel-trick order of the pool (:func:`fairrag_core.plackett_luce.gumbel_order`, sampled up
    front); at each position a group g is drawn with probability ∝ ``exp(c_g) * Z_g`` (``Z_g``
    the sum of ``exp(w_d)`` over g's remaining candidates) and gives its next candidate.
    """
    k = weights.shape[0]
    gumbels = np.asarray(rng.gumbel(size=log_weights.shape[0]))
    order = gumbel_order(log_weights + gumbels, gumbels)
    uniforms = np.asarray(rng.random(k)).tolist()
    ordered_codes = codes[order]
    queues: list[list[int]] = []
    log_mass: list[list[float]] = []  # log Z of each queue from each of its positions on
    for g in range(shares.shape[0]):
        queue = order[ordered_codes == g]
        queues.append(queue.tolist())
        log_mass.append(np.logaddexp.accumulate(log_weights[queue][::-1])[::-1].tolist())
    heads = [0] * len(queues)
    target = shares.tolist()
    given = [float(x) for x in past]
    total = math.fsum(given)
    chosen = np.empty(k, dtype=np.intp)
    for position in range(k):
        live = [g for g in range(len(queues)) if heads[g] < len(queues[g])]
        g = live[0]
        if len(live) > 1:
            logits = [log_mass[h][heads[h]] for h in live]
            if total > 0:
                for i, h in enumerate(live):
                    logits[i] += span * min(1.0, max(-1.0, gain * (target[h] - given[h] / total)))
            g = live[_sample_index(logits, uniforms[position])]
        chosen[position] = queues[g][heads[g]]
        heads[g] += 1
        given[g] += float(weights[position])
        total += float(weights[position])
    return chosen


def draw_amortized_many(
    log_weights: np.ndarray,
    codes: np.ndarray,
    shares: np.ndarray,
    past: np.ndarray,
    weights: np.ndarray,
    gain: float,
    span: float,
    orders: np.ndarray,
    uniforms: np.ndarray,
) -> np.ndarray:
    """:func:`draw_amortized` for m draws from one state at once: (m, k) pool indices.

    Row r takes the Plackett-Luce order of the pool ``orders[r]`` (``gumbel_order`` of the
    log-weights plus its n Gumbel draws) and ``uniforms[r]`` (its k uniform draws), and gives
    exactly the ranking :func:`draw_amortized` gives with that noise: the same floating-point
    operations in the same order, across rows instead of one row at a time (each group's queue
    and log-masses by the same accumulation; at each position the same corrected logits,
    ``math.exp`` and ``math.fsum`` of the masses, and the same inverse-CDF choice with running
    sums). One pass of numpy operations per position for every row.
    """
    m = orders.shape[0]
    k = weights.shape[0]
    n_groups = shares.shape[0]
    order = orders
    # Each group's queue in that order (a stable sort by group keeps the order within one).
    grouped = order[np.arange(m)[:, None], np.argsort(codes[order], axis=1, kind="stable")]
    sizes = np.bincount(codes, minlength=n_groups)
    starts = np.cumsum(sizes) - sizes
    queues = np.zeros((m, n_groups, k), dtype=np.intp)
    log_mass = np.full((m, n_groups, k + 1), -np.inf)
    for g in range(n_groups):
        size = int(sizes[g])
        if size == 0:
            continue
        queue = grouped[:, starts[g] : starts[g] + size]
        # Accumulated down the queue's columns, each step across every row at once (the same
        # additions as along one queue, in the same order).
        backwards = np.ascontiguousarray(log_weights[queue.T[::-1]])
        suffix = np.logaddexp.accumulate(backwards, axis=0)[::-1]
        head = min(size, k)
        queues[:, g, :head] = queue[:, :head]
        log_mass[:, g, :head] = suffix[:head].T
    # Past a group's last candidate its log-mass is -inf, so a group with none left gets a
    # logit of -inf and a mass of 0: what leaving it out of the draw does.
    flat_queues = queues.reshape(-1)
    flat_mass = log_mass.reshape(-1)
    rows = np.arange(m)
    queue_at = rows[:, None] * (n_groups * k) + np.arange(n_groups) * k
    mass_at = rows[:, None] * (n_groups * (k + 1)) + np.arange(n_groups) * (k + 1)
    heads = np.zeros((m, n_groups), dtype=np.intp)
    given = np.tile(np.asarray(past, dtype=float), (m, 1))
    total = math.fsum(float(x) for x in past)
    chosen = np.empty((m, k), dtype=np.intp)
    for position in range(k):
        logits = flat_mass[mass_at + heads]
        if total > 0:
            correction = np.minimum(np.maximum(gain * (shares - given / total), -1.0), 1.0)
            logits += span * correction
        logits -= logits.max(axis=1)[:, None]
        masses = np.zeros_like(logits)
        masses[logits == 0.0] = 1.0  # exp(0), the largest: no call
        other = (logits < 0.0) & (logits > -np.inf)
        if other.any():
            masses[other] = _exp(logits[other]).astype(float)
        if n_groups <= 2:  # fsum of two floats is their correctly rounded sum
            mass = masses.sum(axis=1)
        else:
            mass = np.array([math.fsum(row) for row in masses.tolist()])
        threshold = uniforms[:, position] * mass
        passed = threshold[:, None] < np.add.accumulate(masses, axis=1)
        group = passed.argmax(axis=1)
        missed = np.flatnonzero(~passed[rows, group])
        if missed.size:  # rounding left the threshold past the end: the last group left
            live = logits[missed] > -np.inf
            group[missed] = n_groups - 1 - live[:, ::-1].argmax(axis=1)
        chosen[:, position] = flat_queues[queue_at[rows, group] + heads[rows, group]]
        heads[rows, group] += 1
        given[rows, group] += float(weights[position])
        total += float(weights[position])
    return chosen


def _successive_noise(
    rng: np.random.Generator, log_weights: np.ndarray, rows: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """What ``rows`` successive :func:`draw_amortized` calls draw from ``rng`` (each n Gumbel
    values, then k uniforms), bit for bit, and ``rng`` left where those calls leave it: the
    Plackett-Luce order each row's Gumbel values give (``gumbel_order``), (rows, n), and the
    uniforms, (rows, k).

    numpy's Gumbel and uniform samplers read one double each from the bit generator, so the
    block is read once with ``rng.random``; the uniforms are those doubles. numpy's Gumbel
    value of a double d is ``-log(-log(1 - d))`` with the C library's log, which numpy's
    vectorised log matches only to within a few units in the last place (about 1e-15 here). So
    the orders are sorted from the vectorised values, and a row where two keys come within
    1e-11 (plus 1e-12 of their size) of each other, the only rows where that error could swap
    two places, is redone from the C library's values (``math.log``) with ``gumbel_order``, as
    the single draw sorts. A double exactly 0, which numpy's Gumbel sampler skips (once in
    2**53), makes the block be drawn call by call instead.
    """
    n = log_weights.shape[0]
    state = rng.bit_generator.state
    doubles = rng.random((rows, n + k))
    if not doubles[:, :n].all():  # the Gumbel sampler would have skipped a 0: call by call
        rng.bit_generator.state = state
        gumbels = np.empty((rows, n))
        for row in range(rows):
            gumbels[row] = rng.gumbel(size=n)
            doubles[row, n:] = rng.random(k)
        return gumbel_order(log_weights + gumbels, gumbels), doubles[:, n:]
    approximate = -np.log(-np.log(1.0 - doubles[:, :n]))  # 0 < d < 1: finite
    keys = log_weights + approximate
    order = np.argsort(keys, axis=1)
    ordered = np.take_along_axis(keys, order, axis=1)
    gaps = ordered[:, 1:] - ordered[:, :-1]
    close = gaps <= 1e-11 + 1e-12 * np.abs(ordered[:, 1:])
    for row in np.flatnonzero(close.any(axis=1)).tolist():
        exact = np.array([0.0 - 1.0 * math.log(-math.log(1.0 - d)) for d in doubles[row, :n]])
        order[row] = gumbel_order(log_weights + exact, exact)[::-1]
    return order[:, ::-1], doubles[:, n:]


_exp = np.frompyfunc(math.exp, 1, 1)
"""``math.exp`` over an array (the C library's exp, as the single draw uses; numpy's own exp
may differ from it in the last bit)."""
_CHUNK = 4096
"""Draws per block in :meth:`AmortizedRanker.sample` (bounds memory)."""


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
