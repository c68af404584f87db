"""Fairness gap: how generation changed the protected group's share relative to retrieval."""

from __future__ import annotations

from ._checks import as_share

__all__ = ["fairness_gap", "fairness_gap_magnitude"]


def fairness_gap(gdp: float, es: float) -> float:
    """Signed fairness gap ``FG = GDP − ES_protected``.

    ``> 0``: generation favoured the protected group more than retrieval exposed it; ``< 0``:
    less. Source: Tikoo 2026, "fairness gap"; docs/SPEC.md, "Metrics".

    Both arguments are shares in [0, 1]; NaN (an answer without valid citations, an empty
    ranking) propagates to a NaN result.
    """
    return as_share(gdp, "gdp") - as_share(es, "es")


def fairness_gap_magnitude(gdp: float, es: float, target_share: float) -> float:
    """Fairness gap magnitude ``FGM = |GDP − t| − |ES_protected − t|`` with ``t = target_share``.

    ``> 0``: generation moved away from parity relative to retrieval; ``< 0``: it corrected
    toward it; 0: no change in distance. Source: docs/SPEC.md, "Metrics" ("Fairness gap magnitude").

    ``gdp`` and ``es`` are shares in [0, 1], NaN propagating; ``target_share`` must be a share in
    [0, 1] and not NaN.
    """
    gdp = as_share(gdp, "gdp")
    es = as_share(es, "es")
    t = as_share(target_share, "target_share")
    if t != t:
        raise ValueError("target_share must be a number in [0, 1], got nan")
    return abs(gdp - t) - abs(es - t)
