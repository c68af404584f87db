"""The amortized ranker's frontier: spread across documents against relevance over a stream.

docs/SPEC.md item 6 ("Spread") and "The study" → Over many rankings. One implementation for the
study's report (``table_amortized_frontier.md``, ``figures/amortized_frontier.png`` and a
section of ``report.md``) and ``benchmarks/bench_amortized.py`` (``--frontier``, over shuffled
orders as well).

Each setting ranks the pools once each, in order, as one stream (the amortized ranker on a
fresh in-memory ledger, built as the study builds it with the setting's parameters on top).
Before each pool is ranked, ``samples`` rankings are drawn from the state the stream has
reached (``ranker.sample`` with ``rng = (trial seed, 26)``, which adds nothing to the ledger);
then the pool is ranked with ``rng = trial seed``, as the study's trial ranked it (so the
defaults' stream is the study's amortized stream, ranking for ranking). Per setting: the stream
disparity (amortized disparity, docs/SPEC.md "Metrics over many rankings"), nDCG@k loss against
``standard``, the mean document-level expected-exposure loss (EE-L,
:func:`~fairrag_core.metrics.document_expected_exposure`, relevance = the trial's topic), the
median number of distinct top-k lists per pool and the mean entropy of rank 1 (bits).

Goals (issue 26), against ``representative_stochastic``: stream disparity <
:data:`SPREAD_DISPARITY` (in every order), document EE-L no worse than its EE-L, nDCG@k loss at
most :data:`SPREAD_LOSS_RATIO` times its loss (means over the orders).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fairrag_core import Ranker, configure_ranker
from fairrag_core.blocks import Block, Markup, Paragraph, Table, markdown
from fairrag_core.metrics import (
    amortized_disparity,
    amortized_exposure_shares,
    document_expected_exposure,
    exposure_disparity,
    ndcg_at_k,
)
from fairrag_core.rankers.amortized import DEFAULT_ALPHA, DEFAULT_SPREAD

from .dataset import StudyDataset
from .plan import Trial
from .pools import QuestionPool
from .rankers import ranker_params

__all__ = [
    "REFERENCE",
    "SPREAD_DISPARITY",
    "SPREAD_LOSS_RATIO",
    "STUDY_SETTINGS",
    "Frontier",
    "FrontierRow",
    "amortized_frontier",
    "build_setting",
    "draw_frontier",
    "frontier_blocks",
    "frontier_markdown",
    "run_stream",
    "setting_label",
    "setting_words",
    "shuffled",
]

SPREAD_DISPARITY = 0.01
"""Issue 26: the stream disparity every order must stay under."""
SPREAD_LOSS_RATIO = 0.65
"""Issue 26: nDCG@k loss at most this times representative_stochastic's."""
REFERENCE = "representative_stochastic"
"""The ranker the goals are read against."""
SAMPLE_STREAM = 26
"""The second word of every draw's seed, ``(trial seed, 26)``: other noise than the ranking's."""

Setting = Mapping[str, float | None]

STUDY_SETTINGS: tuple[dict[str, float | None], ...] = (
    {"alpha": DEFAULT_ALPHA, "spread": DEFAULT_SPREAD},
    {"alpha": 8.0, "spread": None},
    {"alpha": 4.0, "spread": None},
    {"alpha": 6.5, "spread": 4.0},
    {"alpha": 8.0, "spread": 4.0},
)
"""The amortized settings the study's report measures: the defaults (alpha 7, spread 4), the
old defaults (alpha 8 without spread), alpha 4 without spread (its spread at a higher loss), and
alpha 6.5 and 8 with spread 4 (either side of the defaults)."""


def setting_label(params: Setting) -> str:
    """``amortized alpha=7 spread=4`` (``spread=none``: without spread)."""
    return "amortized" + "".join(
        f" {key}={'none' if value is None else f'{value:g}'}" for key, value in params.items()
    )


def build_setting(
    name: str, params: Setting, *, dataset: StudyDataset, seed: int, alpha: float
) -> Ranker:
    """A fresh ranker ``name`` as the study builds it (:func:`~fairrag_study.many_rankings.
    ranker_params`, the data set's target, ``seed``) with ``params`` on top; an amortized
    ranker gets a new in-memory ledger."""
    merged = {**ranker_params(name, alpha=alpha, dataset=dataset), **params}
    return configure_ranker(name, **dataset.target_arguments(), seed=seed, params=merged)


def run_stream(
    ranker: Ranker,
    pools: Sequence[QuestionPool],
    k: int,
    *,
    target: Mapping[str, object],
    samples: int = 0,
) -> dict[str, float]:
    """One stream: every pool once, in order (module docstring). ``target`` is the data set's
    ``target_arguments()``; ``stream_share`` is the protected group's share of the stream's
    exposure (NaN without one).

    With ``samples`` > 0, also the spread at each pool: ``distinct`` the median number of
    distinct lists among the draws, ``entropy`` the mean entropy of rank 1 in bits and
    ``ee_loss`` the mean document-level EE-L (NaN without samples)."""
    stream, disparities, ndcgs = [], [], []
    distinct, entropies, ee_losses = [], [], []
    for pool in pools:
        if samples:
            drawn = ranker.sample(
                pool.scores,
                pool.groups,
                k,
                samples,
                rng=np.random.default_rng((pool.trial.seed, SAMPLE_STREAM)),
            )
            distinct.append(len({tuple(row) for row in drawn.tolist()}))
            _, counts = np.unique(drawn[:, 0], return_counts=True)
            p = counts / counts.sum()
            entropies.append(float(-(p * np.log2(p)).sum()))
            ee_losses.append(document_expected_exposure(drawn, pool.relevant.astype(float)).loss)
        ranking = ranker.rank(pool.scores, pool.groups, k, rng=pool.trial.seed)
        shown = [pool.groups[i] for i in ranking.tolist()]
        stream.append(shown)
        disparities.append(exposure_disparity(shown, **target))  # type: ignore[arg-type]
        ndcgs.append(ndcg_at_k(pool.relevant[ranking], k, n_relevant=pool.n_relevant))
    shares = amortized_exposure_shares(stream, **target)  # type: ignore[arg-type]
    protected = target.get("protected")
    return {
        "amortized_disparity": amortized_disparity(stream, **target),  # type: ignore[arg-type]
        "stream_share": shares.get(protected, math.nan) if protected is not None else math.nan,
        "disparity": float(np.mean(disparities)),
        "ndcg": float(np.mean(ndcgs)),
        "distinct": float(np.median(distinct)) if samples else math.nan,
        "entropy": float(np.mean(entropies)) if samples else math.nan,
        "ee_loss": float(np.mean(ee_losses)) if samples else math.nan,
    }


def shuffled(pools: Sequence[QuestionPool], seed: int) -> list[QuestionPool]:
    """The pools in another order, each with another per-trial seed."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pools))
    reseeded = []
    for i in order.tolist():
        pool = pools[i]
        trial = Trial(**{**pool.trial.__dict__, "seed": int(rng.integers(2**32))})
        reseeded.append(dataclasses.replace(pool, trial=trial))
    return reseeded


@dataclass(frozen=True)
class FrontierRow:
    """One setting's figures, means over the orders (the disparity also its maximum)."""

    label: str
    ranker: str
    params: dict[str, float | None]
    max_disparity: float
    disparity: float
    loss: float
    """nDCG@k of ``standard`` minus this setting's, mean over the orders."""
    study_loss: float
    """The same on the first order (the study's, when the pools are in the study's order)."""
    ee_loss: float
    distinct: float
    entropy: float

    @property
    def alpha(self) -> float:
        value = self.params.get("alpha")
        return math.nan if value is None else float(value)

    @property
    def spread(self) -> float | None:
        value = self.params.get("spread")
        return None if value is None else float(value)


@dataclass(frozen=True)
class Frontier:
    """Every setting's row, the reference (:data:`REFERENCE`) first."""

    rows: list[FrontierRow]
    orders: int
    """Orders measured: the pools' own and the shuffled ones."""
    samples: int
    pools: int
    k: int

    def row(self, label: str) -> FrontierRow:
        return next(row for row in self.rows if row.label == label)

    @property
    def reference(self) -> FrontierRow:
        return self.row(REFERENCE)

    def goals(self, row: FrontierRow) -> tuple[bool, bool, bool]:
        """(stream disparity, document EE-L, nDCG loss) goals met (issue 26)."""
        reference = self.reference
        return (
            row.max_disparity < SPREAD_DISPARITY,
            row.ee_loss <= reference.ee_loss,
            row.loss <= SPREAD_LOSS_RATIO * reference.loss,
        )


def amortized_frontier(
    pools: Sequence[QuestionPool],
    k: int,
    settings: Sequence[Setting] = STUDY_SETTINGS,
    *,
    dataset: StudyDataset,
    samples: int,
    seed: int,
    alpha: float,
    orders: int = 0,
    others: Sequence[str] = (),
) -> Frontier:
    """:data:`REFERENCE`, each of ``others`` (e.g. ``stochastic``) and ``amortized`` at each
    setting, on ``pools`` in their order and ``orders`` shuffled ones (:func:`shuffled`, seeds
    1000, 1001, ...); nDCG@k loss against ``standard`` on the same order."""
    streams = [list(pools)] + [shuffled(pools, 1000 + i) for i in range(orders)]
    target = dataset.target_arguments()

    def figures(name: str, params: Setting, with_samples: int) -> list[dict[str, float]]:
        return [
            run_stream(
                build_setting(name, params, dataset=dataset, seed=seed, alpha=alpha),
                stream,
                k,
                target=target,
                samples=with_samples,
            )
            for stream in streams
        ]

    standard = [r["ndcg"] for r in figures("standard", {}, 0)]
    runs: list[tuple[str, str, Setting]] = [(REFERENCE, REFERENCE, {})]
    runs += [(name, name, {}) for name in others]
    runs += [(setting_label(params), "amortized", params) for params in settings]
    rows = []
    for label, name, params in runs:
        measured = figures(name, params, samples)
        losses = [base - r["ndcg"] for base, r in zip(standard, measured, strict=True)]
        if name != "amortized":  # the Plackett-Luce alpha it ran with, for the figure's legend
            built = ranker_params(name, alpha=alpha, dataset=dataset)
            params = {key: value for key, value in built.items() if key == "alpha"}
        rows.append(
            FrontierRow(
                label=label,
                ranker=name,
                params=dict(params),
                max_disparity=max(r["amortized_disparity"] for r in measured),
                disparity=float(np.mean([r["amortized_disparity"] for r in measured])),
                loss=float(np.mean(losses)),
                study_loss=losses[0],
                ee_loss=float(np.mean([r["ee_loss"] for r in measured])),
                distinct=float(np.mean([r["distinct"] for r in measured])),
                entropy=float(np.mean([r["entropy"] for r in measured])),
            )
        )
    return Frontier(rows, len(streams), samples, len(pools), k)


def setting_words(row: FrontierRow) -> str:
    """How the report names a row, e.g. "`amortized` alpha 7, spread 4 (defaults)"."""
    if row.ranker != "amortized":
        return f"`{row.ranker}` (the reference)" if row.label == REFERENCE else f"`{row.ranker}`"
    spread = "no spread" if row.spread is None else f"spread {row.spread:g}"
    words = f"`amortized` alpha {row.alpha:g}, {spread}"
    if row.params == {"alpha": DEFAULT_ALPHA, "spread": DEFAULT_SPREAD}:
        words += " (defaults)"
    elif row.params == {"alpha": 8.0, "spread": None}:
        words += " (old defaults)"
    return words


def frontier_blocks(frontier: Frontier) -> list[Block]:
    """The frontier as report blocks: a paragraph saying how it was measured, then a table (one
    row per setting, each goal met or not)."""
    reference, k = frontier.reference, frontier.k
    over = (
        "the pools in the study's order"
        if frontier.orders == 1
        else f"the study's order and {frontier.orders - 1} shuffled ones (means)"
    )
    method = (
        f"Each setting ranks the {frontier.pools} pools once each, in order, as one stream "
        f"(amortized: a fresh in-memory ledger); before each pool, {frontier.samples} rankings "
        "are drawn (not served) from the state the stream reached. Over "
        f"{over}. Goals (issue 26): stream disparity < {SPREAD_DISPARITY:g}, document-level "
        f"EE-L (relevance = the question's topic; lower is better) no worse than "
        f"{REFERENCE}'s, nDCG@{k} loss against standard at most {SPREAD_LOSS_RATIO:g}x "
        f"{REFERENCE}'s ({SPREAD_LOSS_RATIO * reference.loss:.4f})."
    )
    header = [
        "setting",
        f"stream disparity{' (max)' if frontier.orders > 1 else ''}",
        f"nDCG@{k} loss (x rs)",
        "document EE-L (x rs)",
        f"distinct top-{k} lists (median per pool)",
        "rank-1 entropy (bits)",
        "goals met (disparity / EE-L / loss)",
    ]
    rows = []
    for row in frontier.rows:
        disparity = f"{row.disparity:.4f}"
        if frontier.orders > 1:
            disparity += f" ({row.max_disparity:.4f})"
        rows.append(
            [
                setting_words(row),
                disparity,
                f"{row.loss:.4f} ({_ratio(row.loss, reference.loss)})",
                f"{row.ee_loss:.3f} ({_ratio(row.ee_loss, reference.ee_loss)})",
                f"{row.distinct:g}",
                f"{row.entropy:.2f}",
                " / ".join("yes" if met else "no" for met in frontier.goals(row)),
            ]
        )
    table = Table(
        [Markup(h) for h in header], [[Markup(c) for c in r] for r in rows], None, "lrrrrrl"
    )
    return [Paragraph(Markup(method)), table]


def frontier_markdown(frontier: Frontier) -> list[str]:
    """:func:`frontier_blocks` as Markdown lines."""
    return markdown(frontier_blocks(frontier)).splitlines()


def _ratio(value: float, reference: float) -> str:
    """``value / reference`` to two places; ``n/a`` when the reference is 0 (a small run where
    representative_stochastic lost no nDCG)."""
    return f"{value / reference:.2f}" if reference != 0 else "n/a"


def draw_frontier(frontier: Frontier, path: Path | str, title: str | None = None) -> None:
    """EE-L against nDCG@k loss, one point per setting (amortized joined by alpha, one curve per
    spread), the reference and the goals' region shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reference = frontier.reference
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    amortized = [row for row in frontier.rows if row.ranker == "amortized"]
    spreads = sorted({row.spread for row in amortized}, key=lambda s: -1.0 if s is None else s)
    fixed = {None: ("o-", "tab:blue"), 4.0: ("D--", "tab:purple")}  # as in earlier figures
    others_styles = iter([("v-.", "tab:olive"), ("P:", "tab:cyan"), ("X-.", "tab:brown")] * 4)
    for spread in spreads:
        marker, color = fixed.get(spread) or next(others_styles)
        curve = sorted((row for row in amortized if row.spread == spread), key=lambda r: r.alpha)
        name = "no spread" if spread is None else f"spread {spread:g}"
        ax.plot(
            [r.loss for r in curve],
            [r.ee_loss for r in curve],
            marker,
            color=color,
            label=f"amortized ({name}), by alpha",
        )
        for i, r in enumerate(curve):  # labels alternate above and below the curve
            ax.annotate(
                f"{r.alpha:g}",
                (r.loss, r.ee_loss),
                textcoords="offset points",
                xytext=(5, 4) if i % 2 else (-14, -12),
                color=color,
            )
    for row in amortized:
        if row.params == {"alpha": DEFAULT_ALPHA, "spread": DEFAULT_SPREAD}:
            ax.plot(row.loss, row.ee_loss, "o", markersize=14, markerfacecolor="none",
                    markeredgecolor="black", label="defaults")  # fmt: skip
    others = [row for row in frontier.rows if row.ranker != "amortized"]
    for row, (marker, color) in zip(
        others, [("s", "tab:red"), ("^", "tab:gray")] * 4, strict=False
    ):
        alpha = ranker_alpha(row)
        ax.plot(row.loss, row.ee_loss, marker, color=color, label=f"{row.label}{alpha}")
    floor = SPREAD_LOSS_RATIO * reference.loss
    ax.axvline(floor, color="tab:red", linestyle=":", linewidth=1)
    ax.axhline(reference.ee_loss, color="tab:red", linestyle=":", linewidth=1)
    ax.fill_between(
        [0, floor], 0, reference.ee_loss, color="tab:green", alpha=0.12, label="goal region"
    )
    losses = [r.loss for r in frontier.rows]
    ees = [r.ee_loss for r in frontier.rows]
    ax.set_xlim(min(0.0, *losses) * 1.1, max(1e-3, max(losses) * 1.1))
    ax.set_ylim(min(ees) * 0.9, max(min(ees) * 0.9 + 1e-3, max(ees) * 1.05))
    means = " (mean over orders)" if frontier.orders > 1 else ""
    ax.set_xlabel(f"nDCG loss against standard{means}")
    ax.set_ylabel(f"document-level EE-L (mean over pools{' and orders' if means else ''})")
    ax.set_title(title or "amortized: spread against relevance over the study's stream")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    target = Path(path)
    tmp = target.with_name(target.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(target)


def ranker_alpha(row: FrontierRow) -> str:
    """`` (alpha 4)`` for the Plackett-Luce rankers beside the curves (their study alpha)."""
    return f" (alpha {row.params['alpha']:g})" if row.params.get("alpha") is not None else ""
