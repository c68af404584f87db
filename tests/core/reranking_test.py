"""What both adapters share: group labels, pool scores and placements."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest

from fairrag_core import (
    group_labels,
    make_ranker,
    pool_scores,
    position_weights,
    rerank,
    scores_from_order,
)


def test_group_labels_missing_field_is_unknown_and_absent_key_is_an_error():
    metadatas = [{"gender": "female"}, {"title": "x"}, None]
    assert group_labels(metadatas, "gender") == ["female", None, None]
    with pytest.raises(
        KeyError, match=r"group_key 'gendr' is on no candidate.*\['gender', 'title'\]"
    ):
        group_labels(metadatas, "gendr")
    assert group_labels([], "gender") == []
    with pytest.raises(ValueError, match="group_key must be"):
        group_labels(metadatas, "")


def test_a_pool_whose_candidates_hold_the_group_key_as_none_is_of_unknown_groups():
    """A Haystack trial: a pool whose documents all had ``gender: None`` was refused, "group_key
    'gender' is on no candidate of the pool; metadata fields present: ['gender', ...]"."""
    unknown = [{"gender": None, "title": "a"}, {"gender": None, "title": "b"}]
    assert group_labels(unknown, "gender") == [None, None]
    standard = make_ranker("standard")
    assert rerank(standard, np.array([0.9, 0.5]), group_labels(unknown, "gender"), 2).indices == [
        0,
        1,
    ]


def test_pool_scores_all_none_or_error_naming_positions():
    scores, from_order = pool_scores([0.3, 0.1])
    assert scores.tolist() == [0.3, 0.1] and not from_order
    scores, from_order = pool_scores([None, None, None])
    assert scores.tolist() == [3.0, 2.0, 1.0] and from_order
    with pytest.raises(ValueError, match=r"positions \[1\] have no score while 2 others do"):
        pool_scores([0.3, None, 0.2])
    assert scores_from_order(0).tolist() == []


def test_rerank_places_every_shown_candidate():
    scores = [0.1, 0.9, 0.5, 0.7]
    groups = ["female", "male", "female", None]
    result = rerank(make_ranker("standard"), scores, groups, 3)
    assert result.indices == [1, 3, 2]
    assert [p.fair_rank for p in result.placements] == [1, 2, 3]
    assert [p.pool_rank for p in result.placements] == [1, 2, 3]
    assert [p.group for p in result.placements] == ["male", None, "female"]
    assert [p.exposure_weight for p in result.placements] == pytest.approx(position_weights(3))
    assert result.ranker == "standard"


def test_rerank_pool_rank_differs_from_fair_rank_when_reordered():
    scores = [0.9, 0.8, 0.7, 0.2]
    groups = ["male", "male", "male", "female"]
    result = rerank(make_ranker("forced_exposure", protected="female"), scores, groups, 2)
    assert result.indices == [0, 3]
    assert [p.pool_rank for p in result.placements] == [1, 4]
    assert result.placements[1].score == pytest.approx(0.2)
    assert result.groups == ["male", "female"]
    assert not np.isnan([p.exposure_weight for p in result.placements]).any()


def test_a_target_group_only_near_a_present_label_warns_once():
    import warnings

    pool, labels = [0.9, 0.8, 0.7, 0.6], ["female", "male", "male", "male"]
    typo = make_ranker("forced_exposure", protected="Female")
    with pytest.warns(UserWarning, match="group 'Female', which is on no candidate.*'female'"):
        rerank(typo, pool, labels, 2)
    misspelled = make_ranker("forced_exposure", target={"femal": 0.5, "male": 0.5})
    with pytest.warns(UserWarning, match="group 'femal'"):
        rerank(misspelled, pool, labels, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rerank(typo, pool, labels, 2)  # once per ranker and group
        parity = make_ranker("forced_exposure", target={"female": 0.5, "male": 0.5})
        rerank(parity, pool, ["female"] * 4, 2)  # 'male' is absent, 'female' is its own group
        rerank(make_ranker("standard"), pool, labels, 2)  # no target
        rerank(make_ranker("forced_exposure", protected="female"), pool, ["male"] * 4, 2)


@pytest.mark.parametrize(
    ("protected", "label"),
    [
        (unicodedata.normalize("NFC", "Zoë"), unicodedata.normalize("NFD", "Zoë")),
        ("female", "ｆｅｍａｌｅ"),
        ("female", "fe\u200bmale"),
    ],
    ids=["nfd", "full-width", "zero-width space"],
)
def test_a_label_equal_but_for_its_unicode_form_warns(protected, label):
    """A user trial: the same label in NFD, or full-width, was not warned of (a short label's
    difflib ratio falls under 0.85), so the protected group silently got no share."""
    ranker = make_ranker("forced_exposure", protected=protected)
    with pytest.warns(UserWarning, match="which is on no candidate of this pool, but the label"):
        rerank(ranker, [0.9, 0.8, 0.7], [label, "x", "x"], 2)


@pytest.mark.parametrize(
    "groups", [{0: "male", 1: "female", 2: "female"}, {"male", "female", "x"}, frozenset("ab")]
)
def test_groups_given_as_a_mapping_or_a_set_are_refused_by_rankers_and_metrics(groups):
    """A dict's keys were read as the labels and a set in hash order (a share that changed
    with PYTHONHASHSEED); labels are read by position."""
    from fairrag_core.metrics import exposure_disparity, exposure_share

    scores = [0.9, 0.8, 0.7][: len(groups)]
    for call in (
        lambda: rerank(make_ranker("forced_exposure", protected="female"), scores, groups, 2),
        lambda: make_ranker("amortized", protected="female").rank(scores, groups, 2),
    ):
        with pytest.raises(TypeError, match="groups must be a sequence of labels in order"):
            call()
    with pytest.raises(TypeError, match="ranked_groups must be a sequence of labels in order"):
        exposure_share(groups, "female")
    with pytest.raises(TypeError, match="ranked_groups must be a sequence of labels in order"):
        exposure_disparity(groups, protected="female", target_share=0.5)
    from fairrag_core.metrics import awrf

    with pytest.raises(TypeError, match="must be a sequence of labels in order"):
        awrf(groups, target={"female": 0.5, "male": 0.5})


@pytest.mark.parametrize(("one", "other"), [(1, "1"), (None, "None"), (2.0, "2")])
def test_two_labels_records_key_alike_warn_whatever_the_target_names(one, other):
    """A user trial: labels a record writes under one key (1 and "1", the unknown group None
    and "None") warned only when one was a group the target names; their shares are summed in
    ``exposure_by_group`` whatever the target."""
    import warnings

    ranker = make_ranker("representative_stochastic", protected="female")
    groups = ["female", one, other, "male", "female", "male"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rerank(ranker, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], groups, 4, rng=np.random.default_rng(0))
        rerank(ranker, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], groups, 4, rng=np.random.default_rng(1))
    alike = [w for w in caught if "records key both" in str(w.message)]
    assert len(alike) == 1  # once per ranker and key
    assert repr(one) in str(alike[0].message) and repr(other) in str(alike[0].message)
