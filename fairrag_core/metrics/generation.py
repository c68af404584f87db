"""Generation demographic parity: the protected group's share of an answer's valid citations."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from ..target import OTHERS
from ._checks import as_labels

__all__ = ["generation_parity"]


def generation_parity(cited_groups: Sequence[Hashable], protected: Hashable) -> float:
    """Share of an answer's valid citations that cite protected-group documents.

    ``GDP = (# valid citations to protected-group documents) / (# valid citations)``.
    Source: Tikoo 2026, "generation demographic parity"; docs/SPEC.md, "Metrics".

    ``cited_groups`` holds the group of the cited document for each *valid* citation (see
    :func:`fairrag_core.citations.cited_groups`). Every valid citation counts, so a document cited
    on two bullets counts twice; ``None`` (unknown group) counts in the denominator but never as
    protected. An answer with no valid citation gives NaN: the caller counts such answers and
    must not drop them silently.
    """
    labels = as_labels(cited_groups, "cited_groups")
    if protected is None or protected is OTHERS:
        raise ValueError(
            f"protected must name a group label (e.g. 'female'), got {protected!r}; "
            "unknown (None) documents are never counted as protected"
        )
    try:
        hash(protected)
    except TypeError:
        raise TypeError(
            f"protected must be a hashable group label, got {protected!r:.80}"
        ) from None
    if not labels:
        return math.nan
    return sum(1 for label in labels if label == protected) / len(labels)
