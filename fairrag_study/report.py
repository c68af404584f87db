"""Study outputs: per-metric tables with t-tests, summary CSV, outliers, figures and report.md."""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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

__all__ = ["METRICS", "PAPER", "MetricSpec", "metric_specs", "write_outputs"]


@dataclass(frozen=True)
class MetricSpec:
    key: str
    title: str
    filename: str


def metric_specs(dataset: StudyDataset = TREC_GENDER) -> tuple[MetricSpec, ...]:
    """The study's tables for ``dataset``: with one protected group, its exposure share and the
    generation metrics about it (the paper's tables); with a full target, one exposure share
    table per group."""
    protected, who = dataset.protected, dataset.protected_noun or dataset.protected
    if dataset.target is None:
        goal = f"{dataset.target_share:g}"
        disparity = f"|ES_{protected} - {goal}|"
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
    specs += [
        MetricSpec("precision_at_k", "Retrieval relevance: P@k", "table_precision_at_k.md"),
        MetricSpec("ndcg_at_k", "Retrieval relevance: nDCG@k", "table_ndcg_at_k.md"),
    ]
    if protected is not None:
        goal = f"{dataset.target_share if dataset.target is None else dataset.target[protected]:g}"
        specs += [
            MetricSpec(
                "generation_parity",
                f"Generation demographic parity (share of valid citations to {who})",
                "table_generation_parity.md",
            ),
            MetricSpec(
                "grounded_generation_parity",
                "Grounded generation parity (share of citations naming their document's "
                f"person, to {who})",
                "table_grounded_generation_parity.md",
            ),
        ]
    specs.append(MetricSpec("groundedness", "Utility (groundedness)", "table_groundedness.md"))
    if protected is not None:
        specs += [
            MetricSpec(
                "fairness_gap", f"Fairness gap GDP - ES_{protected}", "table_fairness_gap.md"
            ),
            MetricSpec(
                "fairness_gap_magnitude",
                f"Fairness gap magnitude |GDP - {goal}| - |ES_{protected} - {goal}|",
                "table_fairness_gap_magnitude.md",
            ),
        ]
    return tuple(specs)


def _file_safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label)


METRICS: tuple[MetricSpec, ...] = metric_specs(TREC_GENDER)
"""The paper's tables (the TREC gender data set)."""

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
    if len(usable) >= 2:
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


def write_outputs(
    out_dir: Path,
    records: Sequence[Mapping],
    rankers: Sequence[str],
    *,
    config: Mapping[str, object],
    generation_note: str | None,
    alpha: float = DEFAULT_ALPHA,
    dataset: StudyDataset = TREC_GENDER,
) -> dict[str, dict[str, Descriptive]]:
    """Write every table, the summary CSV, outliers, figures and report.md into ``out_dir``.

    Tables, figures and the report name ``dataset``'s groups and target; the paper comparison
    appears only when the data set has the paper's numbers.
    """
    figures = out_dir / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Descriptive]] = {}
    present = [
        spec
        for spec in metric_specs(dataset)
        if any(_value(r, spec.key) is not None for r in records)
    ]
    for spec in present:
        text, descriptives = metric_table(spec, _samples(records, rankers, spec.key), alpha)
        _atomic_write(out_dir / spec.filename, text)
        results[spec.key] = descriptives
    _atomic_write(out_dir / "summary.csv", _summary_csv(results))
    _atomic_write(out_dir / "outliers.md", _outliers_markdown(records, rankers, present))
    shares = (
        ("exposure_share",)
        if dataset.target is None
        else tuple(f"exposure_share_{group}" for group in dataset.target)
    )
    _plot(figures / "retrieval.png", results, rankers, ("exposure_disparity", *shares), dataset)
    if "generation_parity" in results:
        _plot(
            figures / "generation.png",
            results,
            rankers,
            ("generation_parity", "groundedness"),
            dataset,
        )
    significance = _significance(records, rankers, alpha, dataset)
    _atomic_write(
        out_dir / "report.md",
        _report(results, rankers, config, generation_note, present, significance, dataset),
    )
    return results


def _significance(
    records: Sequence[Mapping], rankers: Sequence[str], alpha: float, dataset: StudyDataset
) -> str | None:
    """The exposure-disparity t-test pattern, in the paper's terms."""
    samples = _samples(records, rankers, "exposure_disparity")
    if len(samples) < 2 or any(describe(v).n < 2 for v in samples.values()):
        return None
    rows = pairwise_t_tests(samples, alpha=alpha)
    significant = [f"{r.a} vs {r.b}" for r in rows if r.significant]
    not_significant = [f"{r.a} vs {r.b}" for r in rows if not r.significant]
    text = (
        f"- Exposure disparity, pairwise t-tests at alpha = {alpha}: {len(significant)} of "
        f"{len(rows)} significant"
    )
    if not_significant:
        text += f"; not significant: {', '.join(not_significant)}"
    return text + (
        ". The paper: five of six significant, standard vs stochastic not."
        if len(rankers) == 4 and dataset.paper is not None
        else "."
    )


def _atomic_write(path: Path, text: str) -> None:
    """Write a whole file or nothing: an interrupted run never leaves a half-written table."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _summary_csv(results: Mapping[str, Mapping[str, Descriptive]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["metric", "ranker", "mean", "std", "n", "n_missing"])
    for metric, per_ranker in results.items():
        for ranker, d in per_ranker.items():
            writer.writerow([metric, ranker, repr(d.mean), repr(d.std), d.n, d.n_missing])
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
            values = np.array(
                [math.nan if r.get(spec.key) is None else float(r[spec.key]) for r in rows]
            )
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
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 4.2))
    for ax, key in zip(np.atleast_1d(axes), keys, strict=True):
        per = results.get(key, {})
        means = [per[r].mean if r in per else math.nan for r in rankers]
        errors = [per[r].std if r in per else math.nan for r in rankers]
        x = np.arange(len(rankers))
        ax.bar(x, means, yerr=errors, capsize=4, color="#4C72B0", label="this run (mean ± sd)")
        paper = [(dataset.paper or {}).get(key, {}).get(r, math.nan) for r in rankers]
        if any(math.isfinite(p) for p in paper):
            ax.scatter(x, paper, color="#DD8452", zorder=3, marker="D", label="paper (mean)")
        goal = _goal(dataset, key)
        if goal is not None:
            ax.axhline(goal, color="grey", linestyle="--", linewidth=1, label="target")
        ax.set_xticks(x, [r.replace("_", "\n") for r in rankers], fontsize=8)
        ax.set_title(key.replace("_", " "))
        ax.set_ylim(bottom=min(0.0, *[m for m in means if math.isfinite(m)] or [0.0]))
        ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def _goal(dataset: StudyDataset, key: str) -> float | None:
    """The target line of a share metric's plot (the protected group's or a group's target)."""
    if key in ("exposure_share", "generation_parity") and dataset.protected is not None:
        if dataset.target is None:
            return dataset.target_share
        return dataset.target[dataset.protected]
    if key.startswith("exposure_share_") and dataset.target is not None:
        return dataset.target.get(key.removeprefix("exposure_share_"))
    return None


def _fmt(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:.2f}%"


def _report(
    results: Mapping[str, Mapping[str, Descriptive]],
    rankers: Sequence[str],
    config: Mapping[str, object],
    generation_note: str | None,
    specs: Sequence[MetricSpec],
    significance: str | None = None,
    dataset: StudyDataset = TREC_GENDER,
) -> str:
    paper = dataset.paper
    if paper is not None:
        lines = ["# FairRAG study: reproduction of Tikoo (2026)\n"]
    else:
        lines = [f"# FairRAG study: {dataset.name} (groups by `{dataset.group_key}`)\n"]
    lines.append("## Configuration\n")
    for key, value in config.items():
        lines.append(f"- {key}: `{value}`")
    if paper is not None:
        lines.append("\n## This run beside the paper (means over trials)\n")
        lines.append("| metric | ranker | this run | sd | n | paper |")
        lines.append("|---|---|---:|---:|---:|---:|")
    else:
        lines.append("\n## This run (means over trials)\n")
        lines.append("| metric | ranker | this run | sd | n |")
        lines.append("|---|---|---:|---:|---:|")
    for spec in specs:
        for ranker in rankers:
            d = results[spec.key].get(ranker)
            if d is None:
                continue
            cells = [spec.key, ranker, _fmt(d.mean), _fmt(d.std), str(d.n)]
            if paper is not None:
                cells.append(_fmt(paper.get(spec.key, {}).get(ranker, math.nan)))
            lines.append("| " + " | ".join(cells) + " |")
    if generation_note:
        lines.append(f"\n**Generation metrics skipped:** {generation_note}\n")
    lines.append("\n## Reading\n")
    lines.extend(_reading(results, rankers, dataset))
    if significance:
        lines.append(significance)
    lines.append("\n## Files\n")
    lines.append(
        "Tables with every pairwise t-test: " + ", ".join(f"`{s.filename}`" for s in specs)
    )
    lines.append(
        "; per-trial records: `records.jsonl`; means: `summary.csv`; outliers: `outliers.md`; "
        "figures: `figures/`."
    )
    return "\n".join(lines) + "\n"


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
            f"- {dataset.protected.capitalize()} exposure share, lowest to highest: "
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
                f"- {ranker}: exposure disparity {_fmt(disparity[ranker].mean)}; exposure "
                f"share per group: {per_group}."
            )
    paper = dataset.paper
    if paper is None:
        if "generation_parity" not in results and dataset.protected is not None:
            out.append("- Generation was not run, so generation parity and utility are not known.")
        return out
    for ranker in rankers:
        ours = disparity.get(ranker)
        theirs = paper["exposure_disparity"].get(ranker)
        if ours is None or theirs is None or not math.isfinite(ours.mean):
            continue
        delta = ours.mean - theirs
        verdict = "close to" if abs(delta) < 0.05 else ("above" if delta > 0 else "below")
        out.append(
            f"- {ranker}: exposure disparity {_fmt(ours.mean)} vs the paper's {_fmt(theirs)} "
            f"({verdict} it, {100 * delta:+.2f} points)."
        )
    out.append(
        "- Why numbers can differ: the paper does not publish its corpus sample, embedding "
        "index or random seeds. Our balanced corpus is drawn per docs/SPEC.md (about 3,360 "
        "documents, exactly half female) with our seed, and the standard ranker's share of "
        "women depends on how the all-MiniLM-L6-v2 embedding scores women's biographies "
        "against these questions on this sample. The fair rankers' shares depend mostly on "
        "their targets, so they should reproduce more closely than the baselines."
    )
    if "generation_parity" not in results:
        out.append("- Generation was not run, so generation parity and utility are not compared.")
    return out
