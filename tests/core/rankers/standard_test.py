"""The standard ranker: top-k by score, ties in pool order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from fairrag_core import StandardRanker

from .strategies import pools


def test_sorts_by_score_and_keeps_pool_order_on_ties():
    ranking = StandardRanker().rank([0.2, 0.9, 0.5, 0.9, 0.5], None, 4)
    assert ranking.tolist() == [1, 3, 2, 4]


@settings(max_examples=80, deadline=None)
@given(pool=pools(min_size=1))
def test_is_the_stable_descending_sort(pool):
    scores, groups = pool
    expected = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:5]
    assert StandardRanker().rank(scores, groups, 5).tolist() == expected


def test_batch_path_equals_single_calls():
    rng = np.random.default_rng(3)
    scores = rng.random((200, 50)).round(2)  # rounding makes ties
    ranker = StandardRanker()
    batch = ranker.rank_batch(scores, 5)
    assert batch.shape == (200, 5)
    for row, expected in zip(scores, batch, strict=True):
        assert ranker.rank(row, None, 5).tolist() == expected.tolist()


def test_target_is_optional_but_kept_for_metrics():
    assert StandardRanker().target is None
    assert StandardRanker(protected="female").target.protected_share == 0.5
