"""The ranker registry: one module per ranker, ``make_ranker(name, **params)`` to build one.

Every list of rankers reads it: each class declares its knobs (:attr:`Ranker.knobs`, their
defaults its signature's), its sweep grid, whether it needs a binary target and whether the
study runs it by default; :func:`register_ranker` adds one (CONTRIBUTING.md, "Add a ranker").
"""

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
    "default_study_rankers",
    "knob_defaults",
    "make_ranker",
    "ranker_parameters",
    "register_ranker",
]

RANKERS: dict[str, type[Ranker]] = {}
"""Every registered ranker class by its name (:func:`register_ranker` adds one)."""


def available_rankers() -> list[str]:
    """Names accepted by :func:`make_ranker`."""
    return list(RANKERS)


def default_study_rankers() -> list[str]:
    """The rankers ``fairrag study`` runs when none are named (:attr:`Ranker.in_default_study`)."""
    return [name for name, cls in RANKERS.items() if cls.in_default_study]


def register_ranker(cls: type[Ranker]) -> type[Ranker]:
    """Add ``cls`` to the registry under ``cls.name`` (usable as a class decorator).

    Its declarations are checked first: a new, non-empty ``name``; ``knobs`` keyword parameters
    of the class; ``binary_knobs`` and the keys of ``sweep_grid`` among its ``knobs``. A wrong
    declaration is a ``ValueError`` naming it and what is accepted.
    """
    name = getattr(cls, "name", None)
    if not (isinstance(cls, type) and issubclass(cls, Ranker)):
        raise ValueError(f"register_ranker takes a Ranker subclass, got {cls!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__}.name must be a non-empty string, got {name!r}")
    if RANKERS.get(name, cls) is not cls:
        raise ValueError(f"a ranker named {name!r} is registered already: {RANKERS[name]!r}")
    accepted = ranker_parameters(cls)
    for what, names in (
        ("knobs", cls.knobs),
        ("binary_knobs", cls.binary_knobs),
        ("sweep_grid", tuple(cls.sweep_grid)),
    ):
        allowed = accepted if what == "knobs" else cls.knobs
        unknown = [knob for knob in names if knob not in allowed]
        if unknown:
            raise ValueError(
                f"{cls.__name__}.{what} names {unknown}, which are not among "
                f"{'its keyword parameters' if what == 'knobs' else 'its knobs'}: {list(allowed)}"
            )
    RANKERS[name] = cls
    return cls


def knob_defaults(name: str) -> dict[str, Any]:
    """Each knob of ranker ``name`` with its default (the signature's; None: the core's rule,
    e.g. ``target_share`` 0.5, FA*IR's ``p`` the target's share)."""
    cls = _registered(name)
    defaults: dict[str, Any] = {}
    for klass in (cls, Ranker):
        for param, parameter in inspect.signature(klass.__init__).parameters.items():
            if param in cls.knobs and param not in defaults:
                defaults[param] = parameter.default
    return {knob: defaults.get(knob) for knob in cls.knobs}


def _registered(name: str) -> type[Ranker]:
    try:
        return RANKERS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown ranker {name!r}; known rankers: {available_rankers()}") from None


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
    cls = _registered(name)
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


for _builtin in (
    StandardRanker,
    StochasticRanker,
    ForcedExposureRanker,
    RepresentativeStochasticRanker,
    FairRanker,
    AmortizedRanker,
):
    register_ranker(_builtin)
