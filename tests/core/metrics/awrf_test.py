"""AWRF, TREC 2022 Task 1 nDCG and score: hand-checked values and the track's published code."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from fairrag_core import OTHERS
from fairrag_core.metrics import awrf, trec_discount, trec_fair_score, trec_ndcg


def test_discount_gives_ranks_one_and_two_full_weight() -> None:
    assert trec_discount(4).tolist() == pytest.approx([1.0, 1.0, 1 / math.log2(3), 0.5])


def test_awrf_by_hand() -> None:
    # d1 = d2 = 1: one woman and one man is exactly the parity distribution.
    assert awrf(["female", "male"], protected="female") == 1.0
    # Two women: a = (1, 0) against t = (1/2, 1/2), m = (3/4, 1/4);
    # JSD^2 = (KL(a||m) + KL(t||m)) / 2 with natural logs.
    kl_a = math.log(1 / 0.75)
    kl_t = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    assert awrf(["female", "female"], protected="female") == pytest.approx(1 - (kl_a + kl_t) / 2)
    # Unknown documents are left out but keep their rank: [None, f, m] weighs f and m by d2, d3.
    d2, d3 = 1.0, 1 / math.log2(3)
    a = np.array([d2, d3]) / (d2 + d3)
    expected = 1 - jensenshannon(a, [0.5, 0.5]) ** 2
    assert awrf([None, "female", "male"], protected="female") == pytest.approx(expected)
    assert math.isnan(awrf([None, None], protected="female"))


def test_awrf_of_many_rankings_at_once_matches_one_by_one() -> None:
    rankings = [["female", "male"], ["male", "male", None], [None], ["female"]]
    together = awrf(rankings, protected="female", target_share=0.3)
    alone = [awrf(r, protected="female", target_share=0.3) for r in rankings]
    assert isinstance(together, np.ndarray)
    np.testing.assert_allclose(together, alone, equal_nan=True)
    grid = np.array([["female", "male"], ["male", "male"]], dtype=object)
    one_by_one = [awrf(row.tolist(), protected="female") for row in grid]
    np.testing.assert_allclose(awrf(grid, protected="female"), one_by_one)
    assert one_by_one[0] == 1.0


def test_trec_ndcg_by_hand() -> None:
    # [rel, non, rel] with R = 2: DCG = 1 + 1/log2(3); IDCG = d1 + d2 = 2.
    assert trec_ndcg([1, 0, 1]) == pytest.approx((1 + 1 / math.log2(3)) / 2)
    # Three relevant in the collection, run of 3 judged against a track length of 5.
    assert trec_ndcg([1, 0, 1], n_relevant=3, k=5) == pytest.approx(
        (1 + 1 / math.log2(3)) / (2 + 1 / math.log2(3))
    )
    assert trec_ndcg([0, 0]) == 0.0
    # Rank 2 weighs as much as rank 1 (d2 = 1); rank 3 weighs 1/log2(3).
    np.testing.assert_allclose(trec_ndcg([[0, 1, 0], [0, 0, 1]]), [1.0, 1 / math.log2(3)])


def test_score_is_ndcg_times_awrf() -> None:
    groups, relevant = ["female", "female", "male"], [1, 0, 1]
    expected = trec_ndcg(relevant) * awrf(groups, protected="female")
    assert trec_fair_score(groups, relevant, protected="female") == pytest.approx(expected)
    with pytest.raises(ValueError, match="same rankings"):
        trec_fair_score(groups, [1, 0], protected="female")


def qr_awrf_reference(groups: list[Hashable], levels: list[Hashable], target: np.ndarray) -> float:
    """``AWRFMetric.qr_awrf``, re-implemented from the public evaluation code of the track.

    fair-trec/trec2022-fair-public, ``wptrec/metrics/awrf.py`` with ``wptrec/metrics/common.py``
    (``discount``) and ``wptrec/dimension.py`` (``agg_alignments``, one dimension, 'mean' with
    weights): float32 discounts of the whole run, kept for documents of known alignment only;
    the discount-weighted sum of their one-hot alignments divided by the sum of those discounts;
    ``1 - jensenshannon(alignment, target) ** 2``.
    """
    n = len(groups)
    disc = np.reciprocal(np.log2(np.maximum(np.arange(1, n + 1, dtype="f4"), 2)))
    is_known = np.array([g is not None for g in groups], dtype=bool)
    known = [g for g in groups if g is not None]
    disc = disc[is_known]
    align = np.eye(len(levels))[[levels.index(g) for g in known]].reshape(-1, len(levels))
    ralign = (align * disc[:, None]).sum(axis=0) / np.sum(disc)
    dist = jensenshannon(ralign, target)
    return float(1 - dist * dist)


def qr_ndcg_reference(relevant: list[bool], n_relevant: int, target_len: int) -> float:
    """``AWRFMetric.qr_ndcg`` from the same file: float32 0/1 utility times the discount."""
    util = np.asarray(relevant).astype("f4")
    disc = np.reciprocal(np.log2(np.maximum(np.arange(1, target_len + 1, dtype="f4"), 2)))
    rel_n = min(target_len, n_relevant)
    return float(np.sum(util * disc[: len(relevant)]) / np.sum(disc[:rel_n]))


def test_equal_to_the_trec_2022_task_1_code_on_random_rankings() -> None:
    rng = np.random.default_rng(2022)
    compared = 0
    for trial in range(300):
        length = int(rng.integers(1, 60))
        labels = rng.choice(
            np.array(["female", "male", "nonbinary", None], dtype=object), size=length
        )
        groups = labels.tolist()
        if all(g is None for g in groups):
            groups[0] = "male"
        if trial % 2:
            share = float(rng.uniform(0.05, 0.95))
            spec = {"protected": "female", "target_share": share}
            # The binary target's support: female and everyone else (male and nonbinary).
            levels, target = ["female", OTHERS], np.array([share, 1 - share])
            reference_groups = [g if g in (None, "female") else OTHERS for g in groups]
        else:
            shares = rng.dirichlet(np.ones(3))
            mapping = dict(zip(["female", "male", "nonbinary"], shares.tolist(), strict=True))
            spec = {"target": mapping}
            levels, target = ["female", "male", "nonbinary", OTHERS], np.r_[shares, 0.0]
            reference_groups = groups
        relevant = (rng.random(length) < 0.4).tolist()
        n_relevant = sum(relevant) + int(rng.integers(0, 5))
        if n_relevant == 0:
            n_relevant = 1
        target_len = length + int(rng.integers(0, 10))
        expected_awrf = qr_awrf_reference(reference_groups, levels, target)
        expected_ndcg = qr_ndcg_reference(relevant, n_relevant, target_len)
        assert awrf(groups, **spec) == pytest.approx(expected_awrf, rel=1e-6, abs=1e-7)
        assert trec_ndcg(relevant, n_relevant=n_relevant, k=target_len) == pytest.approx(
            expected_ndcg, rel=1e-6
        )
        score = trec_fair_score(groups, relevant, n_relevant=n_relevant, k=target_len, **spec)
        assert score == pytest.approx(expected_ndcg * expected_awrf, rel=1e-6, abs=1e-7)
        compared += 1
    assert compared == 300


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: awrf("female", protected="female"), TypeError, "not a string"),
        (lambda: awrf(["a"], target={"a": 0.7}), ValueError, "must sum to 1"),
        (lambda: trec_ndcg([2, 0]), ValueError, "binary relevance"),
        (lambda: trec_ndcg([1, 0], k=1), ValueError, "k must be an integer >= the ranking"),
        (lambda: trec_ndcg([1, 1], n_relevant=1), ValueError, "n_relevant must be integers"),
        (lambda: trec_discount(-1), ValueError, "k must be an integer >= 0, got -1"),
    ],
)
def test_bad_input_raises_naming_the_argument(
    call: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        call()
