"""Held-out comparison of representative_stochastic under DCG and under a fitted exposure model
(issue 35, docs/SPEC.md "Exposure model" → Fitted): attributed generation parity and nDCG@5 of
two study runs on the same trials, read on the trials whose topic the fit never saw.

    python benchmarks/calibrated_parity.py DCG_RUN/records.jsonl FITTED_RUN/records.jsonl \
        CURVE_RUN/exposure_fitted.json [--ranker representative_stochastic]

Prints each arm's mean with its 95% t interval, the distance of the mean from the target 0.5,
and a paired bootstrap over trials (10,000 resamples, seeded) of the difference of distances
``|m_dcg - 0.5| - |m_fit - 0.5|``: one-sided at alpha 0.05, the fitted arm is closer when the
bootstrap's 5th percentile is above 0.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from scipy import stats

from fairrag_core.position_curve import observation_from_record

TARGET = 0.5


def _records(path: Path, ranker: str) -> dict[int, dict]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("ranker") == ranker:
            out[int(record["trial"])] = record
    return out


def _pooled(records: list[dict]) -> float:
    """The protected group's share of every attribution over ``records`` (the stream's)."""
    protected = total = 0
    for record in records:
        observed = observation_from_record(record)
        if observed is None:
            continue
        for group, attributed in zip(observed.groups, observed.attributed, strict=True):
            total += attributed
            protected += attributed and group == record["protected"]
    return protected / total if total else math.nan


def _mean_ci(values: np.ndarray) -> tuple[float, float, float]:
    mean = float(values.mean())
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    return mean, mean - half, mean + half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dcg", type=Path)
    parser.add_argument("fitted", type=Path)
    parser.add_argument("curve", type=Path)
    parser.add_argument("--ranker", default="representative_stochastic")
    args = parser.parse_args()
    curve = json.loads(args.curve.read_text(encoding="utf-8"))
    fit_topics = set(curve["provenance"]["topics"])
    dcg, fitted = _records(args.dcg, args.ranker), _records(args.fitted, args.ranker)
    trials = sorted(
        t
        for t in set(dcg) & set(fitted)
        if dcg[t]["topic"] not in fit_topics
        and dcg[t]["question"] == fitted[t]["question"]
        and dcg[t].get("attributed_generation_parity") is not None
        and fitted[t].get("attributed_generation_parity") is not None
        and math.isfinite(dcg[t]["attributed_generation_parity"])
        and math.isfinite(fitted[t]["attributed_generation_parity"])
    )
    print(f"fitted curve v = {curve['weights']} (fit on {sorted(fit_topics)})")
    if curve.get("group_factors"):
        low, high = curve.get("group_factor_lower", {}), curve.get("group_factor_upper", {})
        print(
            "group factors lambda_g: "
            + ", ".join(
                f"{g} {f:.3f} [{low.get(g, math.nan):.3f}, {high.get(g, math.nan):.3f}]"
                for g, f in curve["group_factors"].items()
            )
        )
    print(f"held-out trials with an attributed parity in both arms: {len(trials)}")
    if len(trials) < 2:
        return
    arms = {"dcg": dcg, "fitted": fitted}
    parity = {
        name: np.array([records[t]["attributed_generation_parity"] for t in trials])
        for name, records in arms.items()
    }
    for name, records in arms.items():
        mean, low, high = _mean_ci(parity[name])
        ndcg, nlow, nhigh = _mean_ci(np.array([records[t]["ndcg_at_k"] for t in trials]))
        share, _, _ = _mean_ci(np.array([records[t]["exposure_share"] for t in trials]))
        shown = np.array(
            [records[t]["groups"].count(records[t]["protected"]) / len(records[t]["groups"])
             for t in trials]
        )  # fmt: skip
        print(
            f"{name:>7}: attributed generation parity {100 * mean:.1f}% "
            f"[{100 * low:.1f}, {100 * high:.1f}] (covers 50%: {low <= TARGET <= high}), "
            f"distance {100 * abs(mean - TARGET):.1f} pts; nDCG@5 {100 * ndcg:.1f} "
            f"[{100 * nlow:.1f}, {100 * nhigh:.1f}]; exposure share (its own model) "
            f"{100 * share:.1f}%; protected by count {100 * shown.mean():.1f}%; "
            f"over the stream {100 * _pooled([records[t] for t in trials]):.1f}% of attributions"
        )
    rng = np.random.default_rng(35)
    draws = rng.integers(0, len(trials), size=(10_000, len(trials)))
    diff = np.abs(parity["dcg"][draws].mean(axis=1) - TARGET) - np.abs(
        parity["fitted"][draws].mean(axis=1) - TARGET
    )
    observed = abs(parity["dcg"].mean() - TARGET) - abs(parity["fitted"].mean() - TARGET)
    p_value = float(np.mean(diff <= 0))
    print(
        f"distance(dcg) - distance(fitted) = {100 * observed:.1f} pts; paired bootstrap 5th "
        f"percentile {100 * np.percentile(diff, 5):.1f} pts; one-sided p = {p_value:.3f} "
        f"(fitted closer at alpha 0.05: {p_value < 0.05})"
    )


if __name__ == "__main__":
    main()
