"""Tests for fairrag_core.stats: values against scipy and by hand, NaN accounting, errors."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from fairrag_core.stats import (
    Descriptive,
    PairwiseRow,
    TTest,
    critical_t,
    describe,
    describe_table_markdown,
    pairwise_t_tests,
    pairwise_table_markdown,
    student_t_ppf,
    student_t_sf,
    t_test,
    zscore_outliers,
)


def _scipy_ttest(a, b):
    with warnings.catch_warnings():
        # scipy warns about precision loss on (nearly) constant samples; the values still count.
        warnings.simplefilter("ignore", RuntimeWarning)
        return scipy_stats.ttest_ind(a, b, equal_var=True)


# --- describe ---------------------------------------------------------------------------------


def test_describe_plain_values():
    d = describe([1.0, 2.0, 3.0, 4.0])
    assert d == Descriptive(
        mean=2.5, std=pytest.approx(np.std([1, 2, 3, 4], ddof=1)), n=4, n_missing=0
    )


def test_describe_counts_nans_and_leaves_them_out():
    d = describe([1.0, math.nan, 2.0, 3.0, math.nan])
    assert d.mean == pytest.approx(2.0)
    assert d.std == pytest.approx(1.0)
    assert (d.n, d.n_missing) == (3, 2)


@pytest.mark.parametrize("values, n_missing", [([], 0), ([math.nan, math.nan], 2)])
def test_describe_empty_or_all_nan(values, n_missing):
    d = describe(values)
    assert math.isnan(d.mean) and math.isnan(d.std)
    assert (d.n, d.n_missing) == (0, n_missing)


def test_describe_single_value_has_nan_std():
    d = describe(np.array([0.25]))
    assert d.mean == 0.25 and math.isnan(d.std) and d.n == 1


def test_describe_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        describe([1.0, 2.0]).mean = 0.0  # type: ignore[misc]


# --- critical_t -------------------------------------------------------------------------------


def test_critical_t_at_study_df_and_alpha():
    assert round(critical_t(158, 0.01), 4) == 2.6073
    assert round(critical_t(158), 4) == 2.6073  # alpha defaults to the study's 0.01


def test_critical_t_matches_scipy_ppf():
    assert critical_t(10, 0.05) == pytest.approx(scipy_stats.t.ppf(0.975, 10))
    assert critical_t(10, 0.05) == pytest.approx(2.228138852)


# --- t_test -----------------------------------------------------------------------------------


def test_t_test_hand_computed():
    # means 2 and 5, both variances 1: s_p² = 1, t = −3 / sqrt(2/3).
    res = t_test([1, 2, 3], [4, 5, 6])
    assert isinstance(res, TTest)
    assert res.t == pytest.approx(-3.674234614, abs=1e-9)
    assert res.df == 4
    assert res.p == pytest.approx(2 * scipy_stats.t.sf(3.674234614, 4))
    assert res.critical_t == pytest.approx(scipy_stats.t.ppf(0.995, 4))  # 4.604
    assert res.significant is False  # |t| 3.67 < 4.60 at alpha 0.01
    assert t_test([1, 2, 3], [4, 5, 6], alpha=0.05).significant is True  # 3.67 > 2.78
    assert (res.mean_a, res.mean_b, res.n_a, res.n_b) == (2.0, 5.0, 3, 3)


def test_t_test_reproduces_scipy_on_study_sized_samples():
    rng = np.random.default_rng(20240601)
    a, b = rng.normal(0.42, 0.2, 80), rng.normal(0.30, 0.2, 80)
    res = t_test(a, b)
    ref = scipy_stats.ttest_ind(a, b, equal_var=True)
    assert res.df == 158 == ref.df
    assert res.t == pytest.approx(ref.statistic, rel=1e-12)
    assert res.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert res.critical_t == pytest.approx(2.6073, abs=5e-5)
    assert res.significant == (abs(ref.statistic) > 2.6073036918811954)
    assert res.significant == (ref.pvalue < 0.01)


def test_t_test_drops_and_counts_nans():
    a, b = [1.0, math.nan, 2.0, 3.0], [math.nan, 4.0, 5.0, 6.0, math.nan]
    res = t_test(a, b)
    clean = t_test([1, 2, 3], [4, 5, 6])
    assert (res.t, res.df, res.p) == (clean.t, clean.df, clean.p)
    assert (res.n_a, res.n_missing_a, res.n_b, res.n_missing_b) == (3, 1, 3, 2)
    assert (res.n_a, res.n_missing_a) == (describe(a).n, describe(a).n_missing)


def test_t_test_constant_samples_follow_scipy():
    res = t_test([1, 1, 1], [2, 2, 2])
    assert res.t == -math.inf and res.p == 0.0 and res.significant
    same = t_test([1, 1, 1], [1, 1, 1])
    assert math.isnan(same.t) and math.isnan(same.p) and not same.significant


_finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_subnormal=False)


@settings(max_examples=200, deadline=None)
@given(
    a=st.lists(_finite, min_size=2, max_size=40),
    b=st.lists(_finite, min_size=2, max_size=40),
    nans_a=st.integers(0, 3),
    nans_b=st.integers(0, 3),
)
def test_t_test_matches_scipy_property(a, b, nans_a, nans_b):
    res = t_test(a + [math.nan] * nans_a, [math.nan] * nans_b + b)
    ref = _scipy_ttest(a, b)
    assert res.df == len(a) + len(b) - 2 == ref.df
    assert (res.n_missing_a, res.n_missing_b) == (nans_a, nans_b)
    pooled_var = ((len(a) - 1) * np.var(a, ddof=1) + (len(b) - 1) * np.var(b, ddof=1)) / res.df
    if pooled_var < 1e-12:  # (near-)constant samples: cancellation makes t arbitrary in both
        return
    assert res.t == pytest.approx(ref.statistic, rel=1e-7, abs=1e-9)
    assert res.p == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-12)
    assert res.significant == (abs(res.t) > critical_t(res.df, 0.01))


# --- pairwise ---------------------------------------------------------------------------------


def _study_like_samples():
    rng = np.random.default_rng(7)
    return {
        "standard": rng.normal(0.42, 0.2, 80),
        "stochastic": rng.normal(0.41, 0.2, 80),
        "forced_exposure": rng.normal(0.25, 0.2, 80),
        "representative_stochastic": rng.normal(0.04, 0.2, 80),
    }


def test_pairwise_every_unordered_pair_in_mapping_order():
    samples = _study_like_samples()
    rows = pairwise_t_tests(samples)
    assert [(r.a, r.b) for r in rows] == [
        ("standard", "stochastic"),
        ("standard", "forced_exposure"),
        ("standard", "representative_stochastic"),
        ("stochastic", "forced_exposure"),
        ("stochastic", "representative_stochastic"),
        ("forced_exposure", "representative_stochastic"),
    ]
    for row in rows:
        assert isinstance(row, PairwiseRow)
        single = t_test(samples[row.a], samples[row.b])
        assert (row.t, row.df, row.p, row.critical_t, row.significant) == (
            single.t,
            single.df,
            single.p,
            single.critical_t,
            single.significant,
        )
        assert row.mean_a == pytest.approx(np.mean(samples[row.a]))
        assert row.mean_b == pytest.approx(np.mean(samples[row.b]))
        assert row.df == 158


def test_pairwise_passes_alpha_and_handles_one_sample():
    rows = pairwise_t_tests({"x": [1, 2, 3], "y": [4, 5, 6]}, alpha=0.05)
    assert rows[0].critical_t == pytest.approx(scipy_stats.t.ppf(0.975, 4))
    assert rows[0].significant
    assert pairwise_t_tests({"only": [1, 2, 3]}) == []


def test_pairwise_error_names_the_sample():
    with pytest.raises(ValueError, match=r"samples\['short'\].*at least 2"):
        pairwise_t_tests({"ok": [1, 2, 3], "short": [1.0, math.nan]})


# --- Markdown renderers -----------------------------------------------------------------------


def test_pairwise_table_markdown_content():
    rows = pairwise_t_tests({"x": [1, 2, 3], "y": [4, 5, 6], "z": [1, 2, 3.5]})
    lines = pairwise_table_markdown(rows).splitlines()
    assert lines[0] == "| A | B | mean A | mean B | t | df | p | critical t | significant |"
    assert len(lines) == 2 + 3
    assert lines[2].startswith("| x | y | 2.0000 | 5.0000 | -3.6742 | 4 | ")
    assert lines[2].endswith(" | 4.6041 | no |")
    assert f"| {rows[0].p:.4g} |" in lines[2]
    assert (
        pairwise_table_markdown(rows, digits=2)
        .splitlines()[2]
        .startswith("| x | y | 2.00 | 5.00 | -3.67 | 4 | ")
    )
    assert len(pairwise_table_markdown([]).splitlines()) == 2


def test_pairwise_table_markdown_marks_significant():
    rows = pairwise_t_tests(_study_like_samples())
    text = pairwise_table_markdown(rows)
    for row, line in zip(rows, text.splitlines()[2:], strict=True):
        assert line.endswith("| yes |" if row.significant else "| no |")


def test_describe_table_markdown_content():
    table = describe_table_markdown(
        {"standard": describe([0.5, 0.25, math.nan]), "empty": describe([])}, name_header="ranker"
    )
    assert table.splitlines() == [
        "| ranker | mean | std | n | missing |",
        "|---|---:|---:|---:|---:|",
        "| standard | 0.3750 | 0.1768 | 2 | 1 |",
        "| empty | nan | nan | 0 | 0 |",
    ]


# --- z-score outliers -------------------------------------------------------------------------


def test_zscore_outliers_constructed_sample():
    # 20 values at ±1 and one at 50: z(50) ≈ 4.346, every other |z| < 0.31.
    values = np.r_[math.nan, np.tile([-1.0, 1.0], 10), 50.0]
    out = zscore_outliers(values)
    assert out.tolist() == [21]  # indices refer to the input, NaN position included
    assert out.dtype.kind == "i"
    finite = values[1:]
    z = (finite - finite.mean()) / finite.std(ddof=1)
    assert z[-1] == pytest.approx(4.346, abs=1e-3)
    # A lower threshold also catches the -1s (z ≈ -0.308) but not the +1s (z ≈ -0.126).
    assert zscore_outliers(values, threshold=0.2).tolist() == [*range(1, 21, 2), 21]


@pytest.mark.parametrize("values", [[], [3.0], [2.0, 2.0, 2.0, 2.0], [math.nan, math.nan]])
def test_zscore_outliers_none_when_undefined_or_constant(values):
    assert zscore_outliers(values).size == 0


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 1.5, math.nan])
def test_bad_alpha(alpha):
    for call in (
        lambda: critical_t(10, alpha),
        lambda: t_test([1, 2], [3, 4], alpha=alpha),
        lambda: pairwise_t_tests({"x": [1, 2], "y": [3, 4]}, alpha=alpha),
    ):
        with pytest.raises(ValueError, match="alpha"):
            call()


def test_alpha_must_be_a_number():
    with pytest.raises(TypeError, match="alpha"):
        critical_t(10, "0.01")  # type: ignore[arg-type]


@pytest.mark.parametrize("df", [0, -1, math.nan, math.inf])
def test_bad_df(df):
    with pytest.raises(ValueError, match="df"):
        critical_t(df)


@pytest.mark.parametrize(
    "a, b, name",
    [([1.0], [1, 2, 3], "a"), ([1, 2, 3], [], "b"), ([1, 2], [4.0, math.nan, math.nan], "b")],
)
def test_t_test_needs_two_values_per_sample(a, b, name):
    with pytest.raises(ValueError, match=rf"^{name} needs at least 2 non-NaN values"):
        t_test(a, b)


@pytest.mark.parametrize("threshold", [0, -3, math.nan])
def test_bad_threshold(threshold):
    with pytest.raises(ValueError, match="threshold"):
        zscore_outliers([1, 2, 3], threshold=threshold)


def test_bad_values():
    with pytest.raises(ValueError, match=r"values must be 1-D"):
        describe([[1, 2], [3, 4]])
    with pytest.raises(ValueError, match=r"infinite values at positions \[1\]"):
        describe([1, math.inf])
    with pytest.raises(ValueError, match=r"^b must hold finite numbers"):
        t_test([1, 2], [3, -math.inf])
    with pytest.raises(TypeError, match="values must be a 1-D sequence of numbers"):
        zscore_outliers(["a", "b"])


def test_the_student_t_functions_are_scipy_stats_t_over_a_grid_with_its_boundaries():
    q = np.array([0.0, 1e-300, 1e-12, 0.025, 0.5, 0.975, 1 - 1e-12, 1.0])
    x = np.array([-np.inf, -40.0, -2.0, 0.0, 1.5, 40.0, np.inf])
    for df in (1e-3, 0.5, 1, 2.5, 10, 1e6, np.inf):
        assert np.allclose(student_t_ppf(q, df), scipy_stats.t.ppf(q, df), rtol=1e-12)
        assert np.allclose(student_t_sf(x, df), scipy_stats.t.sf(x, df), rtol=1e-12)
    assert student_t_ppf(0.0, 5) == -np.inf and student_t_ppf(1.0, 5) == np.inf
    assert isinstance(student_t_ppf(0.975, 10), float)


@pytest.mark.parametrize(
    "values",
    [["1", "2", "3"], [True, False, True], np.array(["1", "2"]), [0.5, True, 0.2], [np.True_, 2.0]],
)
def test_text_and_booleans_are_not_numbers(values):
    """A core trial: describe and t_test read "1" as 1.0 and True as 1.0, where the rankers
    refuse both by name."""
    with pytest.raises(TypeError, match="values must be a 1-D sequence of numbers"):
        describe(values)
    with pytest.raises(TypeError, match="numbers"):
        t_test(values, [1.0, 2.0, 3.0])
