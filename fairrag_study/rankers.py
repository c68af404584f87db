"""The study's rankers as it builds them: each of the core's registry with the study's
parameters (docs/SPEC.md, "The study" → Rankers): the paper's four, FA*IR (``fair``: ``p`` the
protected group's target share, significance :data:`FAIR_ALPHA`) and ``amortized`` (one stream
over the trials in trial order, on a fresh in-memory ledger per study run)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fairrag_core import Ranker, available_rankers, configure_ranker, default_study_rankers
from fairrag_core.exposure import ExposureModel
from fairrag_core.kit import describe_ranker
from fairrag_core.ledger import ExposureLedger, MemoryLedger

from .dataset import StudyDataset

__all__ = [
    "FAIR_ALPHA",
    "STREAM_KEY",
    "build_ranker",
    "describe_rankers",
    "ranker_fields",
    "ranker_params",
    "study_rankers",
]

FAIR_ALPHA = 0.1
"""FA*IR's significance level in the study (docs/SPEC.md, ranker 5: its default)."""
STREAM_KEY = "study"
"""The amortized ranker's stream in its ledger."""


def ranker_params(name: str, *, alpha: float, dataset: StudyDataset) -> dict[str, Any]:
    """The study's ``ranker_params`` for ``name`` (the core's other defaults apply).

    ``stochastic`` and ``representative_stochastic``: the study's ``alpha``. ``fair``: ``p``
    the protected group's target share (binary target) and ``alpha`` :data:`FAIR_ALPHA` (a
    significance level, not the Plackett-Luce alpha). ``amortized``: its defaults (alpha 7,
    spread 4, gain 80; docs/SPEC.md item 6), its ledger given by :func:`ranker_fields`.
    """
    if name in ("stochastic", "representative_stochastic"):
        return {"alpha": alpha}
    if name == "fair":
        share = {"p": dataset.target_share} if dataset.target_share is not None else {}
        return {**share, "alpha": FAIR_ALPHA}
    return {}


def ranker_fields(
    name: str,
    *,
    alpha: float,
    dataset: StudyDataset,
    ledger: ExposureLedger | None = None,
    exposure: str | ExposureModel | None = None,
) -> dict[str, Any]:
    """``FairRetriever`` fields for ``name``: ``ranker_params`` (with ``exposure`` when given:
    ``--exposure``), and for ``amortized`` its ``ledger`` (default a new
    :class:`~fairrag_core.ledger.MemoryLedger`) and ``ledger_key``."""
    fields: dict[str, Any] = {"ranker_params": ranker_params(name, alpha=alpha, dataset=dataset)}
    if exposure is not None:
        fields["ranker_params"] = {**fields["ranker_params"], "exposure": exposure}
    if name == "amortized":
        fields.update(ledger=MemoryLedger() if ledger is None else ledger, ledger_key=STREAM_KEY)
    return fields


def build_ranker(
    name: str,
    *,
    alpha: float,
    dataset: StudyDataset,
    seed: int,
    ledger: ExposureLedger | None = None,
    exposure: str | ExposureModel | None = None,
) -> Ranker:
    """The core ranker a study retriever of ``name`` holds (the same configuration)."""
    fields = ranker_fields(name, alpha=alpha, dataset=dataset, ledger=ledger, exposure=exposure)
    params = dict(fields.pop("ranker_params"), **fields)
    return configure_ranker(name, **dataset.target_arguments(), seed=seed, params=params)


def _unavailable(name: str, alpha: float, dataset: StudyDataset) -> str | None:
    try:
        build_ranker(name, alpha=alpha, dataset=dataset, seed=0)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def study_rankers(
    requested: Sequence[str] | None, *, alpha: float, dataset: StudyDataset
) -> tuple[tuple[str, ...], dict[str, str]]:
    """``(rankers, left out)``: the rankers a study runs, and why the others cannot.

    ``requested`` None: the rankers the registry runs by default
    (:func:`fairrag_core.default_study_rankers`) that take ``dataset``'s target (TREC: all six;
    a target of several groups leaves ``fair`` out, FA*IR being binary), with the reason for
    each one left out. Named rankers must each take the target, else ``ValueError`` naming the
    ranker, why, and the rankers that can. Only the rankers asked about are built.
    """
    names = default_study_rankers() if requested is None else list(requested)
    reasons = {name: _unavailable(name, alpha, dataset) for name in names}
    if requested is None:
        able = tuple(name for name, reason in reasons.items() if reason is None)
        return able, {name: reason for name, reason in reasons.items() if reason}
    for name in requested:
        reason = reasons.get(name)
        if reason:
            can = [n for n in available_rankers() if _unavailable(n, alpha, dataset) is None]
            raise ValueError(
                f"{name!r} cannot rank this data set's target "
                f"({dataset.target_label()}): {reason}; rankers that can: {can}"
            )
    return tuple(requested), {}


def describe_rankers(rankers: Iterable[str], *, alpha: float, dataset: StudyDataset) -> str:
    """The parameters each ranker runs with, read from the built ranker (for the report)."""
    parts = []
    for name in rankers:
        params = describe_ranker(build_ranker(name, alpha=alpha, dataset=dataset, seed=0))["params"]
        shown = {key: value for key, value in params.items() if key != "ledger_key"}
        if name == "amortized":
            shown["ledger"] = "a fresh in-memory ledger, one stream over the trials in order"
        text = ", ".join(
            f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
            for key, value in shown.items()
        )
        parts.append(f"{name} ({text})" if text else name)
    return "; ".join(parts)
