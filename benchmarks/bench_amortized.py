"""Fairness over a stream: the study's 80 questions as one stream per ranker (docs/SPEC.md item 6).

Run (best after ``make study`` has built the index, which is built here otherwise):
``.venv/bin/python benchmarks/bench_amortized.py [--grid 10:8,20:6] [--orders 20]
[--integral 0.004,0.012] [--frontier 3,4,5,6,7,8 --orders 8
--figure docs/figures/amortized_frontier.png]``.

The 80 pools are the study's own (``fairrag_study.sweep.load_pools``, as the sweep reads them):
its corpus, its cached Chroma index, its 80 (scenario, topic) trials with their per-trial
seeds, its nDCG@5 relevance (a document is relevant when it belongs
to the trial's topic). Each ranker ranks the 80 pools in trial order, one ranking each; the
amortized ranker carries one in-memory ledger through the stream. Printed per ranker: the
amortized disparity ``|Σ_t ES_female,t W_t / Σ_t W_t − 0.5|`` (docs/SPEC.md, "Metrics over many
rankings"), the mean per-query exposure disparity, the mean nDCG@5 and its loss against
standard. Goals (issue 13): amortized disparity of ``amortized`` < 0.02, and its nDCG@5 loss at
most half of representative_stochastic's. ``--orders N`` repeats the streams in N shuffled
trial orders (with other seeds) to show how much one order's figure depends on luck.

Beside the rankers it prints the score-only reference: the loss of one constant bonus to every
protected score, chosen in hindsight for the whole stream, at the target share and at the
goal's disparity. ``--integral`` adds an experiment (not a shipped ranker): a deterministic
online controller whose bonus is the integral of the stream's shortfall, on the study order
and the ``--orders`` shuffled ones, with how often it meets both goals.

``--frontier ALPHAS`` measures spread beside the stream (issue 26; :mod:`fairrag_study.frontier`,
the implementation the study's report runs on the study order): before each pool is ranked,
``--samples`` rankings (default 200) are drawn from the state the stream has reached
(``ranker.sample``, which adds nothing to the ledger), and per ranker it prints the median
number of distinct top-k lists, the mean entropy of rank 1 (bits) and the mean document-level
expected-exposure loss (EE-L, :func:`fairrag_core.metrics.document_expected_exposure`, relevance =
the trial's topic; docs/SPEC.md "Metrics over many rankings"), on the study order and the
``--orders`` shuffled ones, for representative_stochastic, stochastic and ``amortized`` at each
alpha without spread, or each ``alpha:spread`` pair (default gain). Goals (issue 26, means
over the orders): stream disparity < 0.01 in every order, EE-L no worse than
representative_stochastic's, nDCG@5 loss at most 0.65x representative_stochastic's; each
printed with its figure and floor. ``--figure PATH`` draws the frontier (EE-L against nDCG@5
loss).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import numpy as np

from fairrag_core import available_rankers, position_weights
from fairrag_core.metrics import ndcg_at_k
from fairrag_core.rankers.amortized import DEFAULT_ALPHA, DEFAULT_SPREAD
from fairrag_study import frontier as spread
from fairrag_study.dataset import TREC_GENDER
from fairrag_study.pools import QuestionPool
from fairrag_study.study import StudyConfig
from fairrag_study.sweep import load_pools

RANKERS = tuple(available_rankers())
GOAL_DISPARITY = 0.02
SPREAD_DISPARITY = spread.SPREAD_DISPARITY
SPREAD_LOSS_RATIO = spread.SPREAD_LOSS_RATIO
DEFAULTS: dict[str, float | None] = {"alpha": DEFAULT_ALPHA, "spread": DEFAULT_SPREAD}
"""The amortized ranker's defaults (alpha 7, spread 4 since issue 26; docs/SPEC.md item 6)."""
OLD_DEFAULTS: dict[str, float | None] = {"alpha": 8.0, "spread": None}
"""Its defaults before issue 26 (alpha 8 without spread)."""
CONFIG = StudyConfig(progress=False, per_group=TREC_GENDER.per_group)
TARGET = TREC_GENDER.target_arguments()

assert TREC_GENDER.protected is not None and TREC_GENDER.target_share is not None
PROTECTED, TARGET_SHARE = TREC_GENDER.protected, TREC_GENDER.target_share
shuffled = spread.shuffled
setting_label = spread.setting_label


def run_stream(
    name: str,
    pools: list[QuestionPool],
    k: int,
    params: Mapping[str, float | None] | None = None,
    *,
    samples: int = 0,
) -> dict[str, float]:
    """One stream of ``name`` (built as the study builds it, ``params`` on top): every pool
    once, in order (:func:`fairrag_study.frontier.run_stream`, the study's implementation)."""
    ranker = spread.build_setting(
        name, params or {}, dataset=TREC_GENDER, seed=CONFIG.seed, alpha=CONFIG.alpha
    )
    return spread.run_stream(ranker, pools, k, target=TARGET, samples=samples)


def bonus_stream(pools: list[QuestionPool], k: int, bonus: float) -> tuple[float, float]:
    """(stream share of the protected group, mean nDCG@k) when every pool is ranked by
    ``score + bonus`` for protected candidates (deterministic, ties in pool order)."""
    weights = position_weights(k)
    exposure = total = 0.0
    ndcgs = []
    for pool in pools:
        protected = np.array([group == PROTECTED for group in pool.groups])
        ranking = np.argsort(-(pool.scores + bonus * protected), kind="stable")[:k]
        exposure += float(weights[: len(ranking)][protected[ranking]].sum())
        total += float(weights[: len(ranking)].sum())
        ndcgs.append(ndcg_at_k(pool.relevant[ranking], k, n_relevant=pool.n_relevant))
    return exposure / total, float(np.mean(ndcgs))


def score_only_bound(
    pools: list[QuestionPool], k: int, share: float = TARGET_SHARE
) -> tuple[float, float, float]:
    """``(bonus, stream share, nDCG@k)`` of the smallest constant bonus whose stream reaches
    ``share`` of protected exposure (bisection; the share is a non-decreasing step function of
    the bonus).

    Ranking every pool by ``score + bonus * [protected]`` maximises ``sum_t sum_i v_i s_{r_i}
    + bonus * (protected exposure)`` (rearrangement): the Lagrangian of "most score-weighted
    exposure subject to the stream's protected share". So at the bonus where the stream first
    reaches ``share``, no ranker that sees only the scores and groups serves more relevance
    *score* at that share. It knows the whole stream in advance (one bonus for all of it),
    which an online ranker does not. nDCG@k is computed from topic labels no ranker sees, so
    this is the reference the rankers' nDCG@k is read against, not a bound on it.
    """
    low, high = 0.0, float(max(p.scores.max() - p.scores.min() for p in pools)) + 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if bonus_stream(pools, k, middle)[0] >= share:
            high = middle
        else:
            low = middle
    return (high, *bonus_stream(pools, k, high))


def integral_bonus_stream(pools: list[QuestionPool], k: int, eta: float) -> tuple[float, float]:
    """(amortized disparity, mean nDCG@k) of a deterministic online controller, not a shipped
    ranker: each pool ranked by ``score + eta * max(0, target * L - L_protected) * [protected]``,
    ``L`` and ``L_protected`` the stream's exposure so far (what a ledger holds). The bonus is
    the integral of the stream's shortfall (FairCo's rule, Morik et al. 2020, on a binary
    target), so it settles near the constant bonus the stream needs without knowing it."""
    weights = position_weights(k)
    total = protected_total = 0.0
    ndcgs = []
    for pool in pools:
        protected = np.array([group == PROTECTED for group in pool.groups])
        bonus = eta * max(0.0, TARGET_SHARE * total - protected_total)
        ranking = np.argsort(-(pool.scores + bonus * protected), kind="stable")[:k]
        protected_total += float(weights[: len(ranking)][protected[ranking]].sum())
        total += float(weights[: len(ranking)].sum())
        ndcgs.append(ndcg_at_k(pool.relevant[ranking], k, n_relevant=pool.n_relevant))
    return abs(protected_total / total - TARGET_SHARE), float(np.mean(ndcgs))


def integral_experiment(pools: list[QuestionPool], k: int, etas: list[float], orders: int) -> None:
    """The study order and ``orders`` shuffled ones: how often the controller meets both goals."""
    streams = [pools] + [shuffled(pools, 1000 + i) for i in range(orders)]
    standard = [bonus_stream(stream, k, 0.0)[1] for stream in streams]
    halves = [
        (ndcg - run_stream("representative_stochastic", stream, k)["ndcg"]) / 2
        for stream, ndcg in zip(streams, standard, strict=True)
    ]
    print(
        f"\nintegral-bonus controller (not a shipped ranker) on the study order and {orders} "
        "shuffled ones:"
    )
    print(
        f"{'eta':>10}{'disp. (study)':>15}{'loss (study)':>14}{'mean disp.':>12}"
        f"{'max disp.':>11}{'mean loss':>11}{'both goals met':>16}"
    )
    shipped = []
    for stream in streams:
        figures = run_stream("amortized", stream, k)
        shipped.append((figures["amortized_disparity"], figures["ndcg"]))
    for eta, runs in [("amortized", shipped)] + [
        (eta, [integral_bonus_stream(stream, k, eta) for stream in streams]) for eta in etas
    ]:
        losses = [base - ndcg for base, (_, ndcg) in zip(standard, runs, strict=True)]
        disparities = [disparity for disparity, _ in runs]
        met = sum(
            d < GOAL_DISPARITY and loss <= half
            for d, loss, half in zip(disparities, losses, halves, strict=True)
        )
        print(
            f"{eta:>10}{disparities[0]:>15.4f}{losses[0]:>14.4f}{np.mean(disparities):>12.4f}"
            f"{max(disparities):>11.4f}{np.mean(losses):>11.4f}{met:>11}/{len(streams)}"
        )


def spread_frontier(
    pools: list[QuestionPool],
    k: int,
    settings: list[dict[str, float | None]],
    orders: int,
    samples: int,
) -> spread.Frontier:
    """Issue 26: stream disparity, nDCG@k loss and spread of representative_stochastic,
    stochastic and ``amortized`` at each setting on the study order and ``orders`` shuffled
    ones (:func:`fairrag_study.frontier.amortized_frontier`, what the study's report runs on
    the study order alone), printed."""
    result = spread.amortized_frontier(
        pools,
        k,
        settings,
        dataset=TREC_GENDER,
        samples=samples,
        seed=CONFIG.seed,
        alpha=CONFIG.alpha,
        orders=orders,
        others=("stochastic",),
    )
    reference = result.reference
    print(
        f"\nspread over the stream (issue 26): {samples} draws per pool from the state the "
        f"stream reached, study order + {orders} shuffled; means over the {result.orders} orders"
    )
    print(
        f"{'setting':<34}{'max disp.':>10}{'mean disp.':>11}{'loss':>8}{'x rs':>6}"
        f"{'EE-L':>8}{'x rs':>6}{'distinct':>9}{'H(rank1)':>9}  goals (disp/EE-L/loss)"
    )
    for r in result.rows:
        met = result.goals(r)
        print(
            f"{r.label:<34}{r.max_disparity:>10.4f}{r.disparity:>11.4f}{r.loss:>8.4f}"
            f"{r.loss / reference.loss:>6.2f}{r.ee_loss:>8.4f}"
            f"{r.ee_loss / reference.ee_loss:>6.2f}{r.distinct:>9.1f}"
            f"{r.entropy:>9.2f}  {'/'.join('yes' if m else 'no' for m in met)}"
        )
    return result


def print_spread_goals(result: spread.Frontier, label: str) -> None:
    """The three goals of issue 26 for one setting, each figure beside its floor."""
    reference = result.reference
    r = result.row(label)
    floor = SPREAD_LOSS_RATIO * reference.loss
    print(f"goals (issue 26) for {label}:")
    for what, figure, limit, strict in (
        ("stream disparity (max over orders) <", r.max_disparity, SPREAD_DISPARITY, True),
        ("document EE-L <= representative_stochastic's", r.ee_loss, reference.ee_loss, False),
        (
            f"nDCG@5 loss <= {SPREAD_LOSS_RATIO} x representative_stochastic's",
            r.loss,
            floor,
            False,
        ),
    ):
        ok = figure < limit if strict else figure <= limit
        print(f"  {what}: {figure:.4f} vs {limit:.4f}: {'yes' if ok else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--grid", default="", help="also run amortized with these gain:alpha pairs (5:4,20:8,...)"
    )
    parser.add_argument("--orders", type=int, default=0, help="shuffled trial orders to add")
    parser.add_argument(
        "--integral",
        default="",
        help="also run the integral-bonus controller experiment with these etas (0.004,0.012)",
    )
    parser.add_argument(
        "--frontier",
        default="",
        help="spread frontier (issue 26): amortized at these alphas without spread, or "
        "alpha:spread pairs (3,4,8,7:4), with --orders",
    )
    parser.add_argument("--samples", type=int, default=200, help="draws per pool for spread")
    parser.add_argument("--figure", default="", help="write the spread frontier's figure here")
    args = parser.parse_args()
    config = CONFIG
    pools = load_pools(config, print)
    print(f"{len(pools)} pools of {config.pool_size} from the study index, k = {config.k}")
    runs: list[tuple[str, dict[str, float]]] = [(name, {}) for name in RANKERS]
    runs += [
        ("amortized", {"gain": float(g), "alpha": float(a)})
        for g, a in (x.split(":") for x in args.grid.split(",") if x)
    ]
    results = {}
    print(
        f"{'ranker':<34}{'amortized disp.':>16}{'stream share':>14}{'per-query disp.':>17}"
        f"{'nDCG@5':>9}{'loss':>8}"
    )
    for name, params in runs:
        label = name + "".join(f" {key}={value:g}" for key, value in params.items())
        results[label] = run_stream(name, pools, config.k, params)
        base = results["standard"]["ndcg"]
        r = results[label]
        print(
            f"{label:<34}{r['amortized_disparity']:>16.4f}{r['stream_share']:>14.4f}"
            f"{r['disparity']:>17.4f}{r['ndcg']:>9.4f}{base - r['ndcg']:>8.4f}"
        )
    loss_rs = results["standard"]["ndcg"] - results["representative_stochastic"]["ndcg"]
    loss_am = results["standard"]["ndcg"] - results["amortized"]["ndcg"]
    disparity = results["amortized"]["amortized_disparity"]
    print(
        f"goals: amortized disparity {disparity:.4f} < {GOAL_DISPARITY}: "
        f"{'yes' if disparity < GOAL_DISPARITY else 'NO'}; nDCG@5 loss {loss_am:.4f} <= half of "
        f"representative_stochastic's {loss_rs:.4f}: {'yes' if loss_am <= loss_rs / 2 else 'NO'}"
    )
    print(f"score-only reference (one constant bonus to every {PROTECTED} score, in hindsight):")
    goal_share = float(np.nextafter(TARGET_SHARE - GOAL_DISPARITY, 1.0))
    for label, share_goal in (("the target", TARGET_SHARE), ("the goal's disparity", goal_share)):
        bonus, share, ndcg = score_only_bound(pools, config.k, share_goal)
        print(
            f"  smallest bonus reaching {label}: {bonus:.4f}, stream share {share:.4f}, "
            f"nDCG@5 {ndcg:.4f} (loss {results['standard']['ndcg'] - ndcg:.4f}; goal "
            f"<= {loss_rs / 2:.4f})"
        )
    if args.integral:
        etas = [float(x) for x in args.integral.split(",")]
        integral_experiment(pools, config.k, etas, args.orders)
    if args.frontier:
        settings = []
        for item in args.frontier.split(","):
            alpha, _, power = item.partition(":")
            settings.append({"alpha": float(alpha), "spread": float(power) if power else None})
        result = spread_frontier(pools, config.k, settings, args.orders, args.samples)
        labels = {row.label for row in result.rows}
        for label in (setting_label(OLD_DEFAULTS), setting_label(DEFAULTS)):
            if label in labels:
                print_spread_goals(result, label)
        if args.figure:
            spread.draw_frontier(result, args.figure)
            print(f"figure written to {args.figure}")
    if args.orders:
        print(
            f"\nover {args.orders} shuffled trial orders "
            "(mean / max amortized disparity, mean nDCG@5):"
        )
        for name, params in runs:
            label = name + "".join(f" {key}={value:g}" for key, value in params.items())
            figures = [
                run_stream(name, shuffled(pools, 1000 + i), config.k, params)
                for i in range(args.orders)
            ]
            amortized = [f["amortized_disparity"] for f in figures]
            print(
                f"{label:<34}{np.mean(amortized):>10.4f}{max(amortized):>10.4f}"
                f"{np.mean([f['ndcg'] for f in figures]):>10.4f}"
            )


if __name__ == "__main__":
    main()
