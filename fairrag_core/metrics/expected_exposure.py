"""Expected exposure of a stochastic ranker over many sampled rankings of one query.

Diaz et al. 2020 ("Evaluating Stochastic Rankings with Expected Exposure"), group-level as used by
Kim & Diaz 2025 and TREC 2022 Fair Ranking Task 2, and document-level; docs/SPEC.md, "Metrics over
many rankings". Vectorised over the draws: one ``(N, k)`` array of pool indices per query.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..exposure import ExposureModel, make_exposure_model
from ..target import Target, make_target
from ..validation import as_rng, check_k
from ._checks import as_labels

if TYPE_CHECKING:
    from ..ranking import Ranker

__all__ = [
    "ExpectedExposure",
    "document_expected_exposure",
    "expected_exposure",
    "expected_exposure_of",
]

Exposure = str | ExposureModel | Sequence[float] | np.ndarray | None


@dataclass(frozen=True)
class ExpectedExposure:
    """Expected exposure ``E`` of each unit (group or document) against its target ``T``.

    docs/SPEC.md, "Metrics over many rankings"; Diaz et al. 2020.
    """

    loss: float
    """EE-L ``= Σ_u (E_u − T_u)²`` (0 = on target; lower is better)."""
    disparity: float
    """EE-D ``= Σ_u E_u²`` (how unequally exposure is spread; lower is more equal)."""
    relevance: float
    """EE-R ``= Σ_u E_u T_u`` (exposure where the target wants it; higher is better)."""
    units: tuple[Hashable, ...]
    """The units: the target's groups (:data:`~fairrag_core.OTHERS` included) or pool indices."""
    system: np.ndarray
    """``E_u``, mean exposure per draw of each unit."""
    target: np.ndarray
    """``T_u``, the target exposure of each unit."""


def position_weights_for(exposure: Exposure, k: int) -> np.ndarray:
    """Weights ``v_1..v_k``: a model name, an :class:`ExposureModel`, None (DCG) or the weights.

    Explicit weights (a 1-D sequence of at least ``k`` finite numbers >= 0) let a caller use a
    discount no model names, e.g. TREC 2022's ``1 / log2(max(i, 2))``
    (:func:`fairrag_core.metrics.trec_discount`).
    """
    if exposure is None or isinstance(exposure, (str, ExposureModel)):
        return make_exposure_model(exposure).weights(k)
    try:
        weights = np.asarray(exposure, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(
            "exposure must be a model name, an ExposureModel, None or a 1-D sequence of position "
            f"weights, got {exposure!r:.80}"
        ) from None
    if weights.ndim != 1 or weights.shape[0] < k:
        raise ValueError(
            f"exposure weights must be 1-D with at least k={k} values (one per position), got "
            f"shape {weights.shape}"
        )
    if not (np.isfinite(weights).all() and (weights >= 0).all()):
        raise ValueError("exposure weights must be finite numbers >= 0")
    return weights[:k]


def as_rankings(rankings: object, pool_size: int, name: str = "rankings") -> np.ndarray:
    """``rankings`` as an ``(N, k)`` int array of distinct pool indices in ``[0, pool_size)``."""
    try:
        arr = np.asarray(rankings)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an (N, k) array of pool indices") from None
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (one row of pool indices per sampled ranking), got shape "
            f"{arr.shape}"
        )
    if arr.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one ranking, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer pool indices, got dtype {arr.dtype}")
    arr = arr.astype(np.intp, copy=False)
    if arr.size:
        bad = np.flatnonzero(((arr < 0) | (arr >= pool_size)).any(axis=1))
        if bad.size:
            raise ValueError(
                f"{name} row {int(bad[0])} holds {arr[bad[0]].tolist()}: pool indices must be in "
                f"[0, {pool_size}) for a pool of {pool_size}"
            )
        ordered = np.sort(arr, axis=1)
        repeated = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if repeated.size:
            raise ValueError(
                f"{name} row {int(repeated[0])} repeats a pool index: {arr[repeated[0]].tolist()}"
            )
    return arr


def _ee(system: np.ndarray, target: np.ndarray, units: tuple[Hashable, ...]) -> ExpectedExposure:
    delta = system - target
    return ExpectedExposure(
        loss=float(delta @ delta),
        disparity=float(system @ system),
        relevance=float(system @ target),
        units=units,
        system=system,
        target=target,
    )


def expected_exposure(
    rankings: Sequence[Sequence[int]] | np.ndarray,
    groups: Sequence[Hashable],
    *,
    protected: Hashable | None = None,
    target_share: float | None = None,
    target: Mapping[Hashable, float] | Target | None = None,
    exposure: Exposure = None,
) -> ExpectedExposure:
    """Group-level expected exposure of N sampled rankings of one pool.

    ``E_g = (1/N) Σ_draws Σ_{i ≤ k, group(r_i) = g} v_i``; ``T_g = target_g × Σ_{i ≤ k} v_i``;
    ``EE-L = Σ_g (E_g − T_g)²``, ``EE-D = Σ_g E_g²``, ``EE-R = Σ_g E_g T_g`` over the target's
    buckets. Source: Diaz et al. 2020; docs/SPEC.md, "Metrics over many rankings".

    ``rankings`` is an ``(N, k)`` array of pool indices (row = one draw, best first), ``groups``
    the pool's labels, bucketed as the rankers do (:meth:`Target.encode`: ``None`` and unnamed
    labels go to :data:`~fairrag_core.OTHERS`, never to the protected group). ``exposure`` is a
    model (default DCG ``v_i = 1 / log2(i + 1)``) or explicit weights ``v_1..v_k``. Every
    candidate counts, relevant or not (TREC's Task 2 counts relevant documents only: pass the
    rankings of relevant documents to reproduce it).
    """
    spec = make_target(protected=protected, target_share=target_share, target=target)
    labels = as_labels(groups, "groups")
    arr = as_rankings(rankings, len(labels))
    n_draws, k = arr.shape
    weights = position_weights_for(exposure, k)
    codes = spec.encode(labels)
    exposure_sums = np.bincount(
        codes[arr].ravel(), weights=np.tile(weights, n_draws), minlength=len(spec.groups)
    )
    system = exposure_sums / n_draws
    return _ee(system, spec.shares * weights.sum(), spec.groups)


def ideal_document_exposure(relevance: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Target exposure per document: the ideal ranking's, equal within each relevance grade.

    The ideal ranking sorts the pool by grade (descending) and gives position i weight ``v_i``
    (0 beyond k); every document of a grade gets the mean weight of the positions its grade
    occupies (Diaz et al. 2020: all orderings of equally relevant documents are equally
    likely under the ideal policy).
    """
    n = relevance.shape[0]
    padded = np.zeros(n)
    padded[: min(n, weights.shape[0])] = weights[:n]
    sorted_grades = np.sort(relevance)[::-1]
    # Grade blocks in the ideal order: each block's positions share their total weight.
    starts = np.flatnonzero(np.r_[True, sorted_grades[1:] != sorted_grades[:-1]])
    sizes = np.diff(np.r_[starts, n])
    block_means = np.add.reduceat(padded, starts) / sizes
    # Map each document's grade to its block's mean weight.
    block_of = np.searchsorted(-sorted_grades[starts], -relevance)
    return block_means[block_of]


def document_expected_exposure(
    rankings: Sequence[Sequence[int]] | np.ndarray,
    relevance: Sequence[float] | np.ndarray,
    *,
    exposure: Exposure = None,
) -> ExpectedExposure:
    """Document-level expected exposure (Diaz et al. 2020; as evaluated by Kim & Diaz 2025).

    ``E_d = (1/N) Σ_draws v_{rank of d}`` (0 when d is not in the top-k of a draw);
    ``T_d`` = the ideal ranking's exposure spread equally over the documents of d's relevance
    grade (:func:`ideal_document_exposure`); ``EE-L = Σ_d (E_d − T_d)²``, ``EE-D = Σ_d E_d²``,
    ``EE-R = Σ_d E_d T_d`` over the pool. Source: Diaz et al. 2020; docs/SPEC.md,
    "Metrics over many rankings".

    ``relevance`` holds one finite grade per pool document (binary or graded, higher = more
    relevant); ``rankings`` is an ``(N, k)`` array of pool indices; ``exposure`` as in
    :func:`expected_exposure`.
    """
    try:
        grades = np.asarray(relevance, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(
            "relevance must be a 1-D sequence of numbers (one grade per document)"
        ) from None
    if grades.ndim != 1 or not np.isfinite(grades).all():
        raise ValueError(
            f"relevance must be 1-D and finite (one grade per pool document), got shape "
            f"{grades.shape}"
        )
    arr = as_rankings(rankings, grades.shape[0])
    n_draws, k = arr.shape
    weights = position_weights_for(exposure, k)
    exposure_sums = np.bincount(
        arr.ravel(), weights=np.tile(weights, n_draws), minlength=grades.shape[0]
    )
    system = exposure_sums / n_draws
    target = ideal_document_exposure(grades, weights)
    return _ee(system, target, tuple(range(grades.shape[0])))


def expected_exposure_of(
    ranker: Ranker,
    scores: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable],
    k: int = 5,
    n_samples: int = 100,
    *,
    rng: np.random.Generator | int | None = None,
) -> ExpectedExposure:
    """Group-level expected exposure of a ranker on one pool, from ``n_samples`` draws.

    Draws with ``ranker.sample(scores, groups, k, n_samples, rng=rng)`` when the ranker has a
    batch sampler, else ``n_samples`` successive ``ranker.rank`` calls on one generator; then
    :func:`expected_exposure` with the ranker's target and exposure model. ``rng``: a Generator or
    a seed (None: the ranker's own generator). docs/SPEC.md, "Metrics over many rankings"
    (default N = 100).
    """
    if ranker.target is None:
        raise ValueError(
            f"expected exposure needs a fairness target; {ranker!r} has none: build it with "
            "protected=<group> or target={group: share}"
        )
    check_k(k)
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)):
        raise TypeError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    sample = getattr(ranker, "sample", None)
    if callable(sample):
        rankings = sample(scores, groups, k, n_samples, rng=rng)
    else:
        generator = None if rng is None else as_rng(rng)
        rankings = np.stack(
            [ranker.rank(scores, groups, k, rng=generator) for _ in range(int(n_samples))]
        )
    return expected_exposure(rankings, list(groups), target=ranker.target, exposure=ranker.exposure)
