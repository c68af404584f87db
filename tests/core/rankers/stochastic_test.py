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
