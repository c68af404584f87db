"""AWRF and the TREC 2022 Fair Ranking Task 1 score (nDCG × AWRF), for one or many rankings.

Source: Sapiezynski et al. 2019 (attention-weighted rank fairness); TREC 2022 Fair Ranking Track,
Task 1, as its published evaluation code computes it (trec2022-fair-public,
``wptrec/metrics/awrf.py`` and ``common.py``); docs/SPEC.md, "Metrics over many rankings".
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from ..target import Target, make_target
from ..validation import refuse_unordered
from ._checks import as_labels

__all__ = ["awrf", "trec_discount", "trec_fair_score", "trec_ndcg"]


def trec_discount(k: int) -> np.ndarray:
    """TREC 2022's position discount ``d_i = 1 / log2(max(i, 2))`` for ``i = 1..k``.

    Ranks 1 and 2 both get 1 (unlike the DCG weight ``1 / log2(i + 1)`` of the rankers).
    Source: trec2022-fair-public ``wptrec/metrics/common.py``; docs/SPEC.md, "Metrics over many
    rankings".
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be an integer >= 0, got {k!r}")
    return 1.0 / np.log2(np.maximum(np.arange(1, k + 1, dtype=float), 2.0))


def _label_rows(ranked_groups: object, name: str) -> tuple[list[list[Hashable]], bool]:
    """One ranking (a 1-D sequence of labels) or many (a 2-D array, or a list of lists/arrays)."""
    if isinstance(ranked_groups, np.ndarray) and ranked_groups.ndim == 2:
        return [as_labels(row, name) for row in ranked_groups], True
    if isinstance(ranked_groups, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of group labels, not a string")
    refuse_unordered(ranked_groups, name)
    try:
        items = list(ranked_groups)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            f"{name} must be one ranking's group labels or a list of them, got "
            f"{type(ranked_groups).__name__}"
        ) from None
    # Lists and arrays are rankings; tuples stay labels (e.g. intersectional groups).
    if items and all(isinstance(item, (list, np.ndarray)) for item in items):
        return [as_labels(row, f"{name}[{i}]") for i, row in enumerate(items)], True
    return [as_labels(items, name)], False


def _padded_codes(rows: list[list[Hashable]], spec: Target) -> tuple[np.ndarray, np.ndarray]:
    """(N, L) bucket codes and a known-group mask (L = longest row; padding is not known)."""
    lengths = np.fromiter((len(row) for row in rows), dtype=np.intp, count=len(rows))
    width = int(lengths.max(initial=0))
    flat = [label for row in rows for label in row]
    # Row and position of every label, all rows concatenated: one encode for the whole batch.
    row_of = np.repeat(np.arange(len(rows)), lengths)
    position = np.arange(row_of.shape[0]) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    codes = np.zeros((len(rows), width), dtype=np.intp)
    known = np.zeros((len(rows), width), dtype=bool)
    codes[row_of, position] = spec.encode(flat)
    none_is_a_group = None in spec.groups
    known[row_of, position] = [label is not None or none_is_a_group for label in flat]
    return codes, known


def awrf(
    ranked_groups: Sequence[Hashable] | Sequence[Sequence[Hashable]] | np.ndarray,
    *,
    protected: Hashable | None = None,
    target_share: float | None = None,
    target: Mapping[Hashable, float] | Target | None = None,
) -> float | np.ndarray:
    """Attention-weighted rank fairness of a ranking: ``AWRF = 1 − JSD(a, target)²``.

    ``d_i = 1 / log2(max(i, 2))`` (:func:`trec_discount`); ``a_g = Σ_i d_i [group(r_i) = g] /
    Σ_i d_i`` over the documents of known group (a ``None`` label is unknown and left out, its
    position keeps its rank); ``JSD`` is scipy's Jensen–Shannon *distance* with the natural log,
    so ``JSD²`` is the divergence. 1 = the ranking's group distribution equals the target.
    Labels are bucketed as the rankers do (:meth:`Target.encode`); the target's buckets are the
    distribution's support. Source: trec2022-fair-public ``wptrec/metrics/awrf.py``
    (``AWRFMetric.qr_awrf``, one fairness dimension); docs/SPEC.md, "Metrics over many
    rankings".

    ``ranked_groups``: one ranking's labels (best first) -> a float; a list of lists (or of 1-D
    arrays), or a 2-D array, of labels (rankings may differ in length) -> an array, one value per
    ranking, computed in one vectorised pass. A tuple is a label, never a ranking. A ranking
    with no document of known group has no distribution: NaN.
    """
    from scipy.spatial.distance import jensenshannon

    spec = make_target(protected=protected, target_share=target_share, target=target)
    rows, many = _label_rows(ranked_groups, "ranked_groups")
    codes, known = _padded_codes(rows, spec)
    weights = np.where(known, trec_discount(codes.shape[1])[None, :], 0.0)
    mass = np.zeros((len(rows), len(spec.groups)))
    np.add.at(mass, (np.arange(len(rows))[:, None], codes), weights)
    totals = mass.sum(axis=1)
    values = np.full(len(rows), np.nan)
    has = totals > 0
    if has.any():
        distribution = mass[has] / totals[has, None]
        distance = jensenshannon(distribution, spec.shares[None, :], axis=1)
        values[has] = 1.0 - distance * distance
    return values if many else float(values[0])


def trec_ndcg(
    relevant: Sequence[int] | Sequence[Sequence[int]] | np.ndarray,
    *,
    n_relevant: int | Sequence[int] | np.ndarray | None = None,
    k: int | None = None,
) -> float | np.ndarray:
    """nDCG of TREC 2022 Task 1: binary relevance, discount ``d_i = 1 / log2(max(i, 2))``.

    ``DCG = Σ_{i ≤ n} rel_i d_i``; ``IDCG = Σ_{i ≤ min(k, R)} d_i``; ``nDCG = DCG / IDCG``, with
    ``R`` the number of relevant documents for the query (``n_relevant``; default: those in the
    ranking) and ``k`` the run length the track asks for (default: the ranking's length; the
    track's is 500). Source: trec2022-fair-public ``wptrec/metrics/awrf.py``
    (``AWRFMetric.qr_ndcg``); docs/SPEC.md, "Metrics over many rankings". ``R = 0``: 0.0.

    One ranking (1-D flags) -> a float; several (2-D, equal length) -> an array.
    """
    flags = np.asarray(relevant)
    if flags.ndim not in (1, 2) or (flags.size and flags.dtype.kind not in "biuf"):
        raise ValueError(
            f"relevant must be 1-D (one ranking) or 2-D (rankings x ranks) booleans or 0/1, got "
            f"shape {flags.shape} dtype {flags.dtype}"
        )
    if flags.size and not np.isin(flags, (0, 1)).all():
        raise ValueError("relevant must hold binary relevance (booleans or 0/1)")
    many = flags.ndim == 2
    flags = np.atleast_2d(flags).astype(bool)
    length = flags.shape[1]
    if k is None:
        k = length
    elif isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < length:
        raise ValueError(f"k must be an integer >= the ranking length {length}, got {k!r}")
    found = flags.sum(axis=1)
    if n_relevant is None:
        count = found
    else:
        count = np.broadcast_to(np.asarray(n_relevant), found.shape)
        if count.dtype.kind not in "iu" or (count < found).any():
            raise ValueError(
                f"n_relevant must be integers >= the relevant documents in each ranking "
                f"({found.tolist()}), got {n_relevant!r}"
            )
    discount = trec_discount(int(k))
    dcg = flags @ discount[:length]
    cumulative = np.r_[0.0, np.cumsum(discount)]
    ideal = cumulative[np.minimum(count, k)]
    values = np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)
    return values if many else float(values[0])


def trec_fair_score(
    ranked_groups: Sequence[Hashable] | Sequence[Sequence[Hashable]] | np.ndarray,
    relevant: Sequence[int] | Sequence[Sequence[int]] | np.ndarray,
    *,
    n_relevant: int | Sequence[int] | np.ndarray | None = None,
    k: int | None = None,
    protected: Hashable | None = None,
    target_share: float | None = None,
    target: Mapping[Hashable, float] | Target | None = None,
) -> float | np.ndarray:
    """TREC 2022 Fair Ranking Task 1 score: ``nDCG × AWRF`` (:func:`trec_ndcg`, :func:`awrf`).

    Source: trec2022-fair-public ``wptrec/metrics/awrf.py`` (``AWRFMetric.__call__``, "Score");
    docs/SPEC.md, "Metrics over many rankings". One ranking -> a float, several -> an array; a
    ranking with no document of known group scores NaN (its AWRF is undefined).
    """
    rows, many = _label_rows(ranked_groups, "ranked_groups")
    flags = np.asarray(relevant)
    lengths = [len(row) for row in rows]
    expected = [flags.shape[-1]] * (flags.shape[0] if flags.ndim == 2 else 1)
    if flags.ndim not in (1, 2) or (flags.ndim == 2) != many or lengths != expected:
        raise ValueError(
            "ranked_groups and relevant must describe the same rankings (one label and one "
            f"flag per rank): ranking lengths {lengths} vs relevant shape {flags.shape}"
        )
    fairness = awrf(
        rows if many else rows[0], protected=protected, target_share=target_share, target=target
    )
    return fairness * trec_ndcg(flags, n_relevant=n_relevant, k=k)
