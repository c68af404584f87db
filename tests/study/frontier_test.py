"""The amortized frontier (fairrag_study.frontier, issue 26) on small synthetic pools: one stream
per setting as the study ranks it, draws that serve nothing, the goals read against
representative_stochastic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairrag_core import make_ranker
from fairrag_core.metrics import amortized_disparity, document_expected_exposure, ndcg_at_k
from fairrag_study.dataset import TREC_GENDER
from fairrag_study.frontier import (
    REFERENCE,
    SAMPLE_STREAM,
    STUDY_SETTINGS,
    amortized_frontier,
    build_setting,
    frontier_markdown,
    run_stream,
)
from fairrag_study.plan import Trial
from fairrag_study.pools import QuestionPool


def _pools(n_pools: int = 12, n: int = 30, seed: int = 0) -> list[QuestionPool]:
    """Pools whose women sit a little lower (a stream the amortized ranker must correct)."""
    rng = np.random.default_rng(seed)
    pools = []
    for index in range(n_pools):
        scores = np.sort(rng.uniform(0.2, 0.8, n))[::-1]
        groups = ["female" if rng.random() < 0.2 + 0.6 * i / n else "male" for i in range(n)]
        relevant = rng.random(n) < np.linspace(0.8, 0.1, n)
        trial = Trial(index, 1 + index % 4, "topic", "question?", int(rng.integers(2**32)))
        ids = tuple(f"d{index}-{i}" for i in range(n))
        pools.append(QuestionPool(trial, ids, scores, groups, relevant, int(relevant.sum()) + 2))
    return pools


def test_a_stream_ranks_each_pool_once_with_its_seed_and_the_draws_serve_nothing():
    pools = _pools()
    target = TREC_GENDER.target_arguments()
    ranker = build_setting("amortized", {}, dataset=TREC_GENDER, seed=2026, alpha=4.0)
    figures = run_stream(ranker, pools, 5, target=target, samples=40)
    # The same stream by hand: a fresh default ranker, each pool ranked with the trial's seed.
    by_hand = make_ranker("amortized", protected="female", seed=2026)
    stream, ndcgs, losses = [], [], []
    for pool in pools:
        rng = np.random.default_rng((pool.trial.seed, SAMPLE_STREAM))
        drawn = by_hand.sample(pool.scores, pool.groups, 5, 40, rng=rng)
        losses.append(document_expected_exposure(drawn, pool.relevant.astype(float)).loss)
        ranking = by_hand.rank(pool.scores, pool.groups, 5, rng=pool.trial.seed)
        stream.append([pool.groups[i] for i in ranking])
        ndcgs.append(ndcg_at_k(pool.relevant[ranking], 5, n_relevant=pool.n_relevant))
    assert by_hand.ledger.state().rankings == len(pools)  # the draws added nothing
    assert ranker.ledger.state().totals == pytest.approx(by_hand.ledger.state().totals)
    assert figures["amortized_disparity"] == amortized_disparity(stream, **target)
    assert figures["ndcg"] == pytest.approx(float(np.mean(ndcgs)), abs=1e-15)
    assert figures["ee_loss"] == pytest.approx(float(np.mean(losses)), abs=1e-15)
    assert 1 <= figures["distinct"] <= 40 and figures["entropy"] > 0
    assert abs(figures["stream_share"] - 0.5) == pytest.approx(figures["amortized_disparity"])
    # Without samples the spread figures are not measured.
    plain = run_stream(make_ranker("standard"), pools, 5, target=target)
    assert math.isnan(plain["ee_loss"]) and math.isnan(plain["distinct"])


def test_the_frontier_reads_every_setting_against_representative_stochastic():
    pools = _pools()
    frontier = amortized_frontier(
        pools, 5, dataset=TREC_GENDER, samples=30, seed=2026, alpha=4.0, orders=2
    )
    labels = [row.label for row in frontier.rows]
    assert labels[0] == REFERENCE and len(labels) == 1 + len(STUDY_SETTINGS)
    assert (frontier.orders, frontier.samples, frontier.pools, frontier.k) == (3, 30, 12, 5)
    reference = frontier.reference
    assert reference.params == {"alpha": 4.0}
    for row in frontier.rows:
        assert row.max_disparity >= row.disparity >= 0
        for value in (row.loss, row.study_loss, row.ee_loss, row.distinct, row.entropy):
            assert math.isfinite(value), row
        met = frontier.goals(row)
        assert met == (
            row.max_disparity < 0.01,
            row.ee_loss <= reference.ee_loss,
            row.loss <= 0.65 * reference.loss,
        )
    # The old defaults barely vary; the defaults (spread 4) vary the top of the list.
    defaults = frontier.rows[1]
    old = frontier.rows[2]
    assert (defaults.alpha, defaults.spread, old.alpha, old.spread) == (7.0, 4.0, 8.0, None)
    assert defaults.distinct > old.distinct and defaults.entropy > old.entropy
    table = frontier_markdown(frontier)
    rows = [line for line in table if line.startswith("| `")]
    assert len(rows) == len(frontier.rows)
    assert rows[1].startswith("| `amortized` alpha 7, spread 4 (defaults) | ")
    assert rows[2].startswith("| `amortized` alpha 8, no spread (old defaults) | ")
    assert "the study's order and 2 shuffled ones (means)" in table[0]


def test_a_run_where_the_reference_loses_nothing_reads_its_ratios_as_not_available(tmp_path):
    """A 4-trial study can leave representative_stochastic at zero nDCG loss: the ratios to it
    are n/a (no division by zero), the goals still read, and the figure is still drawn."""
    from fairrag_study.frontier import Frontier, FrontierRow, draw_frontier

    def row(label, ranker, params, loss, ee):
        return FrontierRow(label, ranker, params, 0.001, 0.001, loss, loss, ee, 3.0, 0.5)

    frontier = Frontier(
        [
            row(REFERENCE, REFERENCE, {"alpha": 4.0}, 0.0, 1.5),
            row("amortized alpha=7 spread=4", "amortized", {"alpha": 7.0, "spread": 4.0}, 0.0, 1.2),
            row(
                "amortized alpha=8 spread=none",
                "amortized",
                {"alpha": 8.0, "spread": None},
                0.01,
                1.9,
            ),
        ],
        orders=1,
        samples=10,
        pools=4,
        k=5,
    )
    rows = [line for line in frontier_markdown(frontier) if line.startswith("| `")]
    assert "| 0.0000 (n/a) | 1.200 (0.80) |" in rows[1]
    assert rows[1].endswith("| yes / yes / yes |") and rows[2].endswith("| yes / no / no |")
    draw_frontier(frontier, tmp_path / "frontier.png")
    assert (tmp_path / "frontier.png").read_bytes()[:4] == b"\x89PNG"
