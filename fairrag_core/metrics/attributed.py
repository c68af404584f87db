"""Attributed generation parity and attributed groundedness: the paper's generation metrics over
the attributed source set, which reads every citation style and implicit mentions (docs/SPEC.md,
"Metrics" and "Attribution"). Beyond the paper."""

from __future__ import annotations

import math
from collections.abc import Hashable

from ..attribution import AttributedAnswer
from .generation import _check_protected

__all__ = ["attributed_generation_parity", "attributed_groundedness"]


def _check_answer(attributed: AttributedAnswer) -> None:
    if not isinstance(attributed, AttributedAnswer):
        raise TypeError(
            "attributed must be the AttributedAnswer attribute_answer returns, "
            f"got {type(attributed).__name__}"
        )


def attributed_generation_parity(attributed: AttributedAnswer, protected: Hashable) -> float:
    """Share of an answer's attributions that attribute protected-group documents.

    ``AGDP = (# attributions to protected-group documents) / (# attributions)``, one
    attribution per (bullet, context document) (:func:`fairrag_core.attribution.attribute_answer`:
    explicit citations in any style, else the context people a bullet names). ``None`` (unknown
    group) counts in the denominator but never as protected; NaN when nothing is attributed
    (counted by the caller, never dropped). docs/SPEC.md, "Metrics".
    """
    _check_answer(attributed)
    _check_protected(protected)
    groups = [a.group for a in attributed.attributions]
    if not groups:
        return math.nan
    return sum(1 for group in groups if group == protected) / len(groups)


def attributed_groundedness(attributed: AttributedAnswer) -> float:
    """``AU = (# bullets attributed to a context document whose person they name) /
    (# bullets)``; 0.0 for an answer without a bullet. docs/SPEC.md, "Metrics"."""
    _check_answer(attributed)
    if not attributed.bullets:
        return 0.0
    return sum(1 for bullet in attributed.bullets if bullet.supported) / len(attributed.bullets)
