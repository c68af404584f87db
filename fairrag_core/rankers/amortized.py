"""The amortized ranker: representative_stochastic with a memory of the stream's exposure."""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np

from ..ledger import ExposureLedger, make_ledger
from ..ledger.base import DEFAULT_KEY, LedgerState, check_key, encode_label
from ..plackett_luce import gumbel_order, plackett_luce_log_weights
from ..ranking import Ranker, RankingResult
from ..validation import check_alpha, check_gain, check_groups

__all__ = ["AmortizedRanker", "AmortizedRankingResult"]

DEFAULT_ALPHA = 8.0
DEFAULT_GAIN = 80.0
"""docs/SPEC.md item 6 leaves alpha and the gain open; both chosen on the study's stream (there)."""


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
    ``alpha`` (default :data:`DEFAULT_ALPHA`; our choices, measured in docs/SPEC.md item 6), and
    the fairness target of every ranker. Group labels must be str, int or None
    (:func:`~fairrag_core.ledger.encode_label`).
    """

    name = "amortized"

    def __init__(
        self,
        *,
        alpha: float = DEFAULT_ALPHA,
        gain: float = DEFAULT_GAIN,
        ledger: ExposureLedger | str | os.PathLike[str] | None = None,
        ledger_key: str = DEFAULT_KEY,
        **fairness: object,
    ) -> None:
        self.alpha = check_alpha(alpha)
        self.gain = check_gain(gain)
        self.ledger = make_ledger(ledger)
        self.ledger_key = check_key(ledger_key)
        super().__init__(**fairness)  # type: ignore[arg-type]

    def _prepare(  # type: ignore[override]  # the pool it returns also carries the labels
        self,
        scores: object,
        groups: Iterable[Hashable] | None,
        k: object,
        rng: np.random.Generator | int | None,
    ) -> tuple[_LabelledPool | None, int, np.random.Generator]:
        if groups is not None and not isinstance(groups, (Sequence, np.ndarray, str, bytes)):
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
        saw to the stream.
        """
        weights = self.exposure.weights(k)
        past = self._past(self.ledger.state(self.ledger_key))
        out = np.empty((n_samples, k), dtype=np.intp)
        for row in out:
            row[:] = self._draw(pool, weights, past, rng)
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
        log_weights = plackett_luce_log_weights(pool.scores, self.alpha, pool.low, pool.high)
        return draw_amortized(
            log_weights, pool.codes, self.target.shares, past, weights, self.gain, self.span, rng
        )

    @property
    def span(self) -> float:
        """``R = 2 ** alpha - 1``: the range of the log-weights, and the correction's cap."""
        return 2.0 ** min(self.alpha, 1000.0) - 1.0  # beyond, 2 ** alpha overflows a float

    def __repr__(self) -> str:
        target = None if self.target is None else self.target.as_dict()
        return (
            f"AmortizedRanker(target={target}, alpha={self.alpha}, "
            f"gain={self.gain}, ledger={self.ledger!r}, ledger_key={self.ledger_key!r}, "
            f"seed={self.seed!r})"
        )


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
