"""Expected exposure, group- and document-level: hand-checked values, identities, the TREC code."""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairrag_core import OTHERS, make_ranker
from fairrag_core.metrics import (
    document_expected_exposure,
    expected_exposure,
    expected_exposure_of,
    exposure_shares,
    trec_discount,
)

V1, V2 = 1.0, 1.0 / math.log2(3)  # DCG weights of ranks 1 and 2, written out


def test_two_draws_that_alternate_the_groups_are_on_target() -> None:
    ee = expected_exposure([[0, 1], [1, 0]], ["female", "male"], protected="female")
    assert ee.units == ("female", OTHERS)
    assert ee.system == pytest.approx([(V1 + V2) / 2, (V1 + V2) / 2])
    assert ee.target == pytest.approx([(V1 + V2) / 2, (V1 + V2) / 2])
    assert ee.loss == pytest.approx(0.0, abs=1e-15)
    assert ee.disparity == pytest.approx(2 * ((V1 + V2) / 2) ** 2)
    assert ee.relevance == pytest.approx(ee.disparity)


def test_always_first_is_off_target_by_hand() -> None:
    # Pool: female, male, unknown. Both draws show [female, unknown]: unknown is not protected.
    ee = expected_exposure([[0, 2], [0, 2]], ["female", "male", None], protected="female")
    half = (V1 + V2) / 2
    assert ee.system == pytest.approx([V1, V2])
    assert ee.loss == pytest.approx((V1 - half) ** 2 + (V2 - half) ** 2)
    assert ee.disparity == pytest.approx(V1**2 + V2**2)
    assert ee.relevance == pytest.approx(half * (V1 + V2))


def test_several_groups_and_explicit_weights() -> None:
    ee = expected_exposure(
        [[0, 1, 2], [2, 1, 0]],
        ["a", "b", "c"],
        target={"a": 0.5, "b": 0.25, "c": 0.25},
        exposure=[3.0, 2.0, 1.0],
    )
    assert ee.units == ("a", "b", "c", OTHERS)
    assert ee.system.tolist() == [2.0, 2.0, 2.0, 0.0]
    assert ee.target.tolist() == [3.0, 1.5, 1.5, 0.0]
    assert ee.loss == pytest.approx(1.0 + 0.25 + 0.25)


@st.composite
def draws(draw: st.DrawFn) -> tuple[np.ndarray, list[Hashable]]:
    n = draw(st.integers(1, 12))
    k = draw(st.integers(1, n))
    n_draws = draw(st.integers(1, 20))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rankings = np.stack([rng.permutation(n)[:k] for _ in range(n_draws)])
    groups = draw(st.lists(st.sampled_from(["female", "male", None]), min_size=n, max_size=n))
    return rankings, groups


@settings(max_examples=60, deadline=None)
@given(sample=draws(), share=st.sampled_from([0.0, 0.3, 0.5]))
def test_identities_and_agreement_with_the_per_ranking_exposure_shares(
    sample: tuple[np.ndarray, list[Hashable]], share: float
) -> None:
    rankings, groups = sample
    ee = expected_exposure(rankings, groups, protected="female", target_share=share)
    total = sum(1.0 / math.log2(i + 1) for i in range(1, rankings.shape[1] + 1))
    # All exposure is handed out, and the target hands out the same amount.
    assert ee.system.sum() == pytest.approx(total)
    assert ee.target.sum() == pytest.approx(total)
    # EE-L = EE-D - 2 EE-R + |T|^2 (expand the square; Diaz et al. 2020).
    assert ee.loss == pytest.approx(
        ee.disparity - 2 * ee.relevance + float(ee.target @ ee.target), abs=1e-9
    )
    # E_female is the mean over draws of the ranking's female exposure share times the total.
    shares = [exposure_shares([groups[i] for i in row]).get("female", 0.0) for row in rankings]
    assert ee.system[0] == pytest.approx(np.mean(shares) * total)


def test_document_level_by_hand() -> None:
    # Two relevant documents share rank 1 (k = 1) equally in the ideal policy.
    ee = document_expected_exposure([[0], [1]], [1, 1, 0])
    assert ee.system.tolist() == [0.5, 0.5, 0.0]
    assert ee.target.tolist() == [0.5, 0.5, 0.0]
    assert ee.loss == 0.0
    # Graded, k = 2: grade 2 gets rank 1; the grade-1 block holds ranks 2-3, of which only rank
    # 2 is shown, so each grade-1 document is owed V2 / 2; grade 0 is owed nothing.
    graded = document_expected_exposure([[0, 1], [0, 1]], [2, 1, 1, 0])
    assert graded.target == pytest.approx([V1, V2 / 2, V2 / 2, 0.0])
    assert graded.system == pytest.approx([V1, V2, 0.0, 0.0])
    assert graded.loss == pytest.approx(2 * (V2 / 2) ** 2)
    assert graded.relevance == pytest.approx(V1 * V1 + V2 * V2 / 2)
    # Fewer relevant documents than k: the non-relevant ones share the rest equally.
    rest = document_expected_exposure([[2, 0]], [0, 0, 1])
    assert rest.target == pytest.approx([V2 / 2, V2 / 2, V1])


@settings(max_examples=60, deadline=None)
@given(sample=draws(), grades=st.lists(st.integers(0, 3), min_size=12, max_size=12))
def test_document_level_hands_out_all_exposure_and_ties_get_equal_targets(
    sample: tuple[np.ndarray, list[Hashable]], grades: list[int]
) -> None:
    rankings, _ = sample
    n = max(int(rankings.max()) + 1, rankings.shape[1])
    relevance = grades[:n]
    ee = document_expected_exposure(rankings, relevance)
    total = sum(1.0 / math.log2(i + 1) for i in range(1, rankings.shape[1] + 1))
    assert ee.system.sum() == pytest.approx(total)
    assert ee.target.sum() == pytest.approx(total)
    for grade in set(relevance):
        owed = ee.target[np.asarray(relevance) == grade]
        assert np.allclose(owed, owed[0])
    # A more relevant grade is never owed less.
    order = np.argsort(relevance)
    assert (np.diff(ee.target[order]) >= -1e-12).all()


def eel_reference(
    rankings: np.ndarray, groups: list[Hashable], levels: list[Hashable], target: np.ndarray
) -> tuple[float, float, float]:
    """TREC 2022 Task 2's EE-L / EE-D / EE-R, re-implemented from the public evaluation code.

    fair-trec/trec2022-fair-public, ``wptrec/metrics/eel.py`` (``EELMetric.qrs_exposure`` and
    ``__call__``, one fairness dimension, every document relevant so ``only_rel`` keeps all)
    with ``wptrec/metrics/common.py``'s ``discount``: per ranking the float32 discount
    ``1 / log2(max(i, 2))`` weights each document's one-hot group alignment, summed within a
    ranking and divided by the number of rankings; the target distribution is scaled by the sum
    of the discount of a full-length ranking (``target_len``); then ``dot(delta, delta)``,
    ``dot(s, s)`` and ``dot(s, t)``.
    """
    align = np.eye(len(levels))[[levels.index(g) for g in groups]]  # page alignment rows

    def discount(n: int) -> np.ndarray:
        ranks = np.maximum(np.arange(1, n + 1, dtype="f4"), 2)
        return np.reciprocal(np.log2(ranks))

    exposure = np.zeros(len(levels))
    for ranking in rankings:
        weighted = align[ranking] * discount(len(ranking))[:, None]
        exposure += weighted.sum(axis=0)
    exposure /= len(rankings)
    target_exposure = target * np.sum(discount(rankings.shape[1]))
    delta = exposure - target_exposure
    return (
        float(np.dot(delta, delta)),
        float(np.dot(exposure, exposure)),
        float(np.dot(exposure, target_exposure)),
    )


def test_group_level_equals_the_trec_2022_task_2_code_on_random_rankings() -> None:
    rng = np.random.default_rng(2022)
    levels: list[Hashable] = ["female", "male", None]  # TREC keeps unknown as its own level
    for _ in range(200):
        n = int(rng.integers(2, 40))
        k = int(rng.integers(1, min(n, 20) + 1))
        rankings = np.stack([rng.permutation(n)[:k] for _ in range(int(rng.integers(1, 50)))])
        groups = rng.choice(np.array(levels, dtype=object), size=n).tolist()
        shares = rng.dirichlet(np.ones(3))
        shares[-1] = 1.0 - shares[0] - shares[1]
        target = dict(zip(levels, shares.tolist(), strict=True))
        ours = expected_exposure(rankings, groups, target=target, exposure=trec_discount(k))
        loss, disparity, relevance = eel_reference(rankings, groups, levels, shares)
        assert ours.units[:3] == tuple(levels)
        # The reference's discount is float32: equal to ~1e-7, not bit for bit.
        assert ours.loss == pytest.approx(loss, rel=1e-5, abs=1e-9)
        assert ours.disparity == pytest.approx(disparity, rel=1e-6)
        assert ours.relevance == pytest.approx(relevance, rel=1e-6)


class _SamplingRanker:
    """A ranker double with a batch sampler: records the call, returns fixed draws."""

    def __init__(self) -> None:
        inner = make_ranker("standard", protected="female")
        self.target, self.exposure = inner.target, inner.exposure
        self.calls: list[tuple[int, int, object]] = []

    def sample(
        self, scores: object, groups: object, k: int, n_samples: int, *, rng: object = None
    ) -> np.ndarray:
        self.calls.append((k, n_samples, rng))
        return np.tile(np.array([1, 0]), (n_samples, 1))


def test_expected_exposure_of_uses_the_batch_sampler_when_there_is_one() -> None:
    ranker = _SamplingRanker()
    ee = expected_exposure_of(ranker, [0.9, 0.1], ["male", "female"], 2, 7, rng=3)  # type: ignore[arg-type]
    assert ranker.calls == [(2, 7, 3)]
    assert ee.system == pytest.approx([V1, V2])


def test_expected_exposure_of_loops_over_rank_otherwise_and_honours_the_seed() -> None:
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    groups = ["male"] * 3 + ["female"] * 3
    standard = expected_exposure_of(make_ranker("standard", protected="female"), scores, groups, 3)
    assert standard.system == pytest.approx([0.0, V1 + V2 + 0.5])
    stochastic = make_ranker("stochastic", protected="female", alpha=1.0)
    first = expected_exposure_of(stochastic, scores, groups, 3, 200, rng=5)
    again = expected_exposure_of(stochastic, scores, groups, 3, 200, rng=5)
    assert first.system.tolist() == again.system.tolist()
    # At alpha = 1 exposure spreads: the women get a real part of it, and EE-L falls.
    assert 0.5 < first.system[0] < 1.5
    assert first.loss < standard.loss


@pytest.mark.parametrize(
    ("rankings", "groups", "error", "message"),
    [
        ([0, 1], ["a", "b"], ValueError, "rankings must be 2-D"),
        (np.empty((0, 2), dtype=int), ["a", "b"], ValueError, "at least one ranking"),
        ([[0, 2]], ["a", "b"], ValueError, "row 0 holds \\[0, 2\\].*\\[0, 2\\)"),
        ([[1, 1]], ["a", "b"], ValueError, "row 0 repeats a pool index"),
        ([[0.5, 1.0]], ["a", "b"], TypeError, "integer pool indices"),
    ],
)
def test_bad_rankings_raise_naming_the_argument(
    rankings: Any, groups: list[str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        expected_exposure(rankings, groups, protected="a")


def test_bad_weights_samples_and_targets_raise() -> None:
    with pytest.raises(ValueError, match="at least k=2 values"):
        expected_exposure([[0, 1]], ["a", "b"], protected="a", exposure=[1.0])
    with pytest.raises(ValueError, match="relevance must be 1-D and finite"):
        document_expected_exposure([[0]], [math.nan])
    with pytest.raises(ValueError, match="n_samples must be an integer >= 1, got 0"):
        expected_exposure_of(make_ranker("standard", protected="a"), [1.0], ["a"], 1, 0)
    with pytest.raises(ValueError, match="needs a fairness target"):
        expected_exposure_of(make_ranker("standard"), [1.0], ["a"], 1)
