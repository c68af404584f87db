"""Amortized disparity over a stream of rankings: hand-checked values and identities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairrag_core import OTHERS
from fairrag_core.metrics import (
    amortized_disparity,
    amortized_exposure_shares,
    exposure_disparity,
    exposure_share,
)

V1, V2 = 1.0, 1.0 / math.log2(3)


def test_two_rankings_by_hand() -> None:
    # [f, m] and [m, m]: the women got V1 of 2 (V1 + V2).
    stream = [["female", "male"], ["male", "male"]]
    share = V1 / (2 * (V1 + V2))
    assert amortized_disparity(stream, protected="female") == pytest.approx(abs(share - 0.5))
    assert amortized_exposure_shares(stream, protected="female") == pytest.approx(
        {"female": share, OTHERS: 1 - share}
    )


def test_rankings_of_different_lengths_weigh_by_their_total_exposure() -> None:
    stream = [["female"], ["male", None]]  # None is never protected
    share = V1 / (V1 + V1 + V2)
    assert amortized_disparity(stream, protected="female", target_share=0.3) == pytest.approx(
        abs(share - 0.3)
    )


def test_a_stream_can_be_on_target_while_every_list_is_not() -> None:
    stream = [["female", "female"], ["male", "male"]]
    assert amortized_disparity(stream, protected="female") == pytest.approx(0.0, abs=1e-15)
    assert all(exposure_disparity(r, protected="female") == 0.5 for r in stream)


def test_several_groups_use_half_the_l1_distance() -> None:
    stream = np.array([["a", "b"], ["b", "c"]], dtype=object)
    target = {"a": 0.5, "b": 0.25, "c": 0.25}
    total = 2 * (V1 + V2)
    shares = np.array([V1, V2 + V1, V2]) / total
    expected = 0.5 * np.abs(shares - [0.5, 0.25, 0.25]).sum()
    assert amortized_disparity(stream, target=target) == pytest.approx(expected)


labels = st.sampled_from(["female", "male", None])


@settings(max_examples=80, deadline=None)
@given(
    stream=st.lists(st.lists(labels, min_size=1, max_size=8), min_size=1, max_size=15),
    target_share=st.sampled_from([0.2, 0.5]),
    model=st.sampled_from(["dcg", "uniform", "rbp"]),
)
def test_equals_the_exposure_weighted_mean_of_per_ranking_shares(
    stream: list[list[str | None]], target_share: float, model: str
) -> None:
    totals = [sum(model_weights(model, len(r))) for r in stream]
    shares = [exposure_share(r, "female", exposure=model) for r in stream]
    weighted = sum(s * w for s, w in zip(shares, totals, strict=True)) / sum(totals)
    got = amortized_disparity(stream, protected="female", target_share=target_share, exposure=model)
    assert got == pytest.approx(abs(weighted - target_share), abs=1e-12)
    if len({len(r) for r in stream}) == 1:  # equal k: the mean share's distance to target
        assert got == pytest.approx(abs(float(np.mean(shares)) - target_share), abs=1e-12)


def model_weights(model: str, k: int) -> list[float]:
    """Position weights written out independently of the package."""
    if model == "dcg":
        return [1 / math.log2(i + 1) for i in range(1, k + 1)]
    if model == "rbp":
        return [0.8 ** (i - 1) for i in range(1, k + 1)]
    return [1.0] * k


def test_empty_stream_is_nan_and_bad_input_raises() -> None:
    assert math.isnan(amortized_disparity([], protected="female"))
    assert math.isnan(amortized_disparity([[], []], protected="female"))
    with pytest.raises(TypeError, match="stream must be a sequence of rankings"):
        amortized_disparity("female", protected="female")
    with pytest.raises(TypeError, match=r"stream\[1\] must hold hashable labels"):
        amortized_disparity([["female"], [["x"]]], protected="female")
    with pytest.raises(ValueError, match="no fairness target"):
        amortized_disparity([["female"]])
    with pytest.raises(ValueError, match="stream must be 2-D"):
        amortized_disparity(np.array(["female", "male"]), protected="female")


def test_a_per_group_fitted_model_weighs_the_stream_by_its_group_factors():
    """A researcher's trial: under a per-group fitted curve ``amortized_disparity`` of a stream
    of one ranking was 0 where that ranking's ``exposure_disparity`` was 1/6 (the factors
    ``lambda_g`` were left out of the stream's shares); the study's amortized table read a
    calibrated ranker 4 points off target. A stream of one ranking is that ranking's share."""
    from fairrag_core.exposure import ExposureModel, FittedCurve
    from fairrag_core.metrics import amortized_exposure_shares, exposure_disparity, exposure_share

    model = ExposureModel.fitted(
        FittedCurve((0.5, 0.3, 0.2), factors=(("female", 2.0), ("male", 1.0)))
    )
    ranking = ["male", "female", "male"]
    shares = amortized_exposure_shares([ranking], protected="female", exposure=model)
    assert shares["female"] == pytest.approx(exposure_share(ranking, "female", exposure=model))
    assert amortized_disparity(
        [ranking], protected="female", target_share=0.5, exposure=model
    ) == pytest.approx(
        exposure_disparity(ranking, protected="female", target_share=0.5, exposure=model)
    )
    # two rankings: expected attributions summed over the stream (lambda_g v_i), by hand
    stream = [ranking, ["female", "male", "male"]]
    female = 2.0 * 0.3 + 2.0 * 0.5
    total = (0.5 + 2.0 * 0.3 + 0.2) + (2.0 * 0.5 + 0.3 + 0.2)
    assert amortized_exposure_shares(stream, protected="female", exposure=model)[
        "female"
    ] == pytest.approx(female / total)
    with pytest.raises(ValueError, match="the stream shows"):
        amortized_disparity([["other"]], protected="female", exposure=model)
