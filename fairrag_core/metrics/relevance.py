"""Retrieval relevance (offline utility, beyond the paper): P@k and nDCG@k, binary relevance.

A document is relevant to a query when it belongs to the query's topic (docs/SPEC.md, "Metrics").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..exposure import position_weights
from ..validation import check_k
from ._checks import as_binary_flags

__all__ = ["ndcg_at_k", "precision_at_k"]


def precision_at_k(relevant: Sequence[bool] | np.ndarray, k: int) -> float:
    """Precision at k: ``P@k = (# relevant documents among ranks 1..k) / k``.

    ``relevant`` holds one binary flag (bool or 0/1) per ranked document, best first. A ranking
    shorter than ``k`` is padded with non-relevant documents (the denominator stays ``k``, as in
    trec_eval). Source: docs/SPEC.md, "Metrics" ("Retrieval relevance"); Manning et al. 2008, §8.4.
    """
    flags = as_binary_flags(relevant, "relevant")
    k = check_k(k)
    return int(flags[:k].sum()) / k


def ndcg_at_k(
    relevant: Sequence[bool] | np.ndarray,
    k: int,
    *,
    n_relevant: int | None = None,
) -> float:
    """Normalised DCG at k with binary relevance.

    ``DCG@k = Σ_{i ≤ k} rel_i / log2(i + 1)``;
    ``IDCG@k = Σ_{i ≤ min(k, R)} 1 / log2(i + 1)`` (the ideal ranking puts all ``R`` relevant
    documents on top); ``nDCG@k = DCG@k / IDCG@k``.
    Source: Järvelin & Kekäläinen 2002; docs/SPEC.md, "Metrics" ("Retrieval relevance").

    ``relevant`` holds one binary flag per ranked document, best first. ``n_relevant`` is ``R``,
    the number of relevant documents available (in the candidate pool or the collection); pass it
    when ``relevant`` covers only part of them, otherwise ``R`` is the number of relevant flags
    in ``relevant`` (ideal = the best reordering of the given list). With ``R = 0`` there is
    nothing to retrieve and the result is 0.0 (the trec_eval convention).
    """
    flags = as_binary_flags(relevant, "relevant")
    k = check_k(k)
    found = int(flags.sum())
    if n_relevant is None:
        n_relevant = found
    elif isinstance(n_relevant, bool) or not isinstance(n_relevant, (int, np.integer)):
        raise TypeError(f"n_relevant must be an integer >= 0, got {n_relevant!r}")
    elif n_relevant < 0:
        raise ValueError(f"n_relevant must be an integer >= 0, got {n_relevant!r}")
    elif n_relevant < found:
        raise ValueError(
            f"n_relevant={n_relevant!r} is less than the {found} relevant documents in `relevant`; "
            "it must count every relevant document available"
        )
    weights = position_weights(k)
    top = flags[:k]
    dcg = math.fsum(weights[: top.shape[0]][top].tolist())
    ideal = math.fsum(weights[: min(k, int(n_relevant))].tolist())
    if ideal == 0.0:
        return 0.0
    return dcg / ideal
