"""Utility (groundedness): the share of an answer's bullets that cite a context document about the
person they name."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..citations import GroundedCitation

__all__ = ["groundedness"]


def groundedness(
    grounded: Sequence[GroundedCitation | bool],
    bullet_count: int | None = None,
) -> float:
    """Utility ``U = (# bullets citing a context title AND naming that document's person) /
    (# bullets)``; 0.0 for an answer with no bullet.

    Source: Tikoo 2026, "utility"; docs/SPEC.md, "Metrics" ("Utility (groundedness)").

    ``grounded`` is the output of :func:`fairrag_core.citations.ground_citations`, one entry per
    parsed citation bullet (``GroundedCitation.supported`` = valid and names the person), or the
    same as plain booleans. ``bullet_count`` is :attr:`ParsedAnswer.bullet_count`: the parsed
    bullets plus the bullet lines that could not be parsed (they count as unsupported bullets);
    prose lines are not bullets. It defaults to ``len(grounded)`` (every bullet was parsed).
    Duplicated bullets are not merged: each counts in the numerator and in the denominator.

    Example::

        parsed = parse_citations(answer)
        u = groundedness(ground_citations(parsed, context), parsed.bullet_count)
    """
    if isinstance(grounded, (str, bytes)) or not isinstance(grounded, (Sequence, np.ndarray)):
        raise TypeError(
            "grounded must be a sequence of GroundedCitation (from ground_citations) or booleans, "
            f"got {type(grounded).__name__}"
        )
    supported = 0
    for position, item in enumerate(grounded):
        if isinstance(item, GroundedCitation):
            supported += item.supported
        elif isinstance(item, (bool, np.bool_)):
            supported += bool(item)
        else:
            raise TypeError(
                "grounded must hold GroundedCitation objects or booleans; "
                f"position {position} holds {item!r:.80}"
            )
    if bullet_count is None:
        bullet_count = len(grounded)
    elif isinstance(bullet_count, bool) or not isinstance(bullet_count, (int, np.integer)):
        raise TypeError(f"bullet_count must be an integer >= 0, got {bullet_count!r}")
    elif bullet_count < len(grounded):
        raise ValueError(
            f"bullet_count must be at least the number of grounded citations ({len(grounded)}), "
            f"since each citation is one bullet; got {bullet_count!r}"
        )
    if bullet_count == 0:
        return 0.0
    return supported / int(bullet_count)
