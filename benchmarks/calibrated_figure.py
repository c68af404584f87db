"""The paper's Figure 2 for the local model, with the calibrated rankers beside the paper's
four (issue 35, item 3): per arm, the female share of the context's exposure and of the
answers' attributions. A figure script (it prints the figures it draws), not a test.

    python benchmarks/calibrated_figure.py PAPER_RUN/records.jsonl \
        CALIBRATED_RUN/records.jsonl CURVE_RUN/exposure_fitted.json \
        [--out docs/figures/study_generation_calibrated.png]

``PAPER_RUN`` is ``fairrag study --llm local --rankers paper`` (exposure model DCG),
``CALIBRATED_RUN`` the same study with ``--exposure fitted:CURVE`` and the rankers to
calibrate (each shown as ``<ranker> (fitted)``); ``CURVE`` is the fitted curve's file, whose
``provenance.topics`` are the questions the fit saw. Per arm it prints and draws, over the
held-out trials (topics the fit never saw; every arm on the same trials) and, printed too,
over all trials:

- the protected group's share of the context's exposure under DCG
  (``sum of 1/log2(i + 1) over its positions / sum over the k positions``, docs/SPEC.md
  "Exposure"), the same reader's weights for every arm, so the calibrated arms' bars compare
  with the paper's four (each record's ``exposure_share`` is under its own run's model);
- its share of the shown entries by count;
- the attributed generation parity (docs/SPEC.md "Attribution"): mean and 95% t interval over
  the trials that have one (an answer attributing nothing is n/a, counted);
- nDCG@5.

The figure: per arm, bars of the DCG exposure share and the attributed generation parity
(with its interval), the target 50% as a line.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fairrag_core.metrics import exposure_share
from fairrag_core.stats import critical_t, describe

TARGET = 0.5
PAPER_ORDER = ("standard", "stochastic", "forced_exposure", "representative_stochastic")


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def dcg_share(groups: Sequence[str], protected: str) -> float:
    """The protected group's share of DCG exposure over the shown ``groups`` (rank 1 first):
    :func:`fairrag_core.metrics.exposure_share` under DCG, whatever the record's own run
    used."""
    return exposure_share(groups, protected, exposure="dcg")


def mean_ci(values: Sequence[float | None]) -> tuple[float, float, float, int]:
    """Mean, 95% t interval and n of the finite ``values`` (``None``, an n/a parity, left out;
    the interval nan when fewer than 2): :func:`fairrag_core.stats.describe` and
    :func:`~fairrag_core.stats.critical_t`, as the study's tables."""
    described = describe([math.nan if v is None else v for v in values])
    if described.n < 2:
        return described.mean, math.nan, math.nan, described.n
    half = critical_t(described.n - 1, 0.05) * described.std / math.sqrt(described.n)
    return described.mean, described.mean - half, described.mean + half, described.n


def arms(paper: list[dict], calibrated: list[dict]) -> dict[str, dict[int, dict]]:
    """Records by arm and trial: the paper's four in their order, then each calibrated ranker
    as ``<ranker> (fitted)``."""
    out: dict[str, dict[int, dict]] = {}
    for ranker in PAPER_ORDER:
        out[ranker] = {int(r["trial"]): r for r in paper if r.get("ranker") == ranker}
    for ranker in dict.fromkeys(r["ranker"] for r in calibrated):
        out[f"{ranker} (fitted)"] = {
            int(r["trial"]): r for r in calibrated if r.get("ranker") == ranker
        }
    return {name: trials for name, trials in out.items() if trials}


def summary(trials: dict[int, dict], keep: set[int]) -> dict[str, tuple[float, float, float, int]]:
    """Each measure's mean, interval and n over the trials in ``keep``."""
    chosen = [trials[t] for t in sorted(keep) if t in trials]
    return {
        "dcg_share": mean_ci([dcg_share(r["groups"], r["protected"]) for r in chosen]),
        "by_count": mean_ci([r["groups"].count(r["protected"]) / len(r["groups"]) for r in chosen]),
        "parity": mean_ci([r.get("attributed_generation_parity") for r in chosen]),
        "ndcg": mean_ci([r.get("ndcg_at_k") for r in chosen]),
    }


def _line(name: str, rows: dict[str, tuple[float, float, float, int]]) -> str:
    def pct(key: str) -> str:
        mean, low, high, n = rows[key]
        interval = f" [{100 * low:.1f}, {100 * high:.1f}]" if n > 1 else ""
        return f"{100 * mean:.1f}%{interval}"

    return (
        f"  {name:38s} DCG exposure share {pct('dcg_share')}, by count {pct('by_count')}, "
        f"attributed parity {pct('parity')} (n {rows['parity'][3]}), nDCG@5 {pct('ndcg')}"
    )


def draw(held_out: dict[str, dict[str, tuple[float, float, float, int]]], out: Path) -> None:
    """The bars (one pair per arm) with the parity's interval and the 50% line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(held_out)
    x = np.arange(len(names))
    share = [100 * held_out[n]["dcg_share"][0] for n in names]
    parity = [100 * held_out[n]["parity"][0] for n in names]
    low = [100 * (held_out[n]["parity"][0] - held_out[n]["parity"][1]) for n in names]
    high = [100 * (held_out[n]["parity"][2] - held_out[n]["parity"][0]) for n in names]
    figure, axes = plt.subplots(figsize=(9, 4.2))
    axes.bar(x - 0.2, share, 0.4, label="female share of exposure (DCG)", color="#9ecae1")
    axes.bar(
        x + 0.2,
        parity,
        0.4,
        yerr=[low, high],
        capsize=3,
        label="attributed generation parity (95% t)",
        color="#3182bd",
    )
    axes.axhline(100 * TARGET, color="black", linewidth=0.8, linestyle="--", label="target 50%")
    labels = [n.replace(" (", "\n(") for n in names]
    labels = [t.replace("_", "_\n", 1) if len(t.split("\n")[0]) > 16 else t for t in labels]
    axes.set_xticks(x, labels)
    axes.tick_params(axis="x", labelsize=8)
    axes.set_ylabel("% female")
    axes.set_ylim(0, 100)
    trials = max(held_out[n]["dcg_share"][3] for n in names)
    axes.set_title(f"SmolLM2-135M, {trials} held-out trials per arm: shown vs attributed")
    axes.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paper", type=Path, help="records.jsonl of the paper's four (DCG)")
    parser.add_argument("calibrated", type=Path, help="records.jsonl of --exposure fitted:CURVE")
    parser.add_argument("curve", type=Path, help="the fitted curve's file (its fit topics)")
    parser.add_argument("--out", type=Path, help="write the figure here (PNG)")
    args = parser.parse_args(argv)
    curve = json.loads(args.curve.read_text(encoding="utf-8"))
    fit_topics = set(curve["provenance"]["topics"])
    by_arm = arms(_records(args.paper), _records(args.calibrated))
    if not by_arm:
        parser.error("no records of the paper's rankers or of a calibrated ranker")
    common = set.intersection(*(set(trials) for trials in by_arm.values()))
    topic = {t: next(iter(by_arm.values()))[t]["topic"] for t in common}
    held = {t for t in common if topic[t] not in fit_topics}
    print(f"fitted curve v = {curve['weights']} (fit on {len(fit_topics)} topics)")
    for label, keep in (("held-out", held), ("all", common)):
        print(f"{label} trials ({len(keep)} in every arm):")
        for name, trials in by_arm.items():
            print(_line(name, summary(trials, keep)))
    if args.out is not None:
        draw({name: summary(trials, held) for name, trials in by_arm.items()}, args.out)
        print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
