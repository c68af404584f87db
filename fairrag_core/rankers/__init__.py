"""The ranker registry: one module per ranker, ``make_ranker(name, **params)`` to build one."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ..ranking import Ranker
from .amortized import AmortizedRanker
from .fair import FairRanker
from .forced_exposure import ForcedExposureRanker
from .representative_stochastic import RepresentativeStochasticRanker
from .standard import StandardRanker
from .stochastic import StochasticRanker

__all__ = [
    "RANKERS",
    "AmortizedRanker",
    "FairRanker",
    "ForcedExposureRanker",
    "RepresentativeStochasticRanker",
    "StandardRanker",
    "StochasticRanker",
    "available_rankers",
    "configure_ranker",
    "make_ranker",
    "ranker_parameters",
]

RANKERS: dict[str, type[Ranker]] = {
    cls.name: cls
    for cls in (
        StandardRanker,
        StochasticRanker,
        ForcedExposureRanker,
        RepresentativeStochasticRanker,
        FairRanker,
        AmortizedRanker,
    )
}


def available_rankers() -> list[str]:
    """Names accepted by :func:`make_ranker`."""
    return list(RANKERS)


def make_ranker(name: str | Ranker, **params: Any) -> Ranker:
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
    accepted = ranker_parameters(cls)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"ranker {name!r} takes no parameter {', '.join(map(repr, unknown))}; "
            f"accepted: {', '.join(accepted)}"
        )
    return cls(**params)


def ranker_parameters(cls: type[Ranker]) -> list[str]:
    """The keyword parameters a ranker class accepts: its own, then the base class's."""
    return list(_keyword_parameters(cls))


@functools.lru_cache(maxsize=64)
def _keyword_parameters(cls: type[Ranker]) -> tuple[str, ...]:
    # Read once per class: ``inspect.signature`` costs most of a ranker's construction.
    names: list[str] = []
    for klass in (cls, Ranker):
        for name, parameter in inspect.signature(klass.__init__).parameters.items():
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in names:
                names.append(name)
    return tuple(names)


def configure_ranker(
    ranker: str | Ranker,
    *,
    protected: object = None,
    target_share: float | None = None,
    target: object = None,
    seed: int | None = None,
    params: dict[str, object] | None = None,
) -> Ranker:
    """The ranker a configuration describes, as the framework adapters hold it.

    ``protected``/``target_share``/``target``/``seed`` left at None are not passed (each ranker
    keeps its defaults); ``params`` are the ranker-specific extras (``alpha``, ``gain``,
    ``exposure``, ...) and may not repeat those four.
    """
    fairness = {
        name: value
        for name, value in (
            ("protected", protected),
            ("target_share", target_share),
            ("target", target),
            ("seed", seed),
        )
        if value is not None
    }
    params = dict(params or {})
    clash = sorted(set(params) & {"protected", "target_share", "target", "seed"})
    if clash:
        raise ValueError(
            f"ranker params repeat {clash}; give them as protected=, target_share=, target=, "
            "seed= instead"
        )
    return make_ranker(ranker, **fairness, **params)
