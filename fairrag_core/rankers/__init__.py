"""The ranker registry: one module per ranker, ``make_ranker(name, **params)`` to build one."""

from __future__ import annotations

from ..ranking import Ranker
from .forced_exposure import ForcedExposureRanker
from .representative_stochastic import RepresentativeStochasticRanker
from .standard import StandardRanker
from .stochastic import StochasticRanker

__all__ = [
    "RANKERS",
    "ForcedExposureRanker",
    "RepresentativeStochasticRanker",
    "StandardRanker",
    "StochasticRanker",
    "available_rankers",
    "make_ranker",
]

RANKERS: dict[str, type[Ranker]] = {
    cls.name: cls
    for cls in (
        StandardRanker,
        StochasticRanker,
        ForcedExposureRanker,
        RepresentativeStochasticRanker,
    )
}


def available_rankers() -> list[str]:
    """Names accepted by :func:`make_ranker`."""
    return list(RANKERS)


def make_ranker(name: str | Ranker, **params) -> Ranker:
    """Build a ranker by name: ``make_ranker("representative_stochastic", protected="female")``.

    A :class:`Ranker` instance is returned as is (then ``params`` must be empty).
    """
    if isinstance(name, Ranker):
        if params:
            raise ValueError(
                f"params {sorted(params)} cannot be applied to an existing ranker {name!r}"
            )
        return name
    try:
        cls = RANKERS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown ranker {name!r}; known rankers: {available_rankers()}") from None
    return cls(**params)
