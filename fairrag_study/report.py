"""Study outputs: per-metric tables with t-tests, summary CSV, outliers, figures, and the report
(``report.md`` and ``report.html`` from one list of blocks, :mod:`fairrag_core.blocks`).

The report sets this run beside the paper (its four rankers, its metrics), gives every ranker's
means, the metrics over many rankings (docs/SPEC.md, "The study" → Over many rankings) with a
one-line reading of each, and, on the paper's data set, every known difference from the paper's
setting with its likely effect (:func:`differences`).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fairrag_core.blocks import (
    Block,
    Bullets,
    Figure,
    Heading,
    Markup,
    Paragraph,
    Table,
    html_page,
    markdown,
)
from fairrag_core.stats import (
    DEFAULT_ALPHA,
    Descriptive,
    critical_t,
    describe,
    describe_table_markdown,
    pairwise_t_tests,
    pairwise_table_markdown,
    zscore_outliers,
)

from .dataset import PAPER_NUMBERS, TREC_GENDER, StudyDataset
from .differences import PAPER_SETTING, RunFacts, differences, full_topics, percent
from .frontier import Frontier, draw_frontier, frontier_blocks, setting_words
from .many_rankings import TRIAL_METRICS, ManyRankings
from .position_curve import FIGURE_FILE as CURVE_FIGURE
from .position_curve import POSITION_CURVE_FILES

__all__ = [
    "METRICS",
    "OUTPUT_FILES",
    "PAPER",
    "PAPER_SETTING",
    "MetricSpec",
    "RunFacts",
    "differences",
    "full_topics",
    "metric_specs",
    "output_files",
    "write_outputs",
]


@dataclass(frozen=True)
class MetricSpec:
    key: str
    title: str
    filename: str
    percent: bool = True
    """Shown as a percentage (shares, disparities, relevance); else as a number (EE, AWRF)."""
    section: str = "paper"
    """``paper`` (the paper's metrics and ours beside them) or ``many`` (over many rankings)."""


MANY_RANKINGS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "ee_loss",
        "Expected exposure EE-L = sum_g (E_g - T_g)^2 over N sampled rankings per question "
        "(0 = on target in expectation)",
        "table_ee_loss.md",
        percent=False,
        section="many",
    ),
    MetricSpec(
        "ee_disparity",
        "Expected exposure EE-D = sum_g E_g^2 (lower = exposure spread more equally)",
        "table_ee_disparity.md",
        percent=False,
        section="many",
    ),
    MetricSpec(
        "ee_relevance",
        "Expected exposure EE-R = sum_g E_g T_g (higher = exposure where the target puts it)",
        "table_ee_relevance.md",
        percent=False,
        section="many",
    ),
    MetricSpec(
        "awrf",
        "AWRF = 1 - JSD(a, target)^2 of the shown ranking (TREC 2022; 1 = on target)",
        "table_awrf.md",
        percent=False,
        section="many",
    ),
    MetricSpec(
        "trec_ndcg",
        "TREC 2022 nDCG of the shown ranking (discount 1/log2(max(i, 2)), topic relevance)",
        "table_trec_ndcg.md",
        percent=False,
        section="many",
    ),
    MetricSpec(
        "trec_score",
        "TREC 2022 Task 1 score = nDCG x AWRF of the shown ranking",
        "table_trec_score.md",
        percent=False,
        section="many",
    ),
)
"""The per-trial metrics over many rankings (:data:`fairrag_study.many_rankings.TRIAL_METRICS`)."""
AMORTIZED = MetricSpec(
    "amortized_disparity",
    "Amortized disparity of each ranker's stream of shown rankings, in trial order",
    "table_amortized_disparity.md",
    section="many",
)
"""One value per ranker (its stream), not a mean over trials: no t-test."""
TRIAL_METRICS_FILE = "trial_metrics.csv"
FRONTIER_FILE = "table_amortized_frontier.md"
FRONTIER_FIGURE = "figures/amortized_frontier.png"
FIGURES = (
    "figures/retrieval.png",
    "figures/generation.png",
    "figures/many_rankings.png",
    FRONTIER_FIGURE,
)


def metric_specs(dataset: StudyDataset = TREC_GENDER) -> tuple[MetricSpec, ...]:
    """The study's tables for ``dataset``: with one protected group, its exposure share and the
    generation metrics about it (the paper's tables); with a full target, one exposure share
    table per group."""
    return (*_exposure_specs(dataset), *_RELEVANCE, *_generation_specs(dataset), *MANY_RANKINGS)


def _exposure_specs(dataset: StudyDataset) -> list[MetricSpec]:
    """Exposure disparity, then the protected group's share and (full target) each group's."""
    protected = dataset.protected
    if dataset.target is None:
        disparity = f"|ES_{protected} - {dataset.target_share:g}|"
    else:
        disparity = "1/2 sum_g |ES_g - target_g| (" + dataset.target_label() + ")"
    specs = [
        MetricSpec(
            "exposure_disparity",
            f"Table 1: exposure disparity {disparity}",
            "table1_exposure_disparity.md",
        )
    ]
    if protected is not None:
        specs.append(
            MetricSpec(
                "exposure_share",
                f"Table 2: {protected} exposure share ES_{protected}",
                "table2_exposure_share.md",
            )
        )
    if dataset.target is not None:
        specs.extend(
            MetricSpec(
                f"exposure_share_{group}",
                f"Exposure share of {group} ES_{group} (target {share:g})",
                f"table_exposure_share_{_file_safe(group)}.md",
            )
            for group, share in dataset.target.items()
        )
    return specs


_RELEVANCE = (
    MetricSpec("precision_at_k", "Retrieval relevance: P@k", "table_precision_at_k.md"),
    MetricSpec("ndcg_at_k", "Retrieval relevance: nDCG@k", "table_ndcg_at_k.md"),
)
_GROUP_FREE_GENERATION = (
    MetricSpec("groundedness", "Utility (groundedness)", "table_groundedness.md"),
    MetricSpec(
        "attributed_groundedness",
        "Attributed groundedness (bullets attributed to a shown document about the person "
        "they name)",
        "table_attributed_groundedness.md",
    ),
    # issue 33: the same metrics over explicit citations alone, and citation precision
    MetricSpec(
        "attributed_groundedness_explicit",
        "Attributed groundedness, explicit citations alone",
        "table_attributed_groundedness_explicit.md",
    ),
    MetricSpec(
        "attributed_citation_precision",
        "Attributed citation precision (credited citations naming their person, of all)",
        "table_attributed_citation_precision.md",
    ),
)
"""The generation metrics about no group (every data set has them)."""
_GENERATION_ORDER = (
    "generation_parity",
    "grounded_generation_parity",
    "groundedness",
    "attributed_generation_parity",
    "attributed_groundedness",
    "attributed_generation_parity_explicit",
    "attributed_groundedness_explicit",
    "attributed_citation_precision",
    "fairness_gap",
    "fairness_gap_magnitude",
    "attributed_fairness_gap",
    "attributed_fairness_gap_explicit",
)
"""The order of the generation tables (those about the protected group among the others)."""


def _generation_specs(dataset: StudyDataset) -> list[MetricSpec]:
    """The generation metrics, in :data:`_GENERATION_ORDER`: those about the protected group
    only when the data set has one."""
    specs = {spec.key: spec for spec in _GROUP_FREE_GENERATION}
    if dataset.protected is not None:
        specs.update({spec.key: spec for spec in _protected_generation_specs(dataset)})
    return [specs[key] for key in _GENERATION_ORDER if key in specs]


def _protected_generation_specs(dataset: StudyDataset) -> list[MetricSpec]:
    """Generation parity and the fairness gaps, about the data set's protected group."""
    protected, who = dataset.protected, dataset.protected_noun or dataset.protected
    goal = f"{dataset.target_share if dataset.target is None else dataset.target[str(protected)]:g}"
    return [
        MetricSpec(
            "generation_parity",
            f"Generation demographic parity (share of valid citations to {who})",
            "table_generation_parity.md",
        ),
        MetricSpec(
            "grounded_generation_parity",
            f"Grounded generation parity (share of citations naming their document's person, "
            f"to {who})",
            "table_grounded_generation_parity.md",
        ),
        MetricSpec(
            "attributed_generation_parity",
            f"Attributed generation parity (share of attributed sources, any citation style "
            f"or named, to {who})",
            "table_attributed_generation_parity.md",
        ),
        MetricSpec(
            "attributed_generation_parity_explicit",
            f"Attributed generation parity, explicit citations alone (to {who})",
            "table_attributed_generation_parity_explicit.md",
        ),
        MetricSpec("fairness_gap", f"Fairness gap GDP - ES_{protected}", "table_fairness_gap.md"),
        MetricSpec(
            "fairness_gap_magnitude",
            f"Fairness gap magnitude |GDP - {goal}| - |ES_{protected} - {goal}|",
            "table_fairness_gap_magnitude.md",
        ),
        MetricSpec(
            "attributed_fairness_gap",
            f"Attributed fairness gap AGDP - ES_{protected}",
            "table_attributed_fairness_gap.md",
        ),
        MetricSpec(
            "attributed_fairness_gap_explicit",
            f"Attributed fairness gap, explicit citations alone (AGDP_explicit - ES_{protected})",
            "table_attributed_fairness_gap_explicit.md",
        ),
    ]


def _file_safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label)


METRICS: tuple[MetricSpec, ...] = metric_specs(TREC_GENDER)
"""The study's per-trial tables on the paper's data set (the TREC gender data)."""


def output_files(dataset: StudyDataset = TREC_GENDER) -> tuple[str, ...]:
    """The files :func:`write_outputs` may write for ``dataset`` (relative paths): its
    per-metric tables (one exposure-share table per group on a data set of several groups)."""
    return (
        "summary.csv",
        "report.md",
        "report.html",
        "outliers.md",
        TRIAL_METRICS_FILE,
        AMORTIZED.filename,
        FRONTIER_FILE,
        *(spec.filename for spec in metric_specs(dataset)),
        *FIGURES,
    )


OUTPUT_FILES: tuple[str, ...] = output_files(TREC_GENDER)
"""The files :func:`write_outputs` may write on the paper's data set (relative paths)."""

PAPER: dict[str, dict[str, float]] = PAPER_NUMBERS
"""The paper's reported means (docs/SPEC.md, "The study"), as fractions (``TREC_GENDER.paper``)."""


def _value(record: Mapping, key: str) -> Any:
    """A record's metric; ``exposure_share_<group>`` is read from its ``exposure_by_group``."""
    if key in record or not key.startswith("exposure_share_"):
        return record.get(key)
    by_group = record.get("exposure_by_group")
    if by_group is None:
        return None
    return by_group.get(key.removeprefix("exposure_share_"), 0.0)


def _samples(records: Sequence[Mapping], rankers: Sequence[str], key: str) -> dict[str, np.ndarray]:
    out = {}
    for ranker in rankers:
        values = [_value(r, key) for r in records if r["ranker"] == ranker]
        out[ranker] = np.array([math.nan if v is None else float(v) for v in values], dtype=float)
    return out


def metric_table(
    spec: MetricSpec, samples: Mapping[str, np.ndarray], alpha: float = DEFAULT_ALPHA
) -> tuple[str, dict[str, Descriptive]]:
    """Markdown: descriptive statistics per ranker, then every pairwise Student t-test."""
    descriptives = {name: describe(values) for name, values in samples.items()}
    parts = [f"# {spec.title}\n", describe_table_markdown(descriptives, name_header="ranker")]
    usable = {name: v for name, v in samples.items() if descriptives[name].n >= 2}
    skipped = sorted(set(samples) - set(usable))
    if len(usable) >= 2 and _constant(usable.values()):
        parts.append(
            "\nEvery value is the same up to floating-point rounding, for every ranker: no "
            "t-test (it would compare rounding errors, not rankers).\n"
        )
    elif len(usable) >= 2:
        rows = pairwise_t_tests(usable, alpha=alpha)
        df = rows[0].df
        parts.append(
            f"\nPairwise independent two-sample Student t-tests (pooled variance, two-tailed, "
            f"alpha = {alpha}; critical t = {critical_t(df, alpha):.4f} at df {df} for the "
            "first pair; each row gives its own):\n"
        )
        parts.append(pairwise_table_markdown(rows))
    if skipped:
        parts.append(f"\nNo t-test for {', '.join(skipped)}: fewer than 2 finite values.\n")
    return "\n".join(parts), descriptives


def _constant(samples: Iterable[np.ndarray]) -> bool:
    """Whether every finite value of every sample equals the others up to rounding (1e-9
    relative), e.g. EE-R under a parity target, which is the same for every ranking."""
    values = np.concatenate([np.asarray(v, dtype=float) for v in samples])
    values = values[np.isfinite(values)]
    if values.size == 0:
        return False
    return bool(values.max() - values.min() <= 1e-9 * max(1.0, float(np.abs(values).max())))


def write_outputs(
    out_dir: Path,
    records: Sequence[Mapping],
    rankers: Sequence[str],
    *,
    config: Mapping[str, object],
    generation_note: str | None,
    alpha: float = DEFAULT_ALPHA,
    dataset: StudyDataset = TREC_GENDER,
    many: ManyRankings | None = None,
    facts: RunFacts | None = None,
) -> dict[str, dict[str, Descriptive]]:
    """Write every table, the summary CSV, outliers, figures, ``report.md`` and ``report.html``
    (the same blocks, :mod:`fairrag_core.blocks`; figures embedded) into ``out_dir``.

    Tables, figures and the report name ``dataset``'s groups and target; the paper comparison
    (the paper's four rankers) and the differences from the paper (read from ``facts`` and
    ``config``'s ``text``, default ``csv``) appear only when the data set has the paper's
    numbers. ``many`` adds the metrics over many rankings: its per-trial values join the
    records' metrics (tables, t-tests, outliers, ``trial_metrics.csv``), and each ranker's
    stream gives its amortized disparity (one value per ranker, ``aggregate`` ``stream`` in
    ``summary.csv``).
    """
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    rows = _with_trial_metrics(records, many)
    present = [
        spec for spec in metric_specs(dataset) if any(_value(r, spec.key) is not None for r in rows)
    ]
    results = _write_metric_tables(out_dir, rows, rankers, present, alpha)
    if many is not None:
        results[AMORTIZED.key] = _write_many_rankings(out_dir, many, rankers, dataset)
    _atomic_write(out_dir / "summary.csv", _summary_csv(results))
    _atomic_write(out_dir / "outliers.md", _outliers_markdown(rows, rankers, present))
    run = _ReportRun(
        results=results,
        rankers=rankers,
        config=config,
        generation_note=generation_note,
        specs=present,
        dataset=dataset,
        significance=_significance(rows, rankers, alpha, dataset),
        many=many,
        facts=facts,
        diagnosis=generation_diagnosis(records, rankers),
        position_curve=tuple(f for f in POSITION_CURVE_FILES if (out_dir / f).is_file()),
    )
    blocks = _report_blocks(run, _draw_figures(out_dir, run))
    _atomic_write(out_dir / "report.md", markdown(blocks, out_dir))
    _atomic_write(out_dir / "report.html", html_page(blocks))
    return results


def _write_metric_tables(
    out_dir: Path,
    rows: Sequence[Mapping],
    rankers: Sequence[str],
    specs: Sequence[MetricSpec],
    alpha: float,
) -> dict[str, dict[str, Descriptive]]:
    """One table per metric of ``specs`` (descriptives and t-tests); the descriptives."""
    results: dict[str, dict[str, Descriptive]] = {}
    for spec in specs:
        text, descriptives = metric_table(spec, _samples(rows, rankers, spec.key), alpha)
        _atomic_write(out_dir / spec.filename, text)
        results[spec.key] = descriptives
    return results


def _write_many_rankings(
    out_dir: Path, many: ManyRankings, rankers: Sequence[str], dataset: StudyDataset
) -> dict[str, Descriptive]:
    """``trial_metrics.csv``, the amortized-disparity table, the frontier's table; each
    ranker's stream disparity (one value: its mean, no sd)."""
    _atomic_write(out_dir / TRIAL_METRICS_FILE, _trial_metrics_csv(many))
    _atomic_write(out_dir / AMORTIZED.filename, _amortized_table(many, rankers, dataset))
    if many.frontier is not None:
        _atomic_write(out_dir / FRONTIER_FILE, _frontier_table(many.frontier))
    return {
        name: Descriptive(many.streams[name].disparity, math.nan, many.streams[name].rankings, 0)
        for name in rankers
        if name in many.streams
    }


FIGURE_CAPTIONS = {
    "figures/retrieval.png": "Exposure per ranker: exposure disparity and each share (bars: "
    "this run, mean ± sd; diamonds: the paper's means; dashed line: the target)",
    "figures/generation.png": "Generation metrics per ranker (bars: this run, mean ± sd; "
    "diamonds: the paper's means; dashed line: the target)",
    "figures/many_rankings.png": "Metrics over many rankings per ranker (means over trials; "
    "amortized disparity: one value per stream)",
    FRONTIER_FIGURE: "The amortized ranker's frontier: stream disparity, relevance lost and "
    "document-level expected exposure per setting",
    CURVE_FIGURE: "The generator's position curve (--position-curve): the share of answers "
    "attributing the entry shown at each position, over permuted top-k lists, with 95% "
    "intervals",
}
"""What each of :data:`FIGURES` shows (its caption in the report, on the paper's data set)."""
_PAPER_MARKS = "; diamonds: the paper's means"
"""Left out of the captions on a data set without the paper's numbers."""


def _draw_figures(out_dir: Path, run: _ReportRun) -> list[Figure]:
    """Draw the figures this run has data for; each as a report block."""
    results, rankers, dataset = run.results, run.rankers, run.dataset
    shares = (
        ("exposure_share",)
        if dataset.target is None
        else tuple(f"exposure_share_{group}" for group in dataset.target)
    )
    drawn = ["figures/retrieval.png"]
    _plot(out_dir / drawn[0], results, rankers, ("exposure_disparity", *shares), dataset)
    if "generation_parity" in results or "attributed_groundedness" in results:
        keys = [key for key in GENERATION_FIGURE if key in results]
        note = None if run.diagnosis is None else run.diagnosis.figure_note
        drawn.append("figures/generation.png")
        _plot(out_dir / drawn[-1], results, rankers, keys, dataset, note=note)
    if run.many is not None:
        many_keys = [key for key in MANY_FIGURE if key in results]
        drawn.append("figures/many_rankings.png")
        _plot(out_dir / drawn[-1], results, rankers, many_keys, dataset, columns=3)
        if run.many.frontier is not None:
            drawn.append(FRONTIER_FIGURE)
            draw_frontier(run.many.frontier, out_dir / FRONTIER_FIGURE)
    if CURVE_FIGURE in run.position_curve:  # drawn by its phase
        drawn.append(CURVE_FIGURE)
    captions = {name: FIGURE_CAPTIONS[name] for name in drawn}
    if dataset.paper is None:
        captions = {name: text.replace(_PAPER_MARKS, "") for name, text in captions.items()}
    return [Figure(out_dir / name, caption) for name, caption in captions.items()]


GENERATION_FIGURE = (
    "generation_parity",
    "attributed_generation_parity",
    "groundedness",
    "attributed_groundedness",
)
"""The panels of ``figures/generation.png`` (those measured)."""


@dataclass(frozen=True)
class _ReportRun:
    """What the report reads about the run."""

    results: Mapping[str, Mapping[str, Descriptive]]
    rankers: Sequence[str]
    config: Mapping[str, object]
    generation_note: str | None
    specs: Sequence[MetricSpec]
    """The metrics measured, in table order."""
    dataset: StudyDataset
    significance: list[str]
    """The exposure-disparity t-test pattern, as bullets of the reading."""
    many: ManyRankings | None
    facts: RunFacts | None
    diagnosis: GenerationDiagnosis | None
    position_curve: tuple[str, ...] = ()
    """The files the position-curve phase wrote in ``--out`` (``--position-curve``)."""


@dataclass(frozen=True)
class GenerationDiagnosis:
    """Why the generation metrics are n/a or thin: what the answers cited, and in which style."""

    answers: int
    """Records with an answer."""
    follows: int
    """Answers with a citation in the requested format, ``(DocTitle: X)``."""
    paper_measured: int
    """Answers whose paper generation parity is measured (a valid DocTitle citation)."""
    attributed_measured: int
    """Answers whose attributed generation parity is measured (something attributed)."""
    styles: dict[str, int]
    """Answers per citation style found (an answer may have several)."""
    nothing: int
    """Answers with no citation in any style and no context person named."""
    per_ranker: dict[str, tuple[int, int, int]]
    """``(answers, paper measured, attributed measured)`` per ranker."""

    @property
    def figure_note(self) -> str:
        styles = ", ".join(f"{name} {n}" for name, n in self.styles.items()) or "none"
        return (
            f"Paper's parity measured on {self.paper_measured} of {self.answers} answers, "
            f"attributed parity on {self.attributed_measured}; {self.answers - self.follows} "
            f"answers cited nothing in the (DocTitle: X) format; styles found: {styles}; "
            f"{self.nothing} attributed to nothing."
        )

    def blocks(self) -> list[Block]:
        """The report's section: counts per ranker, styles, and what to change."""
        out: list[Block] = [
            _heading("Why the generation metrics are what they are"),
            _paragraph(
                f"Of {self.answers} answers, {self.follows} cited in the requested format "
                f"`<Person Name> (DocTitle: <exact Title from context>)`; the paper's generation "
                f"parity is measured on {self.paper_measured} (a citation whose title was "
                f"shown), the attributed generation parity (every citation style, and people "
                f"named without a citation) on {self.attributed_measured}; {self.nothing} "
                "answers cite nothing and name nobody shown."
            ),
            _table(
                ["citation style (docs/SPEC.md, Attribution)", "answers"],
                [[name, str(n)] for name, n in self.styles.items()],
                "lr",
            ),
            _table(
                ["ranker", "answers", "paper parity measured", "attributed parity measured"],
                [[ranker, *map(str, counts)] for ranker, counts in self.per_ranker.items()],
                "lrrr",
            ),
        ]
        advice = self._advice()
        if advice:
            out += [_paragraph("What this means and what to change:"), _bullets(advice)]
        return out

    def _advice(self) -> list[str]:
        advice = []
        if self.paper_measured < self.answers:
            advice.append(
                f"{self.answers - self.paper_measured} answers have no paper generation parity "
                "(n/a): they cite no shown title in the requested format. Read the attributed "
                "metrics for them, or use a generator that follows the format (the paper's "
                "gpt-4o-mini does; a 135M model does not)."
            )
        if self.styles.get("implicit", 0) > 0:
            advice.append(
                f"{self.styles['implicit']} answers name shown people without citing them "
                "(`implicit`): attributed by the name rule, which reads each document's title "
                "and the names its own text gives."
            )
        if self.nothing:
            advice.append(
                f"{self.nothing} answers attribute nothing: they cite no shown document and "
                "name nobody shown (empty, off-topic or invented people); check a few in "
                "`records.jsonl` (`answer`), raise the token cap (`--max-tokens`, "
                "`StudyConfig.max_tokens`) if they stop mid-answer."
            )
        return advice


def generation_diagnosis(
    records: Sequence[Mapping[str, Any]], rankers: Sequence[str]
) -> GenerationDiagnosis | None:
    """What the answers cited (docs/SPEC.md, "Attribution"), or None without answers."""
    answered = [r for r in records if isinstance(r.get("answer"), str)]
    if not answered:
        return None

    def measured(record: Mapping[str, Any], key: str) -> bool:
        value = record.get(key)
        return isinstance(value, (int, float)) and math.isfinite(value)

    styles: Counter[str] = Counter()
    for record in answered:
        styles.update(record.get("citation_styles") or [])
    per_ranker = {}
    for ranker in rankers:
        mine = [r for r in answered if r.get("ranker") == ranker]
        if mine:
            per_ranker[ranker] = (
                len(mine),
                sum(measured(r, "generation_parity") for r in mine),
                sum(measured(r, "attributed_generation_parity") for r in mine),
            )
    return GenerationDiagnosis(
        answers=len(answered),
        follows=sum(bool(r.get("follows_citation_format")) for r in answered),
        paper_measured=sum(measured(r, "generation_parity") for r in answered),
        attributed_measured=sum(measured(r, "attributed_generation_parity") for r in answered),
        styles=dict(styles.most_common()),
        nothing=sum(not r.get("attributed_sources") for r in answered),
        per_ranker=per_ranker,
    )


MANY_FIGURE = (
    "ee_loss",
    "ee_disparity",
    "ee_relevance",
    "awrf",
    "trec_score",
    AMORTIZED.key,
)
"""The panels of ``figures/many_rankings.png``."""


def _with_trial_metrics(
    records: Sequence[Mapping], many: ManyRankings | None
) -> list[Mapping[str, Any]]:
    """The records, each with its trial's metrics over many rankings (when measured)."""
    if many is None:
        return list(records)
    extra = {(row["ranker"], row["trial"]): row for row in many.trials}
    joined: list[Mapping[str, Any]] = []
    for record in records:
        row = extra.get((record["ranker"], record.get("trial")), {})
        joined.append({**record, **{key: row[key] for key in TRIAL_METRICS if key in row}})
    return joined


def _trial_metrics_csv(many: ManyRankings) -> str:
    buffer = io.StringIO()
    columns = ["ranker", "trial", "samples", *TRIAL_METRICS]
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in many.trials:
        writer.writerow({key: repr(v) if isinstance(v, float) else v for key, v in row.items()})
    return buffer.getvalue()


def _amortized_table(many: ManyRankings, rankers: Sequence[str], dataset: StudyDataset) -> str:
    groups = _stream_groups(dataset)
    lines = [
        f"# {AMORTIZED.title}\n",
        "|Σ_t ES_t W_t / Σ_t W_t − target| over the rankings each ranker's trials showed, in "
        "trial order (W_t the ranking's total exposure; several groups: half the L1 distance). "
        "One value per ranker, so no t-test.\n",
        "| ranker | amortized disparity | "
        + " | ".join(f"stream share {label}" for _, label in groups)
        + " | rankings |",
        "|---|---:|" + "---:|" * len(groups) + "---:|",
    ]
    for name in rankers:
        stream = many.streams.get(name)
        if stream is None:
            continue
        shares = " | ".join(f"{stream.shares.get(key, math.nan):.4f}" for key, _ in groups)
        lines.append(f"| {name} | {stream.disparity:.4f} | {shares} | {stream.rankings} |")
    return "\n".join(lines) + "\n"


FRONTIER_TITLE = "The amortized ranker's frontier: spread against relevance (issue 26)"


def _frontier_table(frontier: Frontier) -> str:
    """``table_amortized_frontier.md``: the frontier table (:mod:`fairrag_study.frontier`)."""
    return markdown([Heading(FRONTIER_TITLE, 1), *frontier_blocks(frontier)])


def _frontier_section(frontier: Frontier) -> list[Block]:
    """The report's section: the frontier table and which settings meet the three goals."""
    amortized = [row for row in frontier.rows if row.ranker == "amortized"]
    met = [setting_words(row) for row in amortized if all(frontier.goals(row))]
    reading = (
        f"Settings meeting all three goals on this run: {', '.join(met) if met else 'none'} "
        f"(of {len(amortized)} amortized settings; figure `{FRONTIER_FIGURE}`, table "
        f"`{FRONTIER_FILE}`). One order of {frontier.pools} questions is noisy: "
        "`benchmarks/bench_amortized.py --frontier ... --orders 8` measures shuffled orders too "
        '(docs/SPEC.md item 6, "Spread").'
    )
    return [_heading(FRONTIER_TITLE), *frontier_blocks(frontier), _bullets([reading])]


def _stream_groups(dataset: StudyDataset) -> list[tuple[str, str]]:
    """``(key in Stream.shares, column label)``: the protected group (binary target) or every
    group of the target."""
    if dataset.target is not None:
        return [(str(group), group) for group in dataset.target]
    return [(str(dataset.protected), str(dataset.protected))]


def _significance(
    records: Sequence[Mapping], rankers: Sequence[str], alpha: float, dataset: StudyDataset
) -> list[str]:
    """The exposure-disparity t-test pattern (bullets; none without two rankers of two values
    or more); on the paper's data also among its four rankers, in the paper's terms."""
    samples = _samples(records, rankers, "exposure_disparity")
    if len(samples) < 2 or any(describe(v).n < 2 for v in samples.values()):
        return []
    items = [_pattern(samples, alpha, f"Exposure disparity, pairwise t-tests at alpha = {alpha}")]
    paper_rankers = _paper_rankers(rankers, dataset)
    if dataset.paper is not None and len(paper_rankers) == 4:
        among = _pattern(
            {name: samples[name] for name in paper_rankers}, alpha, "Among the paper's four"
        )
        if len(rankers) > 4:
            items.append(among)
        items[-1] += " The paper: five of six significant, standard vs stochastic not."
    return items


def _pattern(samples: Mapping[str, np.ndarray], alpha: float, lead: str) -> str:
    rows = pairwise_t_tests(samples, alpha=alpha)
    significant = [f"{r.a} vs {r.b}" for r in rows if r.significant]
    not_significant = [f"{r.a} vs {r.b}" for r in rows if not r.significant]
    text = f"{lead}: {len(significant)} of {len(rows)} significant"
    if not_significant:
        text += f"; not significant: {', '.join(not_significant)}"
    return text + "."


def _paper_rankers(rankers: Sequence[str], dataset: StudyDataset) -> list[str]:
    """The run's rankers the paper has numbers for (its four), in the run's order."""
    if dataset.paper is None:
        return []
    covered = dataset.paper.get("exposure_disparity", {})
    return [name for name in rankers if name in covered]


def _atomic_write(path: Path, text: str) -> None:
    """Write a whole file or nothing: an interrupted run never leaves a half-written table."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _summary_csv(results: Mapping[str, Mapping[str, Descriptive]]) -> str:
    """One row per metric and ranker. ``aggregate`` says what ``mean`` is: ``mean`` over the
    trials (``n`` of them), or ``stream``, one value over the ranker's stream of ``n`` shown
    rankings (amortized disparity; no ``std``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["metric", "ranker", "mean", "std", "n", "n_missing", "aggregate"])
    for metric, per_ranker in results.items():
        aggregate = "stream" if metric == AMORTIZED.key else "mean"
        for ranker, d in per_ranker.items():
            writer.writerow(
                [metric, ranker, repr(d.mean), repr(d.std), d.n, d.n_missing, aggregate]
            )
    return buffer.getvalue()


def _outliers_markdown(
    records: Sequence[Mapping], rankers: Sequence[str], specs: Sequence[MetricSpec]
) -> str:
    lines = [
        "# Outliers (|z| > 3 within each ranker and metric)\n",
        "| metric | ranker | trial | value | z |",
        "|---|---|---:|---:|---:|",
    ]
    count = 0
    for spec in specs:
        for ranker in rankers:
            rows = [r for r in records if r["ranker"] == ranker]
            found = [_value(r, spec.key) for r in rows]
            values = np.array([math.nan if v is None else float(v) for v in found])
            finite = values[np.isfinite(values)]
            for i in zscore_outliers(values).tolist():
                z = (values[i] - finite.mean()) / finite.std(ddof=1)
                lines.append(
                    f"| {spec.key} | {ranker} | {rows[i]['trial']} | {values[i]:.4f} | {z:.2f} |"
                )
                count += 1
    lines.append(f"\n{count} outlier(s).")
    return "\n".join(lines) + "\n"


def _plot(
    path: Path,
    results: Mapping[str, Mapping[str, Descriptive]],
    rankers: Sequence[str],
    keys: Sequence[str],
    dataset: StudyDataset,
    columns: int | None = None,
    note: str | None = None,
) -> None:
    """Bars of each ranker's mean (± sd where there is one) per metric, the paper's means as
    diamonds and the target as a dashed line where they exist; ``columns`` panels a row;
    ``note`` is written under the panels (why a metric is n/a or thin)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = columns or len(keys)
    grid_rows = math.ceil(len(keys) / columns)
    fig, axes = plt.subplots(grid_rows, columns, figsize=(5.2 * columns, 4.2 * grid_rows))
    panels = list(np.atleast_1d(axes).ravel())
    for ax in panels[len(keys) :]:
        ax.set_visible(False)
    for ax, key in zip(panels, keys, strict=False):
        per = results.get(key, {})
        means = [per[r].mean if r in per else math.nan for r in rankers]
        errors = [per[r].std if r in per else math.nan for r in rankers]
        x = np.arange(len(rankers))
        stream = key == AMORTIZED.key
        ax.bar(
            x,
            means,
            yerr=None if stream else np.nan_to_num(errors),
            capsize=4,
            color="#4C72B0",
            label="this run (one stream)" if stream else "this run (mean ± sd)",
        )
        if stream and "exposure_disparity" in results:  # per-query, for comparison
            per_query = [
                results["exposure_disparity"][r].mean
                if r in results["exposure_disparity"]
                else math.nan
                for r in rankers
            ]
            ax.scatter(x, per_query, color="#55A868", zorder=3, marker="o",
                       label="mean per-query disparity")  # fmt: skip
        paper = [(dataset.paper or {}).get(key, {}).get(r, math.nan) for r in rankers]
        if any(math.isfinite(p) for p in paper):
            ax.scatter(x, paper, color="#DD8452", zorder=3, marker="D", label="paper (mean)")
        goal = _goal(dataset, key)
        if goal is not None:
            ax.axhline(goal, color="grey", linestyle="--", linewidth=1, label="target")
        ax.set_xticks(x, [r.replace("_", "\n") for r in rankers], fontsize=8)
        ax.set_title(_PANEL_TITLES.get(key, key.replace("_", " ")))
        ax.set_ylim(bottom=min(0.0, *[m for m in means if math.isfinite(m)] or [0.0]))
        ax.legend(fontsize=7)
        per_n = [per[r].n if r in per else 0 for r in rankers]
        if not any(per_n):
            ax.text(0.5, 0.5, "n/a: no answer measured", ha="center", transform=ax.transAxes)
    if note:
        import textwrap

        wrapped = "\n".join(textwrap.wrap(note, width=int(28 * columns)))
        fig.text(0.01, 0.01, wrapped, fontsize=8, va="bottom")
        fig.tight_layout(rect=(0, 0.04 + 0.03 * wrapped.count("\n"), 1, 1))
    else:
        fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


_PANEL_TITLES = {
    "ee_loss": "EE-L (lower: closer to target)",
    "ee_disparity": "EE-D (lower: more equal)",
    "ee_relevance": "EE-R (higher: where the target wants it)",
    "awrf": "AWRF (1 = on target)",
    "trec_score": "TREC 2022 score nDCG x AWRF",
    "amortized_disparity": "amortized disparity (stream)",
}


def _goal(dataset: StudyDataset, key: str) -> float | None:
    """The target line of a share metric's plot (the protected group's or a group's target)."""
    if key in ("exposure_share", "generation_parity") and dataset.protected is not None:
        if dataset.target is None:
            return dataset.target_share
        return dataset.target[dataset.protected]
    if key.startswith("exposure_share_") and dataset.target is not None:
        return dataset.target.get(key.removeprefix("exposure_share_"))
    return None


_fmt = percent


def _fmt_spec(spec: MetricSpec, value: float) -> str:
    if not spec.percent:
        return "n/a" if not math.isfinite(value) else f"{value:.4f}"
    return _fmt(value)


def _heading(text: str, level: int = 2) -> Heading:
    return Heading(Markup(text), level)


def _paragraph(text: str) -> Paragraph:
    return Paragraph(Markup(text))


def _bullets(items: Iterable[str]) -> Bullets:
    return Bullets([Markup(item) for item in items])


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str) -> Table:
    """A table of the report's own text (rankers, metric keys, numbers: written as given)."""
    return Table(
        [Markup(cell) for cell in header],
        [[Markup(cell) for cell in row] for row in rows],
        None,
        align,
    )


def _report_blocks(run: _ReportRun, figures: Sequence[Figure] = ()) -> list[Block]:
    """The study's report, section by section (:mod:`fairrag_core.blocks`): written as
    ``report.md`` and ``report.html``."""
    paper = run.dataset.paper
    blocks = [*_configuration(run), *_means(run)]
    if run.generation_note:
        blocks.append(_paragraph(f"**Generation metrics skipped:** {run.generation_note}"))
    if run.diagnosis is not None:
        blocks += run.diagnosis.blocks()
    if run.many is not None:
        blocks += _many_rankings_section(run.results, run.rankers, run.many, run.dataset)
        if run.many.frontier is not None:
            blocks += _frontier_section(run.many.frontier)
    if paper is not None and run.facts is not None:
        blocks += [
            _heading("Differences from the paper"),
            _paragraph(
                "Every difference we know of between this run and the paper's setting, with "
                "its likely effect:"
            ),
            _bullets(differences(run.results, run.config, run.facts, run.generation_note)),
        ]
    blocks += [
        _heading("Reading"),
        _bullets([*_reading(run.results, run.rankers, run.dataset), *run.significance]),
    ]
    if figures:
        blocks += [_heading("Figures"), *figures]
    return [*blocks, _heading("Files"), _paragraph(_files(run))]


def _configuration(run: _ReportRun) -> list[Block]:
    if run.dataset.paper is not None:
        title = "FairRAG study: reproduction of Tikoo (2026)"
    else:
        title = f"FairRAG study: {run.dataset.name} (groups by `{run.dataset.group_key}`)"
    return [
        _heading(title, 1),
        _heading("Configuration"),
        _bullets(f"{key}: `{value}`" for key, value in run.config.items()),
    ]


def _means(run: _ReportRun) -> list[Block]:
    """Every ranker's mean per metric; on the paper's data first its four beside the paper."""
    blocks: list[Block] = []
    paper = run.dataset.paper
    if paper is not None:
        covered = _paper_rankers(run.rankers, run.dataset)
        rows = [
            [
                spec.key,
                ranker,
                _fmt(d.mean),
                _fmt(d.std),
                str(d.n),
                _fmt(paper[spec.key].get(ranker, math.nan)),
            ]
            for spec in run.specs
            if spec.key in paper
            for ranker in covered
            if (d := run.results[spec.key].get(ranker)) is not None
        ]
        exposure = run.facts.exposure if run.facts is not None else "dcg"
        heading = "This run beside the paper (the paper's rankers; means over trials"
        if exposure != "dcg":  # a user trial: the table set other weights beside the paper's
            heading += f"; this run's exposure under `{exposure}` weights, the paper's under DCG"
        blocks += [
            _heading(heading + ")"),
            _table(["metric", "ranker", "this run", "sd", "n", "paper"], rows, "llrrrr"),
            _heading("Every ranker (means over trials)"),
        ]
    else:
        blocks.append(_heading("This run (means over trials)"))
    rows = [
        [spec.key, ranker, _fmt_spec(spec, d.mean), _fmt_spec(spec, d.std), str(d.n)]
        for spec in run.specs
        for ranker in run.rankers
        if (d := run.results[spec.key].get(ranker)) is not None
    ]
    return [*blocks, _table(["metric", "ranker", "this run", "sd", "n"], rows, "llrrr")]


def _files(run: _ReportRun) -> str:
    """The "Files" paragraph: which file holds what."""
    many_files = (
        f"; amortized disparity per stream: `{AMORTIZED.filename}`; metrics over many "
        f"rankings per trial: `{TRIAL_METRICS_FILE}`"
        if run.many is not None
        else ""
    )
    if run.many is not None and run.many.frontier is not None:
        many_files += f"; the amortized frontier: `{FRONTIER_FILE}`, `{FRONTIER_FIGURE}`"
    if run.position_curve:
        listed = ", ".join(f"`{name}`" for name in run.position_curve if name != CURVE_FIGURE)
        many_files += f"; the generator's position curve and the exposure models fitted: {listed}"
    return (
        "Tables with every pairwise t-test: "
        + ", ".join(f"`{spec.filename}`" for spec in run.specs)
        + "; per-trial records: `records.jsonl`; means: `summary.csv`; outliers: `outliers.md`"
        + f"{many_files}; figures: `figures/`."
    )


_MANY_COLUMNS = (
    ("ee_loss", "EE-L"),
    ("ee_disparity", "EE-D"),
    ("ee_relevance", "EE-R"),
    ("awrf", "AWRF"),
    ("trec_ndcg", "TREC nDCG"),
    ("trec_score", "TREC score"),
)


def _many_rankings_section(
    results: Mapping[str, Mapping[str, Descriptive]],
    rankers: Sequence[str],
    many: ManyRankings,
    dataset: StudyDataset,
) -> list[Block]:
    """The metrics over many rankings: one table (means over trials; amortized disparity one
    value per stream) and a one-line reading of each (docs/SPEC.md, "The study")."""
    groups = _stream_groups(dataset)
    header = [label for _, label in _MANY_COLUMNS] + ["amortized disparity"]
    header += [f"stream share {label}" for _, label in groups]
    rows = []
    for name in rankers:
        cells = [name]
        for key, _ in _MANY_COLUMNS:
            d = results.get(key, {}).get(name)
            cells.append("n/a" if d is None else f"{d.mean:.4f}")
        stream = many.streams.get(name)
        cells.append("n/a" if stream is None else _fmt(stream.disparity))
        for key, _ in groups:
            cells.append("n/a" if stream is None else _fmt(stream.shares.get(key, math.nan)))
        rows.append(cells)
    return [
        _heading("Over many rankings"),
        _paragraph(
            f"Expected exposure (EE) from {many.samples} rankings sampled per question from "
            "each trial's pool (the amortized ranker's drawn from its ledger as that trial read "
            "it); AWRF and the TREC 2022 score from the ranking each trial showed; amortized "
            "disparity and each group's share of the exposure from each ranker's stream of "
            "shown rankings, in trial order. Means over trials (tables `table_ee_*.md`, "
            f"`table_awrf.md`, `table_trec_*.md`; per trial `{TRIAL_METRICS_FILE}`), one value "
            f"per stream (`{AMORTIZED.filename}`)."
        ),
        _table(["ranker", *header], rows, "l" + "r" * len(header)),
        _bullets(_many_readings(results, rankers, many)),
    ]


_MANY_READINGS = (
    ("ee_loss", "EE-L, the squared distance between each group's expected exposure over "
     "{samples} draws and its target's (0 = on target in expectation; lower is fairer), lowest "
     "to highest"),
    ("ee_disparity", "EE-D, how unequally the expected exposure falls on the groups (lower "
     "= more equal), lowest to highest"),
    ("ee_relevance", "EE-R, expected exposure where the target puts it (higher is better), "
     "lowest to highest"),
    ("awrf", "AWRF of the shown rankings (1 = their group distribution under the TREC "
     "discount equals the target), lowest to highest"),
    ("trec_score", "TREC 2022 score nDCG x AWRF (relevance and fairness of one ranking "
     "together; higher is better), lowest to highest"),
)  # fmt: skip
"""The metrics over many rankings the report reads, each with its words."""


def _order(
    results: Mapping[str, Mapping[str, Descriptive]],
    rankers: Sequence[str],
    key: str,
    percent: bool = False,
) -> str:
    """The rankers by their mean of ``key``, lowest first, each with its mean."""
    per = results.get(key, {})
    ranked = sorted(
        (r for r in rankers if r in per and math.isfinite(per[r].mean)), key=lambda r: per[r].mean
    )
    shown = (_fmt(per[r].mean) if percent else f"{per[r].mean:.4f}" for r in ranked)
    return ", ".join(f"{r} {v}" for r, v in zip(ranked, shown, strict=True))


def _ee_identity(results: Mapping[str, Mapping[str, Descriptive]], rankers: Sequence[str]) -> bool:
    """Whether EE-D = EE-L + EE-R for every ranker (a target giving every group the same)."""
    return bool(results.get("ee_loss")) and all(
        abs(
            results["ee_disparity"][r].mean
            - results["ee_loss"][r].mean
            - results["ee_relevance"][r].mean
        )
        <= 1e-9 * max(1.0, abs(results["ee_disparity"][r].mean))
        for r in rankers
        if r in results.get("ee_loss", {})
    )


def _many_readings(
    results: Mapping[str, Mapping[str, Descriptive]], rankers: Sequence[str], many: ManyRankings
) -> list[str]:
    """One line per metric over many rankings: the rankers in order, and what that means."""
    per = results.get("ee_relevance", {})
    relevance = [per[r].mean for r in rankers if r in per and math.isfinite(per[r].mean)]
    same_ee_r = bool(relevance) and _constant([np.array(relevance)])
    lines = []
    for key, words in _MANY_READINGS:
        if not results.get(key):
            continue
        text = words.format(samples=many.samples)
        if key == "ee_relevance" and same_ee_r:
            lines.append(
                f"EE-R is {relevance[0]:.4f} for every ranker: with this target sum_g E_g T_g "
                "is fixed by the total exposure (½ (sum_i v_i)² at parity), so it cannot tell "
                "rankers apart here."
            )
        elif key == "ee_disparity" and _ee_identity(results, rankers):
            lines.append(
                f"{text}: {_order(results, rankers, key)}. Here EE-D = EE-L + EE-R (the target "
                "gives every group the same exposure), so it orders the rankers as EE-L does."
            )
        else:
            lines.append(f"{text}: {_order(results, rankers, key)}.")
    if results.get(AMORTIZED.key):
        n = max((stream.rankings for stream in many.streams.values()), default=0)
        lines.append(
            f"Amortized disparity over each stream of {n} shown rankings (0 = the stream as a "
            "whole on target, whatever each list does), lowest to highest: "
            f"{_order(results, rankers, AMORTIZED.key, percent=True)}. A value far below the "
            "ranker's mean exposure disparity per question (Table 1) means its lists balance "
            "one another across questions rather than each on its own."
        )
    return lines


def _reading(
    results: Mapping[str, Mapping[str, Descriptive]],
    rankers: Sequence[str],
    dataset: StudyDataset = TREC_GENDER,
) -> list[str]:
    """A short, rule-based reading: where this run agrees with the paper and where it does not
    (with no paper numbers: each ranker's exposure per group against the target)."""
    out = []
    share = results.get("exposure_share", {})
    disparity = results.get("exposure_disparity", {})
    order = sorted(
        (r for r in rankers if r in share and math.isfinite(share[r].mean)),
        key=lambda r: share[r].mean,
    )
    if order and dataset.protected is not None:
        line = (
            f"{dataset.protected.capitalize()} exposure share, lowest to highest: "
            + ", ".join(f"{r} {_fmt(share[r].mean)}" for r in order)
            + "."
        )
        if dataset.paper is not None:
            line += (
                " The paper's order is stochastic < standard < forced_exposure < "
                "representative_stochastic."
            )
        out.append(line)
    if dataset.target is not None:
        for ranker in rankers:
            if ranker not in disparity or not math.isfinite(disparity[ranker].mean):
                continue
            per_group = ", ".join(
                f"{group} {_fmt(results[f'exposure_share_{group}'][ranker].mean)} "
                f"(target {_fmt(goal)})"
                for group, goal in dataset.target.items()
                if ranker in results.get(f"exposure_share_{group}", {})
            )
            out.append(
                f"{ranker}: exposure disparity {_fmt(disparity[ranker].mean)}; exposure "
                f"share per group: {per_group}."
            )
    paper = dataset.paper
    if paper is None:
        if "generation_parity" not in results and dataset.protected is not None:
            out.append("Generation was not run, so generation parity and utility are not known.")
        return out
    for ranker in rankers:
        ours = disparity.get(ranker)
        theirs = paper["exposure_disparity"].get(ranker)
        if ours is None or theirs is None or not math.isfinite(ours.mean):
            continue
        delta = ours.mean - theirs
        verdict = "close to" if abs(delta) < 0.05 else ("above" if delta > 0 else "below")
        out.append(
            f"{ranker}: exposure disparity {_fmt(ours.mean)} vs the paper's {_fmt(theirs)} "
            f"({verdict} it, {100 * delta:+.2f} points)."
        )
    out.append(
        'Why numbers can differ: see "Differences from the paper" above. The fair rankers\' '
        "shares depend mostly on their targets, so they should reproduce more closely than "
        "the baselines."
    )
    if "generation_parity" not in results:
        out.append("Generation was not run, so generation parity and utility are not compared.")
    return out
