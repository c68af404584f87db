"""FA*IR's many-pools path in the study's expected-exposure phase and in the sweep (issue 26):
every pool ranked in one call, the same rankings as one call per pool."""

from __future__ import annotations

import numpy as np
import pytest

from fairrag_core import FairRanker
from fairrag_study.dataset import TREC_GENDER
from fairrag_study.many_rankings import batch_rankings, build_ranker, measure
from fairrag_study.plan import Trial
from fairrag_study.pools import QuestionPool
from fairrag_study.sweep import Setting, sweep_point


def _pools(count: int = 24) -> list[QuestionPool]:
    """Synthetic pools of three sizes (one shorter than k), ties and unknown groups included."""
    rng = np.random.default_rng(26)
    pools = []
    for index in range(count):
        n = (3, 12, 30)[index % 3]
        scores = np.round(rng.random(n), 1 if index % 2 else 6)
        groups = [("female", "male", None)[int(g)] for g in rng.choice(3, n, p=[0.3, 0.6, 0.1])]
        pools.append(
            QuestionPool(
                Trial(index, 1, "Topic", "Who?", int(rng.integers(1 << 31))),
                tuple(f"d{index}-{i}" for i in range(n)),
                scores,
                groups,
                rng.random(n) < 0.5,
                5,
            )
        )
    return pools


def _no_single_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("FA*IR ranked a pool alone where the batch path should rank all")

    for name in ("rank", "rank_detailed", "sample"):
        monkeypatch.setattr(FairRanker, name, refuse)


def test_batch_rankings_equal_one_call_per_pool_and_other_rankers_get_none() -> None:
    pools = _pools()
    ranker = build_ranker("fair", alpha=4.0, dataset=TREC_GENDER, seed=0)
    batch = batch_rankings(ranker, pools, 5)
    assert batch is not None and set(batch) == {pool.trial.index for pool in pools}
    for pool in pools:
        assert batch[pool.trial.index].tolist() == ranker.rank(pool.scores, pool.groups, 5).tolist()
    standard = build_ranker("standard", alpha=4.0, dataset=TREC_GENDER, seed=0)
    assert batch_rankings(standard, pools, 5) is None


def test_the_expected_exposure_phase_ranks_fairs_pools_in_one_call(monkeypatch) -> None:
    pools = _pools()
    ranker = build_ranker("fair", alpha=4.0, dataset=TREC_GENDER, seed=0)
    records = []
    for pool in pools:
        shown = ranker.rank(pool.scores, pool.groups, 5)
        records.append(
            {
                "ranker": "fair",
                "trial": pool.trial.index,
                "doc_ids": [pool.doc_ids[i] for i in shown],
                "groups": [pool.groups[i] for i in shown],
            }
        )
    expected = measure(
        pools, records, ["fair"], dataset=TREC_GENDER, k=5, samples=7, alpha=4.0, seed=0
    )
    _no_single_calls(monkeypatch)  # from here on only the batch path may rank
    monkeypatch.setattr("fairrag_study.many_rankings.batch_rankings", _one_call_per_pool_size)
    got = measure(pools, records, ["fair"], dataset=TREC_GENDER, k=5, samples=7, alpha=4.0, seed=0)
    assert got.trials == expected.trials


def _one_call_per_pool_size(ranker, pools, k):
    calls = []
    original = FairRanker.rank_batch

    def counted(self, scores, groups, k=5):
        calls.append(len(scores))
        return original(self, scores, groups, k)

    FairRanker.rank_batch = counted  # type: ignore[method-assign]
    try:
        return batch_rankings(ranker, pools, k)
    finally:
        FairRanker.rank_batch = original  # type: ignore[method-assign]
        assert sorted(calls) == [8, 8, 8]  # three pool sizes, one call each


def test_the_sweep_ranks_fairs_pools_in_one_call(monkeypatch) -> None:
    pools = [pool for pool in _pools() if len(pool.scores) >= 5]  # the sweep stacks k-lists
    setting = Setting("fair", (("p", 0.5),))
    expected = sweep_point(setting, pools, 5, 6, seed=3)
    _no_single_calls(monkeypatch)
    assert sweep_point(setting, pools, 5, 6, seed=3) == expected
