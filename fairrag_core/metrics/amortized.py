"""Amortized disparity: a stream of rankings' exposure shares against the target, as a whole.

Equity of attention amortized over a stream of queries (Biega et al. 2018); docs/SPEC.md, "Metrics
over many rankings". Vectorised over every position of every ranking in one pass.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from ..exposure import ExposureModel, make_exposure_model
from ..target import OTHERS, Target, make_target
from ._checks import as_labels
from .expected_exposure import position_weights_for

__all__ = ["amortized_disparity", "amortized_exposure_shares"]


def amortized_exposure_shares(
    stream: Sequence[Sequence[Hashable]] | np.ndarray,
    *,
    protected: Hashable | None = None,
    target_share: float | None = None,
    target: Mapping[Hashable, float] | Target | None = None,
    exposure: str | ExposureModel | Sequence[float] | np.ndarray | None = None,
) -> dict[Hashable, float]:
    """Each target bucket's share of all the exposure a stream of rankings gave.

    ``S_g = Σ_t Σ_{i ≤ k_t, group(r_{t,i}) = g} v_i / Σ_t W_t`` with ``W_t = Σ_{i ≤ k_t} v_i``,
    i.e. ``Σ_t ES_g,t W_t / Σ_t W_t`` (each ranking's share weighted by its total exposure); a
    per-group fitted model weighs rank i by ``lambda_{group(r_{t,i})} v_i`` there too, as
    every exposure metric does (docs/SPEC.md, "Exposure model" → Fitted, per group).
    ``stream`` holds one ranking's group labels per item (best first; lengths may differ), or a
    2-D array of labels. Labels are bucketed as the rankers do (:meth:`Target.encode`: ``None``
    and unnamed labels go to :data:`~fairrag_core.OTHERS`). Weights ``v_i`` from ``exposure``
    (default DCG ``1 / log2(i + 1)``, or explicit weights). No exposure at all: every share NaN.
    Source: docs/SPEC.md, "Metrics over many rankings" ("Amortized disparity").
    """
    spec = make_target(protected=protected, target_share=target_share, target=target)
    shares = _stream_shares(stream, spec, exposure)
    return {g: float(s) for g, s in zip(spec.groups, shares, strict=True)}


def amortized_disparity(
    stream: Sequence[Sequence[Hashable]] | np.ndarray,
    *,
    protected: Hashable | None = None,
    target_share: float | None = None,
    target: Mapping[Hashable, float] | Target | None = None,
    exposure: str | ExposureModel | Sequence[float] | np.ndarray | None = None,
) -> float:
    """Amortized disparity of a stream: ``|Σ_t ES_protected,t × W_t / Σ_t W_t − target|``.

    ``W_t = Σ_{i ≤ k_t} v_i`` is ranking t's total exposure, so for rankings of equal length this
    is the distance between the mean protected share and the target (0 = the stream as a whole
    is on target, whatever each list does). Several groups (``target={...}``): half the L1
    distance ``½ Σ_g |S_g − target_g|`` over the target's buckets, as
    :func:`~fairrag_core.metrics.exposure_disparity` does for one ranking (our choice).
    Source: Biega et al. 2018; docs/SPEC.md, "Metrics over many rankings". Inputs as
    :func:`amortized_exposure_shares`; an empty stream (no exposure) gives NaN.
    """
    spec = make_target(protected=protected, target_share=target_share, target=target)
    shares = _stream_shares(stream, spec, exposure)
    if spec.protected is not None and set(spec.groups) == {spec.protected, OTHERS}:
        index = spec.groups.index(spec.protected)
        return abs(float(shares[index]) - float(spec.shares[index]))
    return 0.5 * math.fsum(np.abs(shares - spec.shares).tolist())


def _stream_shares(
    stream: object,
    spec: Target,
    exposure: str | ExposureModel | Sequence[float] | np.ndarray | None,
) -> np.ndarray:
    if isinstance(stream, np.ndarray):
        if stream.ndim != 2:
            raise ValueError(
                f"stream must be 2-D (rankings x ranks) as an array, got shape {stream.shape}"
            )
        rows = [as_labels(row, "stream") for row in stream]
    elif isinstance(stream, (str, bytes)) or not isinstance(stream, Sequence):
        raise TypeError(
            "stream must be a sequence of rankings, each a sequence of group labels, got "
            f"{type(stream).__name__}"
        )
    else:
        rows = [as_labels(row, f"stream[{t}]") for t, row in enumerate(stream)]
    lengths = np.fromiter((len(row) for row in rows), dtype=np.intp, count=len(rows))
    longest = int(lengths.max(initial=0))
    if longest == 0:
        return np.full(len(spec.groups), np.nan)
    weights = position_weights_for(exposure, longest)
    # Position of every label in its ranking, all rankings concatenated.
    positions = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    labels = [label for row in rows for label in row]
    codes = spec.encode(labels)
    entry = weights[positions]
    model = exposure if isinstance(exposure, ExposureModel) else None
    if model is None and (exposure is None or isinstance(exposure, str)):
        model = make_exposure_model(exposure)
    if model is not None and model.per_group:  # lambda_g v_i: shares of expected attributions
        entry = entry * model.group_factors(labels, "the stream shows")
    mass = np.bincount(codes, weights=entry, minlength=len(spec.groups))
    total = mass.sum()
    return mass / total if total > 0 else np.full(len(spec.groups), np.nan)
