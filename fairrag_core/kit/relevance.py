"""From what a store reports to relevance (higher = better), and the check that the direction
is right (docs/SPEC.md, "Adapters" → Relevance).

A store answers best first. After the conversion, relevance that *rises* along that order means
the conversion runs the wrong way (a similarity treated as a distance, or the reverse): ranked
as given, ``standard`` would put the store's worst candidate first. :func:`check_store_order`
refuses such a pool loudly, naming the conversion to use, instead of ranking it inverted. It
also refuses a conversion that is not monotone over the pool (relevance that both rises and
falls along the store's scores, as LangChain's inner-product relevance ``1 - s`` for ``s > 0``,
``-s`` otherwise, does over a pool spanning similarity 0): no ranking by it follows the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["RELEVANCE_CONVERSIONS", "check_monotone", "check_store_order", "to_relevance"]


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


def _both_ways(steps: np.ndarray, relevance: np.ndarray) -> tuple[int, int] | None:
    """The first rising and the first falling step (indices into ``steps``) beyond float
    noise, or None when ``steps`` go one way only (ties allowed)."""
    scale = float(np.nanmax(np.abs(relevance))) if relevance.size else 0.0
    tolerance = 1e-9 * max(1.0, scale)
    rising = np.flatnonzero(steps > tolerance)
    falling = np.flatnonzero(steps < -tolerance)
    if rising.size == 0 or falling.size == 0:
        return None
    return int(rising[0]), int(falling[0])


def check_monotone(
    relevance: np.ndarray,
    source: str,
    described: str,
    raw: np.ndarray | None = None,
    own_function: str | None = None,
) -> None:
    """Refuse a conversion that is not monotone over the pool (docs/SPEC.md, "Adapters" →
    Relevance, direction check).

    With the store's own values ``raw`` (one per candidate), the candidates are sorted by them
    and the relevance must go one way only along that sort (ties allowed). Without them (the
    store converted its scores itself), the store's best-first order stands in for the sort.
    Relevance that rises and falls is a ``ValueError`` naming the two places where it turns.
    """
    relevance = np.asarray(relevance, dtype=float)
    if relevance.shape[0] < 3:
        return
    if raw is not None:
        raw = np.asarray(raw, dtype=float)
        order = np.argsort(-raw, kind="stable")
        ordered, values = relevance[order], raw[order]
        distinct = np.diff(values) != 0  # equal store values may map to anything: a tie
        steps = np.where(distinct, np.diff(ordered), 0.0)
    else:
        order = np.arange(relevance.shape[0])
        ordered, values, steps = relevance, None, np.diff(relevance)
    if np.isnan(steps).any():
        return  # a NaN relevance is refused elsewhere, by the core
    turns = _both_ways(steps, relevance)
    if turns is None:
        return
    where = []
    for step in turns:
        a, b = int(order[step]), int(order[step + 1])
        given = (
            "" if values is None else f"store values {values[step]:.4g} → {values[step + 1]:.4g}, "
        )
        where.append(
            f"{given}relevance {ordered[step]:.4g} → {ordered[step + 1]:.4g} (candidates {a}, {b})"
        )
    along = "the store's values" if raw is not None else f"{source}'s best-first order"
    raise ValueError(
        f"the relevance conversion {described!r} is not monotone over this pool from {source}: "
        f"along {along} it rises ({where[0]}) and falls ({where[1]}), so no ranking by it "
        "follows the store (LangChain's inner-product relevance, 1 - s for s > 0 and -s "
        "otherwise, does this over a pool spanning similarity 0). Name a monotone conversion: "
        f"relevance in {sorted(RELEVANCE_CONVERSIONS)}"
        + ("" if own_function is None else f", or {own_function}=<a monotone function>")
    )


def check_store_order(
    relevance: np.ndarray,
    conversion: str | None,
    source: str,
    described: str | None = None,
    own_function: str | None = None,
    raw: np.ndarray | None = None,
) -> None:
    """Refuse relevance that rises along a store's best-first order, or that a function (of
    the store's or the user's, ``conversion`` None) not monotone over the pool made
    (:func:`check_monotone`, with the store's values ``raw`` when known).

    The pool is refused when its relevance never falls from one candidate to the next and ends
    higher than it starts (at least two distinct values): every step of the store's order
    disagrees with the conversion. Pools the store did not sort (a merged list) and ties are
    accepted as given. ``conversion`` is the named conversion used (None: a function of the
    store's or the user's), whose opposite the message names as the fix; ``described`` says in
    the message how the relevance was computed (default: the conversion's name); ``source``
    names the store; ``own_function`` the adapter's argument for a function of the user's own
    (LangChain's ``relevance_score_fn``), suggested too when given.
    """
    if conversion is None:  # a named conversion is monotone; a function may not be
        check_monotone(relevance, source, described or "the store's function", raw, own_function)
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
