"""The forced-exposure ranker: floor(k * share) quotas filled greedily by score."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fairrag_core import ForcedExposureRanker, StandardRanker
from fairrag_core.rankers.forced_exposure import slot_quotas

from .strategies import fairness_configs, pools


def test_quotas_are_floors_without_floating_point_loss():
    assert slot_quotas(5, np.array([0.5, 0.5])).tolist() == [2, 2]
    assert slot_quotas(100, np.array([0.29, 0.71])).tolist() == [29, 71]


def test_protected_below_everyone_gets_its_two_slots_at_the_end():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.2, 0.1]
    groups = ["male"] * 5 + ["female"] * 2
    ranking = ForcedExposureRanker(protected="female").rank(scores, groups, 5)
    assert ranking.tolist() == [0, 1, 2, 5, 6]


def test_pool_meeting_quotas_returns_top_k_by_score():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    groups = ["female", "male", "female", "male", "male", "female"]
    ranking = ForcedExposureRanker(protected="female").rank(scores, groups, 5)
    assert ranking.tolist() == StandardRanker().rank(scores, groups, 5).tolist()


@settings(max_examples=150, deadline=None)
@given(pool=pools(min_size=1), k=st.integers(1, 12), config=fairness_configs())
def test_meets_quotas_whenever_the_pool_holds_enough(pool, k, config):
    scores, groups = pool
    ranker = ForcedExposureRanker(**config)
    result = ranker.rank_detailed(scores, groups, k)
    kk = min(k, len(scores))
    target = ranker.target
    codes = target.encode(groups)
    shown = codes[result.indices]
    quotas = slot_quotas(kk, target.shares)
    for g, label in enumerate(target.groups):
        available = int((codes == g).sum())
        owed = min(int(quotas[g]), available)
        assert int((shown == g).sum()) >= owed
        assert result.quota_shortfall.get(label, 0) == max(0, int(quotas[g]) - available)


@settings(max_examples=100, deadline=None)
@given(pool=pools(min_size=1), k=st.integers(1, 12))
def test_pool_already_meeting_quotas_gives_standard_top_k(pool, k):
    scores, groups = pool
    ranker = ForcedExposureRanker(protected="female")
    top = StandardRanker().rank(scores, groups, k)
    codes = ranker.target.encode(groups)
    quotas = slot_quotas(len(top), ranker.target.shares)
    if all((codes[top] == g).sum() >= quotas[g] for g in range(len(quotas))):
        assert ranker.rank(scores, groups, k).tolist() == top.tolist()


def test_several_groups_and_shortfall_given_back():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05]
    groups = ["a"] * 6 + ["b"] * 3 + ["c"]
    ranker = ForcedExposureRanker(target={"a": 0.2, "b": 0.4, "c": 0.4})
    result = ranker.rank_detailed(scores, groups, 5)
    # a owed 1, b owed 2, c owed 2 but has one candidate: its missing slot goes by score (to a).
    assert result.quota_shortfall == {"c": 1}
    assert result.indices.tolist() == [0, 1, 6, 7, 9]
