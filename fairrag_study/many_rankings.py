"""The study's rankers as it builds them, and its metrics over many rankings.

docs/SPEC.md, "The study" → Rankers and Over many rankings. Every ranker of the core's registry
runs in the study by default: the paper's four, FA*IR (``fair``: ``p`` the protected group's
target share, significance :data:`FAIR_ALPHA`) and ``amortized`` (one stream over the trials in
trial order, on a fresh in-memory ledger per study run). After the trials, for every ranker:

- per trial, from the trial's pool (:mod:`fairrag_study.pools`), ``samples`` rankings drawn
  with ``ranker.sample(scores, groups, k, samples, rng=trial seed)`` give the group expected
  exposure (EE-L, EE-D, EE-R; :func:`fairrag_core.metrics.expected_exposure`). FA*IR, which
  repeats its one ranking, ranks every trial's pool in one call (:func:`batch_rankings`, the
  same rankings). The amortized
  ranker draws them from the ledger as that trial read it (:class:`SnapshotLedger`: the exposure
  its earlier trials were shown), so they are the distribution the trial's ranking came from;
- per trial, from the ranking the trial showed (its record): AWRF, TREC nDCG and the TREC 2022
  score nDCG × AWRF (:mod:`fairrag_core.metrics.awrf`), relevance from the pool;
- per ranker, from the rankings its trials showed, in trial order: the amortized disparity and
  each group's share of the stream's exposure (:mod:`fairrag_core.metrics.amortized`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairrag_core import FairRanker, Ranker
from fairrag_core.exposure import ExposureModel
from fairrag_core.ledger import ExposureLedger, encode_label
from fairrag_core.metrics import (
    amortized_disparity,
    amortized_exposure_shares,
    awrf,
    expected_exposure,
    trec_fair_score,
    trec_ndcg,
)

from .dataset import StudyDataset
from .frontier import Frontier
from .pools import QuestionPool
from .rankers import (
    FAIR_ALPHA,
    STREAM_KEY,
    build_ranker,
    describe_rankers,
    ranker_fields,
    ranker_params,
    study_rankers,
)

__all__ = [
    "FAIR_ALPHA",
    "STREAM_KEY",
    "TRIAL_METRICS",
    "ManyRankings",
    "SnapshotLedger",
    "Stream",
    "batch_rankings",
    "build_ranker",
    "describe_rankers",
    "measure",
    "ranker_fields",
    "ranker_params",
    "study_rankers",
]

TRIAL_METRICS = ("ee_loss", "ee_disparity", "ee_relevance", "awrf", "trec_ndcg", "trec_score")
"""The per-trial metrics :func:`measure` adds (``trial_metrics.csv``)."""


def batch_rankings(
    ranker: Ranker, pools: Sequence[QuestionPool], k: int
) -> dict[int, np.ndarray] | None:
    """``{trial index: ranking}`` of every pool, for a ranker with a many-pools path (FA*IR:
    :meth:`~fairrag_core.FairRanker.rank_batch`, pools of one size per call), else ``None``.

    Each ranking equals ``ranker.rank(pool.scores, pool.groups, k)``, and so every row of
    ``ranker.sample`` (a deterministic ranker repeats its one ranking).
    """
    if not isinstance(ranker, FairRanker):
        return None
    by_size: dict[int, list[QuestionPool]] = {}
    for pool in pools:
        by_size.setdefault(len(pool.scores), []).append(pool)
    rankings: dict[int, np.ndarray] = {}
    for size, group in by_size.items():
        scores = np.asarray([pool.scores for pool in group], dtype=float).reshape(-1, size)
        ranked = ranker.rank_batch(scores, [list(pool.groups) for pool in group], k)
        for pool, ranking in zip(group, ranked, strict=True):
            rankings[pool.trial.index] = ranking
    return rankings


class SnapshotLedger(ExposureLedger):
    """A ledger frozen at one instant: every read gives the same state, and adds are dropped.

    For measuring the amortized ranker's distribution at one point of its stream (its N draws
    all read the exposure its earlier rankings were shown; none of them was served, so none
    is added). Not a ledger to serve from.
    """

    location = "snapshot"

    def __init__(self, totals: Mapping[Hashable, float], rankings: int) -> None:
        self._totals = {encode_label(label): float(value) for label, value in totals.items()}
        self._rankings = rankings

    def _read(self, key: str) -> tuple[dict[str, float], int]:
        return dict(self._totals), self._rankings

    def _add(self, key: str, exposure: dict[str, float]) -> None:
        pass  # a draw from the snapshot is measured, not served

    def _reset(self, key: str) -> None:
        raise TypeError("a SnapshotLedger is read-only")

    def _keys(self) -> Iterable[str]:
        return [STREAM_KEY]


@dataclass(frozen=True)
class Stream:
    """One ranker's stream: the rankings its trials showed, in trial order."""

    ranker: str
    rankings: int
    disparity: float
    """Amortized disparity (docs/SPEC.md, "Metrics over many rankings")."""
    shares: dict[str, float]
    """Each target group's share of all the stream's exposure (the others as ``OTHERS``)."""


@dataclass(frozen=True)
class ManyRankings:
    """What :func:`measure` found: per-trial rows and one stream per ranker."""

    samples: int
    """Rankings drawn per question for expected exposure."""
    trials: list[dict[str, Any]]
    """One row per (ranker, trial): ``ranker``, ``trial``, ``samples`` and :data:`TRIAL_METRICS`."""
    streams: dict[str, Stream]
    frontier: Frontier | None = None
    """The amortized ranker's frontier on the trials' pools (:mod:`fairrag_study.frontier`),
    when the study ran ``amortized``."""


def measure(
    pools: Sequence[QuestionPool],
    records: Sequence[Mapping[str, Any]],
    rankers: Sequence[str],
    *,
    dataset: StudyDataset,
    k: int,
    samples: int,
    alpha: float,
    seed: int,
    exposure: str | ExposureModel | None = None,
) -> ManyRankings:
    """The metrics over many rankings of every ranker's trials (this module's docstring).

    ``pools`` are the trials' pools, ``records`` the trials' records (``ranker``, ``trial``,
    ``doc_ids``, ``groups``); each ranker is built as its retriever was (:func:`build_ranker`).
    A shown document missing from its trial's pool raises
    :class:`~fairrag_study.pools.NotInPoolError` (the index changed since the trial).
    """
    target = dataset.target_arguments()
    pool_of = {pool.trial.index: pool for pool in pools}
    rows: list[dict[str, Any]] = []
    streams: dict[str, Stream] = {}
    for name in rankers:
        shown = sorted((r for r in records if r["ranker"] == name), key=lambda r: r["trial"])
        ranker = build_ranker(name, alpha=alpha, dataset=dataset, seed=seed, exposure=exposure)
        weights = ranker.exposure.weights(k)
        served: dict[Hashable, float] = {}  # the amortized stream's exposure so far
        batch = batch_rankings(ranker, [pool_of[r["trial"]] for r in shown], k)
        for count, record in enumerate(shown):
            pool = pool_of[record["trial"]]
            if name == "amortized":
                snapshot = SnapshotLedger(served, count)
                ranker = build_ranker(
                    name,
                    alpha=alpha,
                    dataset=dataset,
                    seed=seed,
                    ledger=snapshot,
                    exposure=exposure,
                )
            if batch is not None:  # a deterministic ranker: its one ranking, samples times
                drawn = np.tile(batch[pool.trial.index], (samples, 1))
            else:
                drawn = ranker.sample(pool.scores, pool.groups, k, samples, rng=pool.trial.seed)
            ee = expected_exposure(drawn, pool.groups, exposure=ranker.exposure, **target)
            row: dict[str, Any] = {
                "ranker": name,
                "trial": record["trial"],
                "samples": samples,
                "ee_loss": ee.loss,
                "ee_disparity": ee.disparity,
                "ee_relevance": ee.relevance,
            }
            groups = record.get("groups")
            if groups:
                flags = pool.relevant[pool.positions(record["doc_ids"])]
                row["awrf"] = float(awrf(groups, **target))
                row["trec_ndcg"] = float(trec_ndcg(flags, n_relevant=pool.n_relevant, k=k))
                row["trec_score"] = float(
                    trec_fair_score(groups, flags, n_relevant=pool.n_relevant, k=k, **target)
                )
                for position, label in enumerate(groups):
                    served[label] = served.get(label, 0.0) + float(weights[position])
            else:  # no list was shown (a failed retrieval): nothing to score
                row.update(awrf=math.nan, trec_ndcg=math.nan, trec_score=math.nan)
            rows.append(row)
        stream = [r["groups"] for r in shown if r.get("groups")]
        shares = amortized_exposure_shares(stream, exposure=ranker.exposure, **target)
        streams[name] = Stream(
            name,
            len(stream),
            amortized_disparity(stream, exposure=ranker.exposure, **target),
            {str(label): share for label, share in shares.items()},
        )
    return ManyRankings(samples, rows, streams)
