"""The study's position-curve phase (``fairrag study --position-curve N``): the generator's
P(attributed | position) measured by showing the same top-k in every cyclic shift, and the
exposure model fitted from one half of the questions and checked on the other
(docs/SPEC.md, "Exposure model" → Fitted, and "The study" → Position curve).
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fairrag_core.exposure import FittedCurve, save_fitted_curve
from fairrag_core.jsonl import JsonLinesLog
from fairrag_core.position_curve import (
    PositionRate,
    fit_curve,
    fit_group_curve,
    observation_from_record,
    position_rates,
    split_units,
)

from .data import CorpusDocument
from .dataset import StudyDataset
from .plan import Trial
from .pools import QuestionPool

__all__ = ["POSITION_CURVE_FILES", "PositionCurve", "run_position_curve"]

RECORDS_FILE = "position_curve.jsonl"
TABLE_FILE = "position_curve.md"
FIGURE_FILE = "figures/position_curve.png"
FITTED_FILE = "exposure_fitted.json"
FITTED_GROUPS_FILE = "exposure_fitted_groups.json"
POSITION_CURVE_FILES = (RECORDS_FILE, TABLE_FILE, FIGURE_FILE, FITTED_FILE, FITTED_GROUPS_FILE)
"""The files the phase writes in ``--out``."""


@dataclass(frozen=True)
class PositionCurve:
    """What the phase measured."""

    records: list[dict[str, Any]]
    rates: list[PositionRate]
    """P(attributed | position[, group]) over every answer (Wilson 95%)."""
    fitted: FittedCurve
    """Fitted on the fit half's questions."""
    held_out: FittedCurve
    """The same estimator on the held-out half (the check of the fit)."""
    fitted_groups: FittedCurve
    """Fitted on the fit half's questions, with group factors (per group)."""
    held_out_groups: FittedCurve
    """The per-group estimator on the held-out half."""
    fit_topics: tuple[str, ...]
    held_out_topics: tuple[str, ...]


def curve_questions(trials: Sequence[Trial], questions: int, seed: int) -> np.ndarray:
    """The indices of the ``questions`` trials the position curve samples (seeded), checked:
    a ``ValueError`` when they are fewer than 2 or all of one topic (the curve is fitted on
    one half of the topics and checked on the other). The study calls it as soon as its trials
    are planned, before any answer is paid for."""
    if questions < 2:
        raise ValueError(f"position_curve must be >= 2 questions (two halves), got {questions}")
    if questions > len(trials):  # never fewer than asked without a word
        raise ValueError(
            f"--position-curve {questions}: the study's trials hold {len(trials)} questions; "
            f"give at most {len(trials)}, or more --trials"
        )
    chosen = np.random.default_rng([seed, 35, 2]).permutation(len(trials))[:questions]
    topics = sorted({trials[int(i)].topic for i in chosen})
    if len(topics) < 2:
        raise ValueError(
            f"--position-curve {questions}: the questions sampled are all of one topic "
            f"({topics[0] if topics else 'none'}), and the curve is fitted on one half of the "
            "topics and checked on the other; sample more questions (--position-curve) or give "
            "more --topics"
        )
    return chosen


def run_position_curve(
    questions: int,
    pools: Sequence[QuestionPool],
    corpus: Sequence[CorpusDocument],
    llm: Any,
    *,
    dataset: StudyDataset,
    k: int,
    seed: int,
    model_name: str,
    out: Path,
    log: Callable[[str], None] = print,
    concurrency: int = 1,
) -> PositionCurve:
    """Sample ``questions`` of the trials' ``pools`` (seeded), show each one's top ``k`` by
    relevance in its ``k`` cyclic shifts (a Latin square: each document at each position once)
    through the paper's prompt to ``llm``, record each answer (``source`` ``position_curve``)
    and fit the curve on the questions of one half of the topics
    (:func:`fairrag_core.position_curve.split_units`), the other half held out.

    ``concurrency`` answers are asked at once (``--concurrency``: the local model answers
    them in one batch); the records keep the order of the questions and shifts.

    Writes :data:`POSITION_CURVE_FILES` in ``out``; returns what it measured."""
    from langchain_core.documents import Document

    from fairrag_langchain.chains import make_fair_rag_chain

    from .phases.generation import context_callbacks

    callbacks = context_callbacks(llm)
    chosen = curve_questions([pool.trial for pool in pools], questions, seed)
    by_id = {doc.doc_id: doc for doc in corpus}
    log_file = JsonLinesLog(out / RECORDS_FILE)
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    jobs = []
    for index in sorted(int(i) for i in chosen):
        pool = pools[index]
        top = [by_id[doc_id] for doc_id in pool.doc_ids[:k]]
        jobs += [(pool, shift, top[shift:] + top[:shift]) for shift in range(len(top))]

    def answer(job: tuple[QuestionPool, int, list[CorpusDocument]]) -> dict[str, Any]:
        pool, shift, order = job
        shown = [
            Document(doc.page_content, metadata=doc.metadata(), id=doc.doc_id) for doc in order
        ]
        chain = make_fair_rag_chain(
            _shown_list(shown),
            llm,
            group_key=dataset.group_key,
            **dataset.target_arguments(),
        )
        # a local model held to the paper's format learns the shown titles through these
        output = chain.invoke({"question": pool.trial.question}, {"callbacks": callbacks})
        return {
            "trial": pool.trial.index,
            "topic": pool.trial.topic,
            "question": pool.trial.question,
            "rotation": shift,
            **output["metrics"],
            "source": "position_curve",
            # the name LangChain reports, as the trials' records have it (a user trial found
            # "gpt-4o-mini" there and "openai:gpt-4o-mini" here: one model, two names)
            "model": output["metrics"].get("model") or model_name,
        }

    for record in _in_order(answer, jobs, concurrency):
        log_file.append(record)
        records.append(record)
        if len(records) % (5 * k) == 0 or len(records) == len(jobs):
            seconds = time.perf_counter() - started
            log(f"position curve: {len(records)}/{len(jobs)} answers in {seconds:.0f} s")
    reported = Counter(record["model"] for record in records).most_common(1)
    curve = _fit_halves(
        records, k=k, seed=seed, model_name=reported[0][0] if reported else model_name
    )
    save_fitted_curve(curve.fitted, out / FITTED_FILE)
    save_fitted_curve(curve.fitted_groups, out / FITTED_GROUPS_FILE)
    _write_table(out / TABLE_FILE, curve, k)
    _write_figure(out / FIGURE_FILE, curve.rates, k)
    log(
        f"position curve: fitted v = {_fmt(curve.fitted.weights)} on {len(curve.fit_topics)} "
        f"topics; written {out / FITTED_FILE} (use --exposure fitted:{out / FITTED_FILE})"
    )
    log(
        f"position curve: group factors {curve.fitted_groups.factor_of}; written "
        f"{out / FITTED_GROUPS_FILE} (use --exposure fitted:{out / FITTED_GROUPS_FILE})"
    )
    return curve


def _in_order(
    answer: Callable[[Any], dict[str, Any]], jobs: Sequence[Any], concurrency: int
) -> Iterator[dict[str, Any]]:
    """``answer(job)`` for each of ``jobs``, in their order, ``concurrency`` at a time."""
    if concurrency <= 1:
        yield from (answer(job) for job in jobs)
        return
    from langchain_core.runnables.config import ContextThreadPoolExecutor

    with ContextThreadPoolExecutor(max_workers=concurrency) as executor:
        futures = [executor.submit(answer, job) for job in jobs]
        try:
            for future in futures:
                yield future.result()
        finally:  # a failure: those not started never are
            for future in futures:
                future.cancel()


def _shown_list(shown: list[Any]) -> Any:
    """The retriever of one shift: the same documents whatever the question. A LangChain
    retriever, so that its run says what it showed (a local model held to the paper's format
    learns the titles it may cite from it: :class:`~fairrag_study.local_llm.ShownTitles`)."""
    return _list_retriever()(documents=shown)


@functools.cache
def _list_retriever() -> Any:
    """The class of :func:`_shown_list`'s retrievers (LangChain imported when first asked)."""
    from langchain_core.retrievers import BaseRetriever

    class PositionCurveList(BaseRetriever):
        documents: list[Any]

        def _get_relevant_documents(self, query: str, **_: Any) -> list[Any]:
            return list(self.documents)

    return PositionCurveList


def _fit_halves(
    records: Sequence[dict[str, Any]], *, k: int, seed: int, model_name: str
) -> PositionCurve:
    """Split by topic, fit on one half, the same estimator on the other."""
    observed = [(r["topic"], observation_from_record(r, unit_key="trial")) for r in records]
    observations = [obs for _, obs in observed if obs is not None]
    fit_topics, held_out_topics = split_units((topic for topic, _ in observed), seed)
    provenance = {
        "data": "fairrag study --position-curve (the top-k in its cyclic shifts)",
        "model": model_name,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "split": "by topic, seeded; bootstrap over questions (trials)",
        "seed": seed,
    }

    def fit(topics: tuple[str, ...], half: str, fitter: Any = fit_curve) -> FittedCurve:
        mine = [obs for topic, obs in observed if obs is not None and topic in topics]
        curve: FittedCurve = fitter(
            mine,
            k,
            seed=seed,
            provenance={**provenance, "half": half, "topics": list(topics)},
        )
        if half == "fit":
            return replace(
                curve, provenance={**curve.provenance, "held_out_topics": list(held_out_topics)}
            )
        return curve

    return PositionCurve(
        list(records),
        position_rates(observations, k),
        fit(fit_topics, "fit"),
        fit(held_out_topics, "held out"),
        fit(fit_topics, "fit", fit_group_curve),
        fit(held_out_topics, "held out", fit_group_curve),
        fit_topics,
        held_out_topics,
    )


def _fmt(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def _pct(rate: PositionRate) -> str:
    if not rate.shown:
        return "n/a"
    return f"{100 * rate.rate:.1f}% [{100 * rate.low:.1f}, {100 * rate.high:.1f}] (n={rate.shown})"


def curve_markdown(curve: PositionCurve, k: int) -> str:
    """The phase's table: P(attributed | position) per model and group (Wilson 95%), the fitted
    weights (bootstrap 95%) and the held-out half's weights."""
    groups = sorted({r.group for r in curve.rates if r.group is not None}, key=str)
    models = sorted({r.model for r in curve.rates}, key=str)
    lines = [
        "# Position curve",
        "",
        f"{len(curve.records)} answers; the top-{k} of each sampled question shown in its {k} "
        "cyclic shifts (each document once at each position). P(attributed | position): "
        "Wilson 95% intervals.",
        "",
    ]
    for model in models:
        header = ["position", "all groups", *[str(g) for g in groups]]
        lines += [f"## {model}", "", "| " + " | ".join(header) + " |"]
        lines.append("|" + "---|" * len(header))
        for position in range(1, k + 1):
            row = {r.group: r for r in curve.rates if r.model == model and r.position == position}
            cells = [_pct(row[g]) if g in row else "n/a" for g in (None, *groups)]
            lines.append(f"| {position} | " + " | ".join(cells) + " |")
        lines.append("")
    fitted, held = curve.fitted, curve.held_out
    lines += [
        "## Fitted exposure model",
        "",
        f"Fitted on {len(curve.fit_topics)} topics ({fitted.provenance.get('answers')} answers), "
        f"checked on {len(curve.held_out_topics)} held-out topics "
        f"({held.provenance.get('answers')} answers). Weights sum to 1; 95% intervals: "
        "percentile bootstrap over questions.",
        "",
        "| position | fitted v_i [95%] | held-out v_i [95%] | DCG v_i (normalised) |",
        "|---|---|---|---|",
    ]
    dcg = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = dcg / dcg.sum()
    overlap = 0
    for i in range(k):
        gap = max(fitted.lower[i], held.lower[i]) - min(fitted.upper[i], held.upper[i])
        overlap += gap <= 1e-9  # equal bounds differ in the last bit
        lines.append(
            f"| {i + 1} | {fitted.weights[i]:.3f} [{fitted.lower[i]:.3f}, {fitted.upper[i]:.3f}]"
            f" | {held.weights[i]:.3f} [{held.lower[i]:.3f}, {held.upper[i]:.3f}] "
            f"| {dcg[i]:.3f} |"
        )
    lines += ["", *_factor_lines(curve)]
    lines += [
        "",
        f"The fit's and the held-out half's 95% intervals overlap at {overlap} of {k} positions.",
        f"Fit topics: {', '.join(curve.fit_topics)}.",
        f"Held-out topics: {', '.join(curve.held_out_topics)}.",
        "",
    ]
    return "\n".join(lines)


def _factor_lines(curve: PositionCurve) -> list[str]:
    """The per-group factors of both halves (docs/SPEC.md, "Exposure model" → Fitted, per
    group)."""
    fitted, held = curve.fitted_groups, curve.held_out_groups
    lines = [
        "Per group: expected attributions of group g's entry at rank i = lambda_g * v_i "
        f"({fitted.provenance.get('estimator')}).",
        "",
        "| group | fitted lambda_g [95%] | held-out lambda_g [95%] |",
        "|---|---|---|",
    ]
    held_of = dict(
        zip(held.factor_of, zip(held.factor_lower, held.factor_upper, strict=True), strict=True)
    )
    for j, (group, factor) in enumerate(fitted.factors):
        cell = "n/a"
        if group in held_of:
            low, high = held_of[group]
            cell = f"{held.factor_of[group]:.3f} [{low:.3f}, {high:.3f}]"
        lines.append(
            f"| {group} | {factor:.3f} [{fitted.factor_lower[j]:.3f}, "
            f"{fitted.factor_upper[j]:.3f}] | {cell} |"
        )
    return lines


def _write_table(path: Path, curve: PositionCurve, k: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(curve_markdown(curve, k), encoding="utf-8")
    os.replace(tmp, path)


def _write_figure(path: Path, rates: Sequence[PositionRate], k: int) -> None:
    """P(attributed | position) with Wilson 95% error bars: every group, and each group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    series = sorted({(r.model, r.group) for r in rates}, key=lambda s: (str(s[0]), str(s[1])))
    for number, (model, group) in enumerate(series):
        mine = sorted(
            (r for r in rates if r.model == model and r.group == group), key=lambda r: r.position
        )
        x = np.array([r.position for r in mine]) + 0.06 * (number - len(series) / 2)
        y = np.array([r.rate for r in mine])
        low = np.clip(np.nan_to_num(y - np.array([r.low for r in mine])), 0, None)
        high = np.clip(np.nan_to_num(np.array([r.high for r in mine]) - y), 0, None)
        label = f"{model}: {'all groups' if group is None else group}"
        ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, label=label)
    ax.set_xticks(range(1, k + 1))
    ax.set_xlabel("position shown")
    ax.set_ylabel("P(attributed | position)")
    ax.set_ylim(0, 1)
    ax.set_title("Generator position curve (Wilson 95%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
