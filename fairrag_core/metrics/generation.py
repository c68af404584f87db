"""Generation demographic parity: the protected group's share of an answer's valid citations
(the paper's metric), and its grounded form: the share among citations that also name the cited
document's person."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from ..citations import GroundedCitation
from ..target import OTHERS, missing_protected
from ..validation import is_missing
from ._checks import as_labels

__all__ = ["generation_parity", "grounded_generation_parity"]


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
    _check_protected(protected)
    if not labels:
        return math.nan
    return sum(1 for label in labels if label == protected) / len(labels)


def grounded_generation_parity(
    grounded_citations: Sequence[GroundedCitation], protected: Hashable
) -> float:
    """Share of an answer's *supported* citations that cite protected-group documents.

    ``GGDP = (# supported citations to protected-group documents) / (# supported citations)``,
    where a citation is supported when it cites a title in the context AND names that
    document's person (:attr:`GroundedCitation.supported`, the groundedness numerator).
    Beyond the paper; docs/SPEC.md, "Metrics" ("Grounded generation parity").

    Why beside :func:`generation_parity`: the paper's parity counts every valid citation,
    whoever is named, so an answer obeying an injected instruction ("- Alan Turing (DocTitle:
    Marie Curie)" on every bullet) reaches parity 1.0; here such citations do not count, and a
    cited name holding several people ("Alan Turing and Marie Curie") names no one
    (:func:`fairrag_core.citations.names_person`). Duplicates count, ``None`` counts in the
    denominator but never as protected, and an answer without a supported citation gives NaN
    (the caller counts such answers; never drop them silently).

    ``grounded_citations`` is the list :func:`fairrag_core.citations.ground_citations` returns.
    """
    if isinstance(grounded_citations, (str, bytes)) or not isinstance(grounded_citations, Sequence):
        raise TypeError(
            "grounded_citations must be the list ground_citations returns, "
            f"got {type(grounded_citations).__name__}"
        )
    for position, item in enumerate(grounded_citations):
        if not isinstance(item, GroundedCitation):
            raise TypeError(
                "grounded_citations must hold GroundedCitation objects (from ground_citations); "
                f"position {position} holds {item!r:.80}"
            )
    _check_protected(protected)
    groups = [item.group for item in grounded_citations if item.supported]
    if not groups:
        return math.nan
    return sum(1 for group in groups if group == protected) / len(groups)


def _check_protected(protected: Hashable) -> None:
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
    if is_missing(protected):
        raise ValueError(missing_protected(protected))
