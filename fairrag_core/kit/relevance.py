"""From what a store reports to relevance (higher = better), and the check that the direction
is right (docs/SPEC.md, "Adapters" → Relevance).

A store answers best first. After the conversion, relevance that *rises* along that order means
the conversion runs the wrong way (a similarity treated as a distance, or the reverse): ranked
as given, ``standard`` would put the store's worst candidate first. :func:`check_store_order`
refuses such a pool loudly, naming the conversion to use, instead of ranking it inverted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["RELEVANCE_CONVERSIONS", "check_store_order", "to_relevance"]


def _chroma_cosine(scores: np.ndarray) -> np.ndarray:
    if (scores <= 0).any():
        raise ValueError(
            "relevance='chroma_cosine' expects ChromaVectorStore scores exp(-distance) > 0, "
            f"got {scores[scores <= 0][:3].tolist()}"
        )
    return 1.0 + np.log(scores)


def _chroma_l2(scores: np.ndarray) -> np.ndarray:
    if (scores <= 0).any():
        raise ValueError(
            "relevance='chroma_l2' expects ChromaVectorStore scores exp(-distance) > 0, "
            f"got {scores[scores <= 0][:3].tolist()}"
        )
    return np.log(scores)


RELEVANCE_CONVERSIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "similarity": lambda s: s,
    "cosine_distance": lambda d: 1.0 - d,
    "chroma_cosine": _chroma_cosine,
    "l2_distance": lambda d: -d,
    "chroma_l2": _chroma_l2,
    "negated": lambda s: -s,
}
"""Named conversions: ``similarity`` (as given), ``cosine_distance`` (``1 - d``, the spec's rule
for Chroma cosine), ``chroma_cosine`` (``1 + ln s`` for LlamaIndex's ChromaVectorStore, whose
``s = exp(-d)``: ``1 - d``), ``l2_distance`` (``-d``), ``chroma_l2`` (``ln s`` for a
ChromaVectorStore over an l2 collection: ``-d``, ``l2_distance``'s rule), ``negated`` (``-s``)."""

_OPPOSITE = {
    "similarity": "cosine_distance",
    "cosine_distance": "similarity",
    "chroma_cosine": "negated",
    "l2_distance": "similarity",
    "chroma_l2": "negated",
    "negated": "similarity",
}


def to_relevance(values: Sequence[float] | np.ndarray, conversion: str) -> np.ndarray:
    """``values`` (one per candidate, store order) converted by the named conversion."""
    try:
        convert = RELEVANCE_CONVERSIONS[conversion]
    except (KeyError, TypeError):
        raise ValueError(
            f"relevance {conversion!r} is unknown; known conversions: "
            f"{sorted(RELEVANCE_CONVERSIONS)}"
        ) from None
    return np.asarray(convert(np.asarray(values, dtype=float)), dtype=float)


def check_store_order(
    relevance: np.ndarray,
    conversion: str | None,
    source: str,
    described: str | None = None,
    own_function: str | None = None,
) -> None:
    """Refuse relevance that rises along a store's best-first order.

    The pool is refused when its relevance never falls from one candidate to the next and ends
    higher than it starts (at least two distinct values): every step of the store's order
    disagrees with the conversion. Pools the store did not sort (a merged list) and ties are
    accepted as given. ``conversion`` is the named conversion used (None: a function of the
    store's or the user's), whose opposite the message names as the fix; ``described`` says in
    the message how the relevance was computed (default: the conversion's name); ``source``
    names the store; ``own_function`` the adapter's argument for a function of the user's own
    (LangChain's ``relevance_score_fn``), suggested too when given.
    """
    if relevance.shape[0] < 2 or not relevance[-1] > relevance[0]:
        return  # a pool that does not end higher than it starts is never refused: no more to do
    if (np.diff(relevance) >= 0).all():  # never falling, and higher at the end
        opposite = _OPPOSITE.get(conversion) if conversion is not None else None
        fix = (
            f"Use relevance={opposite!r}"
            if opposite is not None
            else "Name the conversion its scores need, relevance=<name>"
        )
        raise ValueError(
            f"relevance rises along {source}'s best-first order after the conversion "
            f"{described or conversion!r} ({relevance[0]:.4g} for its first candidate, "
            f"{relevance[-1]:.4g} for its last): the scores run the other way. {fix} "
            f"(conversions: {sorted(RELEVANCE_CONVERSIONS)})"
            + ("" if own_function is None else f", or {own_function}=<your function>")
        )
