"""Tests for fairrag_core.metrics: every value is computed by hand from the SPEC.md formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fairrag_core.metrics as metrics
from fairrag_core.citations import (
    ContextDocument,
    cited_groups,
    ground_citations,
    parse_citations,
)
from fairrag_core.exposure import ExposureModel
from fairrag_core.metrics import (
    exposure_disparity,
    exposure_share,
    exposure_shares,
    fairness_gap,
    fairness_gap_magnitude,
    generation_parity,
    grounded_generation_parity,
    groundedness,
    ndcg_at_k,
    precision_at_k,
)
from fairrag_core.target import OTHERS, make_target


def dcg(i: int) -> float:
    """DCG position weight of 1-based rank i, written out independently of the package."""
    return 1.0 / math.log2(i + 1)


DCG5 = sum(dcg(i) for i in range(1, 6))


def test_all_lists_the_public_metrics():
    assert sorted(metrics.__all__) == [
        "ExpectedExposure",
        "amortized_disparity",
        "amortized_exposure_shares",
        "attributed_citation_precision",
        "attributed_generation_parity",
        "attributed_groundedness",
        "awrf",
        "document_expected_exposure",
        "expected_exposure",
        "expected_exposure_of",
        "exposure_disparity",
        "exposure_share",
        "exposure_shares",
        "fairness_gap",
        "fairness_gap_magnitude",
        "generation_parity",
        "grounded_generation_parity",
        "groundedness",
        "ndcg_at_k",
        "precision_at_k",
        "trec_discount",
        "trec_fair_score",
        "trec_ndcg",
    ]
    for name in metrics.__all__:
        doc = getattr(metrics, name).__doc__
        assert "SPEC.md" in doc or "Järvelin" in doc, name


# --- exposure share ---------------------------------------------------------------------------


def test_exposure_share_protected_at_ranks_2_and_4_under_dcg():
    ranking = ["m", "f", "m", "f", "m"]
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / DCG5
    assert exposure_share(ranking, "f") == pytest.approx(expected, abs=1e-12)
    assert exposure_share(ranking, "f") == pytest.approx(0.36005, abs=1e-5)
    assert exposure_share(ranking, "m") == pytest.approx(1 - expected, abs=1e-12)


def test_exposure_share_at_rank_1_only():
    assert exposure_share(["f", "m", "m", "m", "m"], "f") == pytest.approx(1 / DCG5, abs=1e-12)


def test_exposure_shares_of_several_groups_sum_to_one_in_first_appearance_order():
    shares = exposure_shares(["b", "a", "c", "a", None])
    assert list(shares) == ["b", "a", "c", None]
    assert shares["b"] == pytest.approx(dcg(1) / DCG5)
    assert shares["a"] == pytest.approx((dcg(2) + dcg(4)) / DCG5)
    assert shares["c"] == pytest.approx(dcg(3) / DCG5)
    assert shares[None] == pytest.approx(dcg(5) / DCG5)
    assert math.fsum(shares.values()) == pytest.approx(1.0, abs=1e-12)


def test_exposure_share_other_models():
    ranking = ["m", "f", "m", "f", "m"]
    assert exposure_share(ranking, "f", exposure="uniform") == pytest.approx(0.4)
    rbp = (0.5 + 0.125) / (1 + 0.5 + 0.25 + 0.125 + 0.0625)
    assert exposure_share(ranking, "f", exposure=ExposureModel("rbp", 0.5)) == pytest.approx(rbp)
    # the name records write (exposure_model) is accepted back, as a ranker's exposure too
    assert exposure_share(ranking, "f", exposure="rbp(0.5)") == pytest.approx(rbp)
    from fairrag_core import make_ranker
    from fairrag_core.audit import exposure_name

    ranker = make_ranker("standard", protected="f", exposure="rbp(0.5)")
    assert exposure_name(ranker.exposure) == "rbp(0.5)"
    with pytest.raises(ValueError, match=r"patience in rbp\(p\) must be a number"):
        make_ranker("standard", protected="f", exposure="rbp(half)")
    with pytest.raises(ValueError, match="patience must be in"):
        make_ranker("standard", protected="f", exposure="rbp(1.5)")


def test_exposure_share_absent_group_is_zero_and_empty_ranking_is_nan():
    assert exposure_share(["m", "m"], "f") == 0.0
    assert math.isnan(exposure_share([], "f"))
    assert exposure_shares([]) == {}


def test_exposure_share_never_counts_unknown_as_protected():
    assert exposure_share([None, None, "f"], "f") == pytest.approx(dcg(3) / (1 + dcg(2) + dcg(3)))
    assert exposure_share(["f", None], None) == pytest.approx(dcg(2) / (1 + dcg(2)))


def test_exposure_share_accepts_numpy_labels():
    ranking = np.array(["m", "f", "m", "f", "m"])
    assert exposure_share(ranking, "f") == pytest.approx(exposure_share(list(ranking), "f"))
    assert exposure_share(np.array([0, 1, 1]), 1) == pytest.approx(
        (dcg(2) + dcg(3)) / (1 + dcg(2) + dcg(3))
    )


@pytest.mark.parametrize(
    ("ranked_groups", "error", "message"),
    [
        ("female", TypeError, "ranked_groups"),
        ([["f"], "m"], TypeError, "position 0"),
        (np.array([["f", "m"]]), ValueError, "1-D"),
        (42, TypeError, "ranked_groups"),
    ],
)
def test_exposure_share_rejects_bad_rankings(ranked_groups, error, message):
    with pytest.raises(error, match=message):
        exposure_share(ranked_groups, "f")


def test_exposure_share_rejects_unknown_exposure_model():
    with pytest.raises(ValueError, match="known models"):
        exposure_share(["f"], "f", exposure="zipf")
    with pytest.raises(TypeError, match="exposure"):
        exposure_shares(["f"], exposure=3)


# --- exposure disparity -----------------------------------------------------------------------


def test_exposure_disparity_binary_is_distance_of_protected_share_from_target():
    ranking = ["m", "f", "m", "f", "m"]
    es = (dcg(2) + dcg(4)) / DCG5
    assert exposure_disparity(ranking, protected="f") == pytest.approx(abs(es - 0.5))
    assert exposure_disparity(ranking, protected="f", target_share=0.3) == pytest.approx(es - 0.3)
    assert exposure_disparity(["m"] * 5, protected="f") == pytest.approx(0.5)
    assert exposure_disparity(["f"] * 5, protected="f", target_share=0.2) == pytest.approx(0.8)
    assert exposure_disparity(["f", "m"], protected="f", exposure="uniform") == 0.0


def test_exposure_disparity_unknown_and_unnamed_groups_are_everyone_else():
    with_unknown = exposure_disparity(["f", None, "x", None, "m"], protected="f")
    with_male = exposure_disparity(["f", "m", "m", "m", "m"], protected="f")
    assert with_unknown == pytest.approx(with_male)
    assert with_unknown == pytest.approx(0.5 - 1 / DCG5)


def test_exposure_disparity_binary_equals_half_l1_with_others_bucket():
    ranking = ["m", "f", None, "f", "m"]
    binary = exposure_disparity(ranking, protected="f", target_share=0.4)
    mapping = exposure_disparity(ranking, target={"f": 0.4, OTHERS: 0.6})
    assert binary == pytest.approx(mapping, abs=1e-12)


def test_exposure_disparity_several_groups_is_half_l1_by_hand():
    target = {"a": 0.5, "b": 0.3, "c": 0.2}
    ranking = ["a", "b", "c", "d", None]
    # uniform: a .2, b .2, c .2, OTHERS (d + None) .4 owed 0 -> (.3 + .1 + 0 + .4) / 2
    assert exposure_disparity(ranking, target=target, exposure="uniform") == pytest.approx(0.4)
    es = [dcg(1) / DCG5, dcg(2) / DCG5, dcg(3) / DCG5, (dcg(4) + dcg(5)) / DCG5]
    expected = 0.5 * (abs(es[0] - 0.5) + abs(es[1] - 0.3) + abs(es[2] - 0.2) + es[3])
    assert exposure_disparity(ranking, target=target) == pytest.approx(expected, abs=1e-12)


def test_exposure_disparity_target_with_others_share():
    target = {"a": 0.25, "b": 0.25, OTHERS: 0.5}
    ranking = ["a", "b", "x", None]
    assert exposure_disparity(ranking, target=target, exposure="uniform") == pytest.approx(0.0)
    assert exposure_disparity(["a"] * 4, target=target, exposure="uniform") == pytest.approx(0.75)


def test_exposure_disparity_named_unknown_group_is_its_own_bucket():
    target = {"f": 0.5, None: 0.5}
    assert exposure_disparity(["f", None], target=target, exposure="uniform") == 0.0
    # "m" is unnamed: OTHERS, owed 0
    assert exposure_disparity(["f", "m"], target=target, exposure="uniform") == pytest.approx(0.5)


def test_exposure_disparity_accepts_a_built_target_and_empty_is_nan():
    target = make_target(protected="f", target_share=0.5)
    assert exposure_disparity(["f", "m"], target=target, exposure="uniform") == 0.0
    assert math.isnan(exposure_disparity([], protected="f"))


def test_exposure_disparity_rejects_bad_targets():
    with pytest.raises(ValueError, match="no fairness target"):
        exposure_disparity(["f"])
    with pytest.raises(ValueError, match="sum to 1"):
        exposure_disparity(["f"], target={"f": 0.5, "m": 0.6})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        exposure_disparity(["f"], protected="f", target_share=1.5)


@given(
    st.lists(st.sampled_from(["f", "m", "x", None]), min_size=1, max_size=30),
    st.floats(0.0, 1.0),
    st.sampled_from(["dcg", "rbp", "uniform"]),
)
def test_exposure_properties(ranking, share, model):
    shares = exposure_shares(ranking, exposure=model)
    assert math.fsum(shares.values()) == pytest.approx(1.0)
    assert all(0.0 <= s <= 1.0 + 1e-12 for s in shares.values())
    es = exposure_share(ranking, "f", exposure=model)
    ed = exposure_disparity(ranking, protected="f", target_share=share, exposure=model)
    assert ed == pytest.approx(abs(es - share), abs=1e-12)
    half_l1 = exposure_disparity(ranking, target={"f": share, OTHERS: 1 - share}, exposure=model)
    assert half_l1 == pytest.approx(ed, abs=1e-9)


# --- generation parity and fairness gap -------------------------------------------------------


def test_generation_parity_by_hand():
    assert generation_parity(["female", "male", "female", None], "female") == 0.5
    assert generation_parity(["female", "female", "female"], "female") == 1.0
    assert generation_parity([None, None, "male"], "female") == 0.0
    assert generation_parity(("f", "f", "m"), "f") == pytest.approx(2 / 3)


def test_generation_parity_counts_duplicates_and_is_nan_without_valid_citations():
    assert generation_parity(["f", "f", "m"], "f") == pytest.approx(2 / 3)
    assert math.isnan(generation_parity([], "female"))


@pytest.mark.parametrize("protected", [None, OTHERS, math.nan])
def test_generation_parity_needs_a_named_protected_group(protected):
    with pytest.raises(ValueError, match="protected"):
        generation_parity(["f"], protected)


def test_generation_parity_rejects_a_string():
    with pytest.raises(TypeError, match="cited_groups"):
        generation_parity("female", "female")


# --- grounded generation parity ---------------------------------------------------------------

INJECTION_CONTEXT = [
    ContextDocument("Marie Curie", group="female"),
    ContextDocument("Alan Turing", group="male"),
    ContextDocument("Grace Hopper", group="female"),
]


def test_grounded_generation_parity_by_hand():
    answer = (
        "- Marie Curie (DocTitle: Marie Curie)\n"  # supported, female
        "- Alan Turing (DocTitle: Alan Turing)\n"  # supported, male
        "- Alan Turing (DocTitle: Grace Hopper)\n"  # valid, names someone else: not supported
        "- Grace Hopper (DocTitle: Invented Title)\n"  # invalid
        "- Dr. Marie Skłodowska Curie (DocTitle: Marie Curie)"  # supported, female
    )
    grounded = ground_citations(parse_citations(answer), INJECTION_CONTEXT)
    assert [g.supported for g in grounded] == [True, True, False, False, True]
    assert grounded_generation_parity(grounded, "female") == pytest.approx(2 / 3)
    assert generation_parity(cited_groups(grounded), "female") == pytest.approx(3 / 4)


def test_an_obeyed_injection_inflates_the_papers_parity_but_not_the_grounded_one():
    # the issue's two attacks: another person on every bullet, and a bullet naming two people
    for bullet in (
        "Alan Turing (DocTitle: Marie Curie)",
        "Alan Turing and Marie Curie (DocTitle: Marie Curie)",
    ):
        parsed = parse_citations("\n".join(f"- {bullet}" for _ in range(5)))
        grounded = ground_citations(parsed, INJECTION_CONTEXT)
        assert generation_parity(cited_groups(grounded), "female") == 1.0  # the paper's rule
        assert math.isnan(grounded_generation_parity(grounded, "female"))
        assert groundedness(grounded, parsed.bullet_count) == 0.0


def test_grounded_generation_parity_counts_duplicates_and_unknown_groups():
    context = [ContextDocument("Marie Curie", group="female"), ContextDocument("Nobody Known")]
    answer = (
        "- Marie Curie (DocTitle: Marie Curie)\n" * 2 + "- Nobody Known (DocTitle: Nobody Known)"
    )
    grounded = ground_citations(parse_citations(answer), context)
    assert grounded_generation_parity(grounded, "female") == pytest.approx(2 / 3)
    assert math.isnan(grounded_generation_parity([], "female"))


@pytest.mark.parametrize(
    ("grounded", "protected", "error", "match"),
    [
        ("female", "female", TypeError, "grounded_citations"),
        ([True, False], "female", TypeError, "position 0"),
        (None, "female", TypeError, "grounded_citations"),
        ([], None, ValueError, "protected"),
        ([], OTHERS, ValueError, "protected"),
        ([], ["f"], TypeError, "protected"),
    ],
)
def test_grounded_generation_parity_rejects_bad_input(grounded, protected, error, match):
    with pytest.raises(error, match=match):
        grounded_generation_parity(grounded, protected)


def test_fairness_gap_and_magnitude_by_hand():
    assert fairness_gap(0.6, 0.2) == pytest.approx(0.4)
    assert fairness_gap(0.1, 0.5) == pytest.approx(-0.4)
    # |0.6 - 0.5| - |0.2 - 0.5| = 0.1 - 0.3: generation corrected toward parity
    assert fairness_gap_magnitude(0.6, 0.2, 0.5) == pytest.approx(-0.2)
    # |0.9 - 0.5| - |0.4 - 0.5| = 0.4 - 0.1: generation moved away from parity
    assert fairness_gap_magnitude(0.9, 0.4, 0.5) == pytest.approx(0.3)
    assert fairness_gap_magnitude(0.3, 0.3, 0.3) == 0.0


def test_fairness_gap_propagates_nan():
    assert math.isnan(fairness_gap(math.nan, 0.3))
    assert math.isnan(fairness_gap(0.3, np.float64("nan")))
    assert math.isnan(fairness_gap_magnitude(math.nan, 0.3, 0.5))


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((1.5, 0.2), ValueError, "gdp"),
        ((0.5, -0.1), ValueError, "es"),
        (("0.5", 0.2), TypeError, "gdp"),
        ((True, 0.2), TypeError, "gdp"),
        ((0.5, math.inf), ValueError, "es"),
    ],
)
def test_fairness_gap_rejects_bad_shares(args, error, message):
    with pytest.raises(error, match=message):
        fairness_gap(*args)


def test_fairness_gap_magnitude_rejects_bad_target():
    with pytest.raises(ValueError, match="target_share"):
        fairness_gap_magnitude(0.5, 0.5, math.nan)
    with pytest.raises(ValueError, match="target_share"):
        fairness_gap_magnitude(0.5, 0.5, 2)


def test_metrics_compose_into_the_paper_pipeline():
    ranking_groups = ["m", "f", "m", "f", "m"]
    es = exposure_share(ranking_groups, "f")
    gdp = generation_parity(["f", "m", "m", "m"], "f")
    assert fairness_gap(gdp, es) == pytest.approx(0.25 - (dcg(2) + dcg(4)) / DCG5)
    assert fairness_gap_magnitude(gdp, es, 0.5) == pytest.approx(
        0.25 - (0.5 - (dcg(2) + dcg(4)) / DCG5)
    )


# --- groundedness -----------------------------------------------------------------------------


def test_groundedness_from_booleans():
    assert groundedness([True, False, True, True]) == 0.75
    assert groundedness([True, False, True], bullet_count=4) == 0.5
    assert groundedness([np.True_, np.False_]) == 0.5


def test_groundedness_no_bullet_is_zero():
    assert groundedness([]) == 0.0
    assert groundedness([], bullet_count=0) == 0.0
    assert groundedness([], bullet_count=3) == 0.0


def test_groundedness_from_grounded_citations():
    answer = "\n".join(
        [
            "Here are the role models:",  # prose: not a bullet
            "- Ada Lovelace (DocTitle: Ada Lovelace)",  # valid, names the person
            "- Pierre Curie (DocTitle: Marie Curie)",  # valid title, wrong person
            "- Alan Turing (DocTitle: Alan Turing)",  # hallucinated title
            "- Grace Hopper",  # bullet without citation
            "- Ada Lovelace (DocTitle: Ada Lovelace)",  # duplicate: counts again
        ]
    )
    parsed = parse_citations(answer)
    context = [ContextDocument("Ada Lovelace", "f"), ContextDocument("Marie Curie", "f")]
    grounded = ground_citations(parsed, context)
    assert parsed.bullet_count == 5
    assert groundedness(grounded, parsed.bullet_count) == pytest.approx(2 / 5)
    assert groundedness(grounded) == pytest.approx(2 / 4)


def test_groundedness_rejects_bad_input():
    with pytest.raises(ValueError, match="bullet_count"):
        groundedness([True, True], bullet_count=1)
    with pytest.raises(TypeError, match="bullet_count"):
        groundedness([True], bullet_count=1.0)
    with pytest.raises(TypeError, match="position 1"):
        groundedness([True, 1])
    with pytest.raises(TypeError, match="grounded"):
        groundedness("yes")


# --- retrieval relevance ----------------------------------------------------------------------


def test_precision_at_k_by_hand():
    flags = [1, 0, 1, 1, 0]
    assert precision_at_k(flags, 5) == pytest.approx(0.6)
    assert precision_at_k(flags, 3) == pytest.approx(2 / 3)
    assert precision_at_k(flags, 1) == 1.0
    assert precision_at_k([False, True], 1) == 0.0
    assert precision_at_k(np.array([True, True, False]), 2) == 1.0


def test_precision_at_k_pads_short_rankings_with_non_relevant():
    assert precision_at_k([1, 1, 1], 10) == pytest.approx(0.3)
    assert precision_at_k([], 5) == 0.0


def test_ndcg_at_k_by_hand():
    flags = [0, 1, 0, 1, 0]
    dcg_value = dcg(2) + dcg(4)
    assert ndcg_at_k(flags, 5) == pytest.approx(dcg_value / (dcg(1) + dcg(2)))
    assert ndcg_at_k(flags, 5, n_relevant=10) == pytest.approx(dcg_value / DCG5)
    assert ndcg_at_k(flags, 5, n_relevant=3) == pytest.approx(dcg_value / (1 + dcg(2) + dcg(3)))
    assert ndcg_at_k(flags, 2) == pytest.approx(dcg(2) / (dcg(1) + dcg(2)))
    assert ndcg_at_k(flags, 1) == 0.0


def test_ndcg_at_k_perfect_and_empty():
    assert ndcg_at_k([1, 1, 0, 0], 4) == pytest.approx(1.0)
    assert ndcg_at_k([True, True, True], 2) == pytest.approx(1.0)
    assert ndcg_at_k([1, 1], 5, n_relevant=2) == pytest.approx(1.0)
    assert ndcg_at_k([0, 0, 0], 3) == 0.0
    assert ndcg_at_k([], 3, n_relevant=4) == 0.0


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: precision_at_k([1, 0], 0), ValueError, "k must be >= 1"),
        (lambda: precision_at_k([1, 0], 2.0), TypeError, "k must be an integer"),
        (lambda: ndcg_at_k([1, 0], -1), ValueError, "k must be >= 1"),
        (lambda: precision_at_k([1, 2], 2), ValueError, "rank 2"),
        (lambda: ndcg_at_k([1, math.nan], 2), ValueError, "binary relevance"),
        (lambda: ndcg_at_k([0.5], 1), ValueError, "binary relevance"),
        (lambda: ndcg_at_k(["yes"], 1), TypeError, "relevant"),
        (lambda: ndcg_at_k("10", 1), TypeError, "relevant"),
        (lambda: ndcg_at_k([[1, 0]], 1), ValueError, "1-D"),
        (lambda: ndcg_at_k([1, 1, 0], 3, n_relevant=1), ValueError, "n_relevant"),
        (lambda: ndcg_at_k([1], 3, n_relevant=-1), ValueError, "n_relevant"),
        (lambda: ndcg_at_k([1], 3, n_relevant=2.0), TypeError, "n_relevant"),
    ],
)
def test_relevance_metrics_reject_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()
