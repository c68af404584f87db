"""Attributed generation parity and attributed groundedness: the paper's generation metrics over
the attributed source set, which reads every citation style and implicit mentions (docs/SPEC.md,
"Metrics" and "Attribution"). Beyond the paper."""

from __future__ import annotations

import math
from collections.abc import Hashable

from ..attribution import AttributedAnswer
from .generation import _check_protected

__all__ = [
    "PROVENANCES",
    "attributed_citation_precision",
    "attributed_generation_parity",
    "attributed_groundedness",
]

PROVENANCES = ("all", "explicit")
"""``all``: explicit and implicit attributions; ``explicit``: citations alone."""


def _check_provenance(provenance: str) -> None:
    if provenance not in PROVENANCES:
        raise ValueError(f"provenance must be one of {PROVENANCES}, got {provenance!r}")


def _check_answer(attributed: AttributedAnswer) -> None:
    if not isinstance(attributed, AttributedAnswer):
        raise TypeError(
            "attributed must be the AttributedAnswer attribute_answer returns, "
            f"got {type(attributed).__name__}"
        )


def attributed_generation_parity(
    attributed: AttributedAnswer, protected: Hashable, *, provenance: str = "all"
) -> float:
    """Share of an answer's attributions that attribute protected-group documents.

    ``AGDP = (# attributions to protected-group documents) / (# attributions)``, one
    attribution per (bullet, context document) (:func:`fairrag_core.attribution.attribute_answer`:
    explicit citations in any style, else the context people a bullet names). ``None`` (unknown
    group) counts in the denominator but never as protected; NaN when nothing is attributed
    (counted by the caller, never dropped). Mis-citations are never counted. With
    ``provenance="explicit"`` only the attributions by citation count. docs/SPEC.md, "Metrics".
    """
    _check_answer(attributed)
    _check_protected(protected)
    _check_provenance(provenance)
    items = attributed.attributions if provenance == "all" else attributed.explicit_attributions
    groups = [a.group for a in items]
    if not groups:
        return math.nan
    return sum(1 for group in groups if group == protected) / len(groups)


def attributed_groundedness(attributed: AttributedAnswer, *, provenance: str = "all") -> float:
    """``AU = (# supported bullets) / (# bullets)``; 0.0 for an answer without a bullet.

    A bullet is supported (:attr:`~fairrag_core.attribution.AttributedBullet.supported`) when a
    credited citation on it names its document's person, or, citing nothing credited and
    mis-citing nothing, when it names a shown person. With ``provenance="explicit"`` only
    support by a citation counts. Over-citation and out-of-range ranges never raise it.
    docs/SPEC.md, "Metrics"."""
    _check_answer(attributed)
    _check_provenance(provenance)
    if not attributed.bullets:
        return 0.0
    if provenance == "explicit":
        supported = sum(1 for bullet in attributed.bullets if bullet.supported_explicitly)
    else:
        supported = sum(1 for bullet in attributed.bullets if bullet.supported)
    return supported / len(attributed.bullets)


def attributed_citation_precision(attributed: AttributedAnswer) -> float:
    """Citation precision as ALCE measures it (Gao et al. 2023, "Enabling Large Language Models
    to Generate Text with Citations"), over the shown documents an answer cites:

    ``CP = (# credited citations naming their document's person) / (# resolved citations +
    # mis-citations + # numbers and ranges beyond the context)``, where a mis-citation (a
    shown document cited on a bullet that presents another shown person), an over-citation
    and a number no shown entry carries (``[7]`` of five, ``[1-999]``) count in the
    denominator only. NaN when the denominator is 0. docs/SPEC.md, "Metrics"."""
    _check_answer(attributed)
    explicit = attributed.explicit_attributions
    total = len(explicit) + len(attributed.miscitations) + attributed.out_of_range_count
    if not total:
        return math.nan
    return sum(1 for a in explicit if a.names_person) / total
