"""Study outputs: per-metric tables with t-tests, summary CSV, outliers, figures and report.md."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

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

__all__ = ["METRICS", "PAPER", "MetricSpec", "write_outputs"]


@dataclass(frozen=True)
class MetricSpec:
    key: str
    title: str
    filename: str


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "exposure_disparity",
        "Table 1: exposure disparity |ES_female - 0.5|",
        "table1_exposure_disparity.md",
    ),
    MetricSpec(
        "exposure_share", "Table 2: female exposure share ES_female", "table2_exposure_share.md"
    ),
    MetricSpec("precision_at_k", "Retrieval relevance: P@k", "table_precision_at_k.md"),
    MetricSpec("ndcg_at_k", "Retrieval relevance: nDCG@k", "table_ndcg_at_k.md"),
    MetricSpec(
        "generation_parity",
        "Generation demographic parity (share of valid citations to women)",
        "table_generation_parity.md",
    ),
    MetricSpec(
        "grounded_generation_parity",
        "Grounded generation parity (share of citations naming their document's person, to women)",
        "table_grounded_generation_parity.md",
    ),
    MetricSpec("groundedness", "Utility (groundedness)", "table_groundedness.md"),
    MetricSpec("fairness_gap", "Fairness gap GDP - ES_female", "table_fairness_gap.md"),
    MetricSpec(
        "fairness_gap_magnitude",
        "Fairness gap magnitude |GDP - 0.5| - |ES_female - 0.5|",
        "table_fairness_gap_magnitude.md",
    ),
)

PAPER: dict[str, dict[str, float]] = {
    "exposure_disparity": {
        "standard": 0.4188,
        "stochastic": 0.4077,
        "forced_exposure": 0.2517,
        "representative_stochastic": 0.0430,
    },
    "exposure_share": {
        "standard": 0.1250,
        "stochastic": 0.0941,
        "forced_exposure": 0.2921,
        "representative_stochastic": 0.5229,
    },
    "generation_parity": {
        "standard": 0.1344,
        "stochastic": 0.1101,
        "forced_exposure": 0.3508,
        "representative_stochastic": 0.6302,
    },
    "groundedness": {
        "standard": 0.8650,
        "stochastic": 0.7792,
        "forced_exposure": 0.8750,
        "representative_stochastic": 0.6100,
    },
}
"""The paper's reported means (docs/SPEC.md, "The study"), as fractions."""


def _samples(records: Sequence[Mapping], rankers: Sequence[str], key: str) -> dict[str, np.ndarray]:
    out = {}
    for ranker in rankers:
        values = [r.get(key) for r in records if r["ranker"] == ranker]
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
) -> dict[str, dict[str, Descriptive]]:
    """Write every table, the summary CSV, outliers, figures and report.md into ``out_dir``."""
    figures = out_dir / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Descriptive]] = {}
    present = [
        spec for spec in METRICS if any(spec.key in r and r[spec.key] is not None for r in records)
    ]
    for spec in present:
        text, descriptives = metric_table(spec, _samples(records, rankers, spec.key), alpha)
        _atomic_write(out_dir / spec.filename, text)
        results[spec.key] = descriptives
    _atomic_write(out_dir / "summary.csv", _summary_csv(results))
    _atomic_write(out_dir / "outliers.md", _outliers_markdown(records, rankers, present))
    _plot(figures / "retrieval.png", results, rankers, ("exposure_disparity", "exposure_share"))
    if "generation_parity" in results:
        _plot(figures / "generation.png", results, rankers, ("generation_parity", "groundedness"))
    significance = _significance(records, rankers, alpha)
    _atomic_write(
        out_dir / "report.md",
        _report(results, rankers, config, generation_note, present, significance),
    )
    return results


def _significance(records: Sequence[Mapping], rankers: Sequence[str], alpha: float) -> str | None:
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
        if len(rankers) == 4
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
        paper = [PAPER.get(key, {}).get(r, math.nan) for r in rankers]
        if any(math.isfinite(p) for p in paper):
            ax.scatter(x, paper, color="#DD8452", zorder=3, marker="D", label="paper (mean)")
        if key in ("exposure_share", "generation_parity"):
            ax.axhline(0.5, color="grey", linestyle="--", linewidth=1, label="parity target")
        ax.set_xticks(x, [r.replace("_", "\n") for r in rankers], fontsize=8)
        ax.set_title(key.replace("_", " "))
        ax.set_ylim(bottom=min(0.0, *[m for m in means if math.isfinite(m)] or [0.0]))
        ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def _fmt(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:.2f}%"


def _report(
    results: Mapping[str, Mapping[str, Descriptive]],
    rankers: Sequence[str],
    config: Mapping[str, object],
    generation_note: str | None,
    specs: Sequence[MetricSpec],
    significance: str | None = None,
) -> str:
    lines = ["# FairRAG study: reproduction of Tikoo (2026)\n"]
    lines.append("## Configuration\n")
    for key, value in config.items():
        lines.append(f"- {key}: `{value}`")
    lines.append("\n## This run beside the paper (means over trials)\n")
    lines.append("| metric | ranker | this run | sd | n | paper |")
    lines.append("|---|---|---:|---:|---:|---:|")
    for spec in specs:
        for ranker in rankers:
            d = results[spec.key].get(ranker)
            if d is None:
                continue
            paper = PAPER.get(spec.key, {}).get(ranker, math.nan)
            cells = [spec.key, ranker, _fmt(d.mean), _fmt(d.std), str(d.n), _fmt(paper)]
            lines.append("| " + " | ".join(cells) + " |")
    if generation_note:
        lines.append(f"\n**Generation metrics skipped:** {generation_note}\n")
    lines.append("\n## Reading\n")
    lines.extend(_reading(results, rankers))
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


def _reading(results: Mapping[str, Mapping[str, Descriptive]], rankers: Sequence[str]) -> list[str]:
    """A short, rule-based reading: where this run agrees with the paper and where it does not."""
    out = []
    share = results.get("exposure_share", {})
    disparity = results.get("exposure_disparity", {})
    order = sorted(
        (r for r in rankers if r in share and math.isfinite(share[r].mean)),
        key=lambda r: share[r].mean,
    )
    if order:
        out.append(
            "- Female exposure share, lowest to highest: "
            + ", ".join(f"{r} {_fmt(share[r].mean)}" for r in order)
            + ". The paper's order is stochastic < standard < forced_exposure < "
            "representative_stochastic."
        )
    for ranker in rankers:
        ours = disparity.get(ranker)
        theirs = PAPER["exposure_disparity"].get(ranker)
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
