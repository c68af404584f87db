"""The stochastic (Plackett-Luce) ranker: SPEC.md's alpha properties and the batch path."""

from __future__ import annotations

import numpy as np
import pytest

from fairrag_core import StandardRanker, StochasticRanker
from fairrag_core.rankers.stochastic import plackett_luce_log_weights


def test_log_weights_normalise_to_one_two_then_power_alpha():
    weights = plackett_luce_log_weights(np.array([0.0, 5.0, 10.0]), 2.0)
    assert weights.tolist() == pytest.approx([1.0, 2.25, 4.0])
    assert plackett_luce_log_weights(np.array([3.0, 3.0]), 4.0).tolist() == [1.0, 1.0]


def test_alpha_64_returns_the_standard_ranking_in_99_percent_of_draws():
    rng = np.random.default_rng(11)
    scores = rng.permutation(np.linspace(0.0, 1.0, 50))  # distinct
    expected = StandardRanker().rank(scores, None, 5).tolist()
    ranker = StochasticRanker(alpha=64, seed=5)
    same = sum(ranker.rank(scores, None, 5).tolist() == expected for _ in range(1000))
    assert same >= 990


def test_alpha_1_keeps_every_candidates_first_place_chance_within_3x_of_uniform():
    scores = np.linspace(0.0, 1.0, 20)
    ranker = StochasticRanker(alpha=1, seed=9)
    draws = 20_000
    firsts = np.bincount([ranker.rank(scores, None, 1)[0] for _ in range(draws)], minlength=20)
    uniform = draws / 20
    assert firsts.min() > uniform / 3
    assert firsts.max() < uniform * 3


def test_first_place_follows_the_plackett_luce_probabilities():
    scores = np.array([0.0, 0.5, 1.0])
    ranker = StochasticRanker(alpha=1, seed=2)
    draws = 30_000
    firsts = np.bincount([ranker.rank(scores, None, 1)[0] for _ in range(draws)], minlength=3)
    expected = np.exp([1.0, 1.5, 2.0]) / np.exp([1.0, 1.5, 2.0]).sum()
    assert firsts / draws == pytest.approx(expected, abs=0.015)


def test_batch_path_samples_the_same_distribution_as_single_calls():
    scores = np.tile(np.linspace(0.0, 1.0, 10), (20_000, 1))
    batch = StochasticRanker(alpha=2, seed=1).rank_batch(scores, 3)
    assert batch.shape == (20_000, 3)
    assert all(len(set(row)) == 3 for row in batch[:200].tolist())
    single = StochasticRanker(alpha=2, seed=2)
    singles = np.array([single.rank(scores[0], None, 3) for _ in range(20_000)])
    for position in range(3):
        a = np.bincount(batch[:, position], minlength=10) / 20_000
        b = np.bincount(singles[:, position], minlength=10) / 20_000
        assert a == pytest.approx(b, abs=0.02)


def test_batch_is_reproducible_and_validates():
    scores = np.random.default_rng(0).random((5, 8))
    a = StochasticRanker(seed=4).rank_batch(scores, 3)
    b = StochasticRanker(seed=4).rank_batch(scores, 3)
    assert a.tolist() == b.tolist()
    with pytest.raises(ValueError, match="2-D"):
        StochasticRanker().rank_batch(scores[0], 3)
    with pytest.raises(ValueError, match="finite"):
        StochasticRanker().rank_batch(np.array([[0.1, np.nan]]), 1)


@pytest.mark.parametrize("k", [3, 40])  # the partial sort, and the full one for large k
def test_batch_rows_are_successive_single_calls(k):
    pools = np.random.default_rng(8).random((100, 50))
    pools[:10, :5] = 0.5  # ties in some pools
    pools[10] = 0.25  # a constant pool
    batch = StochasticRanker(seed=21).rank_batch(pools, k)
    ranker = StochasticRanker(seed=21)
    assert batch.tolist() == [ranker.rank(pool, None, k).tolist() for pool in pools]


@pytest.mark.parametrize("k", [3, 50])
def test_sample_rows_are_successive_single_calls(k):
    scores = np.random.default_rng(9).random(50).round(1)  # ties
    batch = StochasticRanker(alpha=8, seed=13).sample(scores, None, k, 200)
    ranker = StochasticRanker(alpha=8, seed=13)
    assert batch.tolist() == [ranker.rank(scores, None, k).tolist() for _ in range(200)]


@pytest.mark.parametrize("k", [2, 40])
def test_tied_top_scores_share_first_place_evenly_even_when_alpha_rounds_the_noise_away(k):
    scores = np.array([0.9, 0.9, 0.9] + [0.5] * 47)  # three tied best; 2 ** 64 absorbs the noise
    draws = 3000
    batch = StochasticRanker(alpha=64, seed=4).sample(scores, None, k, draws)
    firsts = np.bincount(batch[:, 0], minlength=3)
    assert firsts.sum() == draws and np.all(np.abs(firsts / draws - 1 / 3) < 0.04), firsts
    # The tied candidates fill the first places (three, or k < 3), in some order, every time.
    assert all(set(row[:3]) <= {0, 1, 2} for row in batch.tolist())
    assert len({tuple(row[:2]) for row in batch.tolist()}) == 6  # every ordered pair occurs


@pytest.mark.parametrize("alpha", [64.0, 1000.0])
def test_large_alpha_up_to_the_bound_gives_the_standard_ranking(alpha):
    scores = np.random.default_rng(11).permutation(np.linspace(0.0, 1.0, 50))
    expected = StandardRanker().rank(scores, None, 5).tolist()
    batch = StochasticRanker(alpha=alpha, seed=3).sample(scores, None, 5, 1000)
    assert (batch == expected).all(axis=1).mean() >= 0.99


def test_scores_spanning_more_than_the_largest_float_keep_their_order():
    # max - min overflows to inf: without care every candidate normalises to 1 (uniform draws).
    scores = np.array([1.7e308, -1.7e308, 0.0, 1.6e308, -1.6e308])
    weights = plackett_luce_log_weights(scores, 1.0)
    assert weights.tolist() == pytest.approx([2.0, 1.0, 1.5, 1.0 + 3.3 / 3.4, 1.0 + 0.1 / 3.4])
    batch = StochasticRanker(alpha=64, seed=0).sample(scores, None, 3, 200)
    assert (batch == [0, 3, 2]).all()  # log-weights 2 ** 64, 1.97 ** 64, 1.5 ** 64: no noise wins
    pools = np.vstack([scores, scores[::-1]])
    rows = plackett_luce_log_weights(pools, 1.0)
    assert rows.tolist() == [weights.tolist(), weights[::-1].tolist()]


@pytest.mark.parametrize("alpha", [1000.5, 1100, 5000])
def test_alpha_beyond_1000_is_refused_naming_the_bound(alpha):
    with pytest.raises(ValueError, match=r"alpha must be at most 1,000, got"):
        StochasticRanker(alpha=alpha)
