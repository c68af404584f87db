"""The generator's position curve: P(attributed | position) measured from answers, and the
exposure model fitted from it (docs/SPEC.md, "Exposure model" → Fitted).

An *observation* is one answer to one shown list: the group shown at each position and whether
the answer attributes that entry (the record's ``attributed_sources``,
:func:`fairrag_core.attribution.attribute_answer`). The same records come from the study's
position-curve phase (the same top-k shown in cyclic shifts, so each document visits each
position) and from a deployment's logs (``fairrag audit --fit-exposure``), where position and
relevance are confounded; the provenance says which.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .citations import normalize_title
from .exposure import FittedCurve

__all__ = [
    "ESTIMATOR",
    "PositionObservation",
    "PositionRate",
    "fit_curve",
    "fit_group_curve",
    "observation_from_record",
    "position_rates",
    "split_units",
    "wilson_interval",
]

GROUP_ESTIMATOR = (
    "v_i as the position-only fit; lambda_g = (A_g + 0.5) / (E_g + 0.5), A_g the attributions "
    "of group g's entries, E_g = sum_i n_gi p_i those the pooled rates p_i expect of them "
    "(indirect standardisation): P(attributed | i, g) = lambda_g p_i; 95% intervals of v_i and "
    "lambda_g: percentile bootstrap over questions"
)
"""The per-group fit's estimator, as provenance states it (docs/SPEC.md, "Exposure model" →
Fitted, per group)."""

ESTIMATOR = (
    "p_i = (a_i + 0.5) / (n_i + 1) (a_i answers attributing the entry at position i of n_i "
    "showing one there), v_i = p_i / sum_j p_j; 95% intervals of v_i: percentile bootstrap "
    "over questions"
)
"""The fit's estimator, as provenance states it (docs/SPEC.md, "Exposure model" → Fitted)."""

Z95 = 1.959963984540054


@dataclass(frozen=True)
class PositionObservation:
    """One answer to one shown list."""

    unit: str
    """The question the list answered: the unit the bootstrap resamples (the fit/held-out
    split is by topic, a set of questions: :func:`split_units`)."""
    groups: tuple[Hashable, ...]
    """The group shown at each position, best first."""
    attributed: tuple[bool, ...]
    """Whether the answer attributes the entry at each position."""
    model: str | None = None
    """The generator's name (records' ``model``)."""


@dataclass(frozen=True)
class PositionRate:
    """P(attributed | position[, group]) with its Wilson 95% interval."""

    model: str | None
    position: int
    """1-based."""
    group: Hashable | None
    """``None``: every group."""
    attributed: int
    shown: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.attributed / self.shown if self.shown else math.nan


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (NaNs when ``n == 0``)."""
    if n <= 0:
        return math.nan, math.nan
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def observation_from_record(
    record: Mapping[str, object], unit_key: str = "question"
) -> PositionObservation | None:
    """The observation of a record (docs/SPEC.md, "Records"), or None when it holds no answer
    (retrieval only) or no shown list. An entry is attributed when an ``attributed_sources``
    title equals its title (after ``normalize_title``; a recorded title is cut at 200
    characters, so the shown title is compared cut the same way)."""
    titles = record.get("titles")
    groups = record.get("groups")
    sources = record.get("attributed_sources")
    if not isinstance(titles, list) or not titles or not isinstance(sources, list):
        return None
    if record.get("answer") is None:
        return None
    if not isinstance(groups, list) or len(groups) != len(titles):
        groups = [None] * len(titles)
    cited = {
        normalize_title(str(source.get("title", "")))
        for source in sources
        if isinstance(source, Mapping)
    }
    attributed = tuple(normalize_title(str(title)[:200]) in cited for title in titles)
    unit = record.get(unit_key)
    model = record.get("model")
    return PositionObservation(
        str(unit),
        tuple(g if isinstance(g, Hashable) else str(g) for g in groups),
        attributed,
        None if model is None else str(model),
    )


def split_units(units: Iterable[str], seed: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The distinct ``units`` split in two halves by a seeded shuffle: ``(fit, held_out)``;
    the fit half takes the extra one of an odd count."""
    distinct = sorted(set(units))
    order = np.random.default_rng([seed, 35]).permutation(len(distinct))
    half = (len(distinct) + 1) // 2
    shuffled = [distinct[i] for i in order]
    return tuple(sorted(shuffled[:half])), tuple(sorted(shuffled[half:]))


def _counts(observations: Sequence[PositionObservation], k: int) -> tuple[np.ndarray, np.ndarray]:
    attributed = np.zeros(k)
    shown = np.zeros(k)
    for obs in observations:
        m = min(k, len(obs.attributed))
        shown[:m] += 1
        attributed[:m] += np.asarray(obs.attributed[:m], dtype=float)
    return attributed, shown


def _weights(attributed: np.ndarray, shown: np.ndarray) -> np.ndarray:
    p = (attributed + 0.5) / (shown + 1.0)
    return p / p.sum()


def position_rates(
    observations: Sequence[PositionObservation], k: int, *, by_group: bool = True
) -> list[PositionRate]:
    """P(attributed | position) per model for positions ``1..k``, over every group (``group``
    None) and, with ``by_group``, per group shown there; Wilson 95% intervals."""
    rows: list[PositionRate] = []
    models = sorted({obs.model for obs in observations}, key=str)
    for model in models:
        mine = [obs for obs in observations if obs.model == model]
        groups = sorted({g for obs in mine for g in obs.groups[:k]}, key=str) if by_group else []
        for position in range(k):
            for group in (None, *groups):
                hits = [
                    obs.attributed[position]
                    for obs in mine
                    if position < len(obs.attributed)
                    and (group is None or obs.groups[position] == group)
                ]
                a, n = sum(hits), len(hits)
                low, high = wilson_interval(a, n)
                rows.append(PositionRate(model, position + 1, group, a, n, low, high))
    return rows


def fit_curve(
    observations: Sequence[PositionObservation],
    k: int,
    *,
    provenance: Mapping[str, object] | None = None,
    seed: int = 0,
    resamples: int = 1000,
    level: float = 0.95,
) -> FittedCurve:
    """The exposure model fitted from ``observations`` (docs/SPEC.md, "Exposure model" →
    Fitted): :data:`ESTIMATOR` over positions ``1..k``; the intervals (``level``, default 95%)
    resample the observations' units (questions) with replacement ``resamples`` times (seeded).

    A ``ValueError`` when a position in ``1..k`` was never shown (the curve would be a guess
    there)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    attributed, shown = _counts(observations, k)
    if not observations or shown.min() == 0:
        raise ValueError(
            f"cannot fit {k} positions: position {int(np.argmin(shown)) + 1} was shown in none "
            f"of the {len(observations)} answers; fit on answers whose lists hold {k} entries"
        )
    weights = _weights(attributed, shown)
    units = sorted({obs.unit for obs in observations})
    per_unit = {unit: (np.zeros(k), np.zeros(k)) for unit in units}
    for obs in observations:
        a, n = _counts([obs], k)
        per_unit[obs.unit][0][:] += a
        per_unit[obs.unit][1][:] += n
    stack_a = np.array([per_unit[u][0] for u in units])
    stack_n = np.array([per_unit[u][1] for u in units])
    rng = np.random.default_rng([seed, 35, 1])
    draws = rng.integers(0, len(units), size=(resamples, len(units)))
    boot_a = stack_a[draws].sum(axis=1)
    boot_n = stack_n[draws].sum(axis=1)
    p = (boot_a + 0.5) / (boot_n + 1.0)
    boot = p / p.sum(axis=1, keepdims=True)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    tail = 100 * (1 - level) / 2
    lower, upper = np.percentile(boot, [tail, 100 - tail], axis=0)
    facts: dict[str, object] = {
        "estimator": ESTIMATOR,
        "answers": len(observations),
        "units": len(units),
        "attributed_per_position": [int(x) for x in attributed],
        "shown_per_position": [int(x) for x in shown],
        "bootstrap_resamples": resamples,
        "bootstrap_seed": seed,
        "interval_level": level,
    }
    facts.update(provenance or {})
    weights = weights / math.fsum(weights)
    return FittedCurve(
        tuple(float(round(w, 6)) for w in _renormalised(weights)),
        tuple(float(x) for x in lower),
        tuple(float(x) for x in upper),
        facts,
    )


def _renormalised(weights: np.ndarray) -> list[float]:
    """Weights rounded to 6 decimals that still sum to 1 (the last absorbs the rounding), so a
    record's ``fitted(v1,...)`` name reads back to the same model."""
    rounded = [round(float(w), 6) for w in weights]
    rounded[-1] = round(1.0 - math.fsum(rounded[:-1]), 6)
    return rounded


def fit_group_curve(
    observations: Sequence[PositionObservation],
    k: int,
    *,
    provenance: Mapping[str, object] | None = None,
    seed: int = 0,
    resamples: int = 1000,
    level: float = 0.95,
) -> FittedCurve:
    """The per-group exposure model fitted from ``observations`` (docs/SPEC.md, "Exposure
    model" → Fitted, per group): the position weights ``v_i`` of :func:`fit_curve` and a factor
    ``lambda_g`` per group (:data:`GROUP_ESTIMATOR`), so that the expected attributions of
    group g's entry at rank i are ``lambda_g * v_i``. Intervals as :func:`fit_curve`'s
    (percentile bootstrap over questions; the factors' resamples are drawn apart from the
    weights', so each interval is marginal).

    A ``ValueError`` when the observations name no group (``groups`` all None)."""
    curve = fit_curve(
        observations, k, provenance=provenance, seed=seed, resamples=resamples, level=level
    )
    labels = sorted({str(g) for obs in observations for g in obs.groups[:k] if g is not None})
    if not labels:
        raise ValueError(
            "cannot fit group factors: no observation names the group shown at a position "
            "(records without 'groups')"
        )
    index = {g: j for j, g in enumerate(labels)}
    units = sorted({obs.unit for obs in observations})
    unit_index = {u: j for j, u in enumerate(units)}
    # Per question: attributions and showings of each group at each position.
    attributed = np.zeros((len(units), len(labels), k))
    shown = np.zeros((len(units), len(labels), k))
    for obs in observations:
        u = unit_index[obs.unit]
        for position in range(min(k, len(obs.attributed))):
            group = obs.groups[position]
            if group is None:
                continue
            shown[u, index[str(group)], position] += 1
            attributed[u, index[str(group)], position] += obs.attributed[position]

    def factors(a: np.ndarray, n: np.ndarray) -> np.ndarray:
        """lambda_g from counts summed over questions: (..., G, k) -> (..., G)."""
        rates = (a.sum(axis=-2) + 0.5) / (n.sum(axis=-2) + 1.0)  # pooled p_i
        expected = (n * rates[..., None, :]).sum(axis=-1)
        return (a.sum(axis=-1) + 0.5) / (expected + 0.5)

    point = factors(attributed.sum(axis=0), shown.sum(axis=0))
    rng = np.random.default_rng([seed, 35, 3])
    draws = rng.integers(0, len(units), size=(resamples, len(units)))
    boot = factors(attributed[draws].sum(axis=1), shown[draws].sum(axis=1))
    tail = 100 * (1 - level) / 2
    lower, upper = np.percentile(boot, [tail, 100 - tail], axis=0)
    totals_a, totals_n = attributed.sum(axis=0), shown.sum(axis=0)
    facts = dict(curve.provenance)
    facts.update(
        {
            "estimator": GROUP_ESTIMATOR,
            "attributed_per_group_position": {
                g: [int(x) for x in totals_a[j]] for g, j in index.items()
            },
            "shown_per_group_position": {
                g: [int(x) for x in totals_n[j]] for g, j in index.items()
            },
        }
    )
    return FittedCurve(
        curve.weights,
        curve.lower,
        curve.upper,
        facts,
        tuple((g, round(float(point[j]), 6)) for g, j in index.items()),
        tuple(float(lower[j]) for j in index.values()),
        tuple(float(upper[j]) for j in index.values()),
    )
