"""Retrieval exposure metrics: each group's exposure share and the disparity from a target.

docs/SPEC.md, "Metrics": the paper's "female exposure share" is ``ES_protected`` and its "exposure
disparity" is ``|ES_protected - target_share|`` (Tikoo 2026); the several-group form is ours.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from ..exposure import ExposureModel, make_exposure_model
from ..target import OTHERS, Target, make_target
from ._checks import as_labels

__all__ = ["exposure_disparity", "exposure_share", "exposure_shares"]


def exposure_shares(
    ranked_groups: Sequence[Hashable],
    *,
    exposure: str | ExposureModel | None = None,
) -> dict[Hashable, float]:
    """Exposure share of every group in a ranking.

    ``ES_g = Σ_{i ≤ k, group(r_i) = g} v_i / Σ_{i ≤ k} v_i``, where ``ranked_groups[i - 1]`` is the
    group of the document at 1-based rank ``i``, ``k = len(ranked_groups)`` and ``v_i`` is the
    position weight of ``exposure`` (default DCG, ``v_i = 1 / log2(i + 1)``; a per-group fitted
    model weighs rank i by ``lambda_{group(r_i)} * v_i``, so the shares are shares of the
    generator's expected attributions: docs/SPEC.md, "Exposure model" → Fitted, per group).
    Source: docs/SPEC.md, "Metrics" ("Retrieval exposure share"); Tikoo 2026.

    Labels are taken as they are (``None``, the unknown group, is a key of its own); the shares
    sum to 1 and are keyed in order of first appearance. An empty ranking gives ``{}``.
    """
    labels = as_labels(ranked_groups, "ranked_groups")
    if not labels:
        return {}
    weights = make_exposure_model(exposure).entry_weights(labels).tolist()
    total = math.fsum(weights)
    per_group: dict[Hashable, list[float]] = {}
    for label, weight in zip(labels, weights, strict=True):
        per_group.setdefault(label, []).append(weight)
    return {label: math.fsum(ws) / total for label, ws in per_group.items()}


def exposure_share(
    ranked_groups: Sequence[Hashable],
    group: Hashable,
    *,
    exposure: str | ExposureModel | None = None,
) -> float:
    """Exposure share ``ES_g`` of one group in a ranking.

    ``ES_g = Σ_{i ≤ k, group(r_i) = g} v_i / Σ_{i ≤ k} v_i`` (see :func:`exposure_shares`).
    Source: docs/SPEC.md, "Metrics"; the paper's "female exposure share" is ``ES_female``.

    A group absent from the ranking gets 0.0. An empty ranking has no exposure to share, so the
    result is NaN (undefined, never silently 0). Only labels equal to ``group`` count: ``None``
    (unknown) is never counted toward a named group.
    """
    labels = as_labels(ranked_groups, "ranked_groups")
    try:
        hash(group)
    except TypeError:
        raise TypeError(f"group must be a hashable label, got {group!r:.80}") from None
    if not labels:
        return math.nan
    return exposure_shares(labels, exposure=exposure).get(group, 0.0)


def exposure_disparity(
    ranked_groups: Sequence[Hashable],
    *,
    protected: Hashable | None = None,
    target_share: float | None = None,
    target: Mapping[Hashable, float] | Target | None = None,
    exposure: str | ExposureModel | None = None,
) -> float:
    """Distance between the groups' exposure shares and the target (0 = on target).

    - binary (``protected=g``, ``target_share=t``, default 0.5):
      ``ED = |ES_protected − t|`` (Tikoo 2026; docs/SPEC.md, "Metrics", "Exposure disparity");
    - several groups (``target={group: share}``): ``ED = ½ Σ_b |ES_b − target_b|`` over the
      target's buckets (half the L1 distance, i.e. the total-variation distance; docs/SPEC.md).

    Labels are put into buckets exactly as the rankers do (:meth:`Target.encode`): a label the
    target does not name, ``None`` included, falls into the :data:`OTHERS` bucket, so unknown
    documents are never counted as protected unless the target names ``None`` as a group. A
    target mapping without ``OTHERS`` owes that bucket 0, so exposure given to unnamed groups
    counts as disparity. For the binary target both forms agree. Empty ranking: NaN.
    """
    spec = make_target(protected=protected, target_share=target_share, target=target)
    labels = as_labels(ranked_groups, "ranked_groups")
    if not labels:
        return math.nan
    weights = make_exposure_model(exposure).entry_weights(labels)
    codes = spec.encode(labels)
    shares = np.bincount(codes, weights=weights, minlength=len(spec.groups)) / weights.sum()
    if spec.protected is not None and set(spec.groups) == {spec.protected, OTHERS}:
        protected_index = spec.groups.index(spec.protected)
        return abs(float(shares[protected_index]) - float(spec.shares[protected_index]))
    return 0.5 * math.fsum(np.abs(shares - spec.shares).tolist())
