"""A target is a mapping: equal mappings, whatever order they list their groups in, draw the same
ranking for the same seed and pool (docs/SPEC.md, "Inputs" → target; a user trial found a
Haystack pipeline drawing differently after a YAML round trip, which sorts the keys)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fairrag_core import OTHERS, make_ranker, make_target

SCORES = np.linspace(3.0, 1.0, 20).round(3).tolist()
TWO = ["female" if i % 3 == 1 else "male" for i in range(20)]
THREE = ["abc"[i % 3] for i in range(20)]
SEEDS = range(30)

BINARY = [{"female": 0.4, "male": 0.6}, {"female": 0.4, OTHERS: 0.6}]
SEVERAL = [{"a": 0.3, "b": 0.3, "c": 0.4}, {"a": 0.2, "b": 0.5, OTHERS: 0.3}]


def _orders(target: dict) -> list[dict]:
    return [dict(items) for items in itertools.permutations(target.items())]


def _rankings(name: str, target: dict, groups: list, k: int = 8) -> list[list[int]]:
    extra = {"protected": "female"} if name == "fair" else {}
    out = []
    for seed in SEEDS:
        ranker = make_ranker(name, target=target, **extra)
        out.append(ranker.rank(SCORES, groups, k, rng=np.random.default_rng(seed)).tolist())
    return out


@pytest.mark.parametrize("target", BINARY, ids=["named", "others"])
@pytest.mark.parametrize(
    "name", ["representative_stochastic", "amortized", "forced_exposure", "fair"]
)
def test_a_reordered_binary_target_draws_the_same_rankings(name, target):
    first, *others = _orders(target)
    expected = _rankings(name, first, TWO)
    for reordered in others:
        assert _rankings(name, reordered, TWO) == expected


@pytest.mark.parametrize("target", SEVERAL, ids=["named", "others"])
@pytest.mark.parametrize("name", ["representative_stochastic", "amortized", "forced_exposure"])
def test_a_reordered_target_of_several_groups_draws_the_same_rankings(name, target):
    first, *others = _orders(target)
    expected = _rankings(name, first, THREE)
    for reordered in others:
        assert _rankings(name, reordered, THREE) == expected


@pytest.mark.parametrize("name", ["representative_stochastic", "amortized"])
def test_many_draws_at_once_do_not_depend_on_the_key_order_either(name):
    draws = [
        make_ranker(name, target=target).sample(SCORES, THREE, 8, 200, rng=7).tolist()
        for target in _orders({"a": 0.3, "b": 0.3, "c": 0.4})
    ]
    assert all(d == draws[0] for d in draws[1:])


def test_the_canonical_order_is_sorted_labels_then_others():
    assert make_target(target={"male": 0.6, "female": 0.4}).groups == ("female", "male", OTHERS)
    assert make_target(target={OTHERS: 0.6, "female": 0.4}).groups == ("female", OTHERS)
    target = make_target(target={"c": 0.4, OTHERS: 0.2, "a": 0.4}, protected="c")
    assert target.groups == ("a", "c", OTHERS)
    assert target.as_dict() == {"a": 0.4, "c": 0.4, OTHERS: 0.2}
    assert target.protected_share == 0.4
    # the paper's binary form keeps its order: the protected group, then OTHERS
    assert make_target(protected="male", target_share=0.3).groups == ("male", OTHERS)


def test_labels_of_mixed_types_have_one_order_too():
    mapping = {("x", 1): 0.2, 10: 0.2, 2.5: 0.2, "b": 0.2, OTHERS: 0.2}
    orders = {make_target(target=m).groups for m in _orders(mapping)}
    assert orders == {("b", 2.5, 10, ("x", 1), OTHERS)}


def test_labels_no_number_nor_string_orders_keep_the_mappings_order_in_every_process():
    """A frozenset's ``repr`` follows the process's hash seed: such labels keep the mapping's
    order (they were sorted by ``repr``: the order flipped between processes); an int too
    large for a float is ordered as a number (it raised OverflowError). Found by a review."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "from fairrag_core import make_target\n"
        "t = make_target(target={frozenset('AD'): .5, frozenset('BC'): .5})\n"
        "print([sorted(g) for g in t.groups[:2]])\n"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "PYTHONPATH": str(Path(__file__).parents[2])},
        ).stdout
        for seed in range(6)
    }
    assert seen == {"[['A', 'D'], ['B', 'C']]\n"}
    assert make_target(target={10**400: 0.5, "a": 0.5}).groups[:2] == ("a", 10**400)


def test_the_others_bucket_written_as_text_is_the_others_bucket():
    """``target={"a": .4, "b": .3, "OTHERS": .3}``: the adapters and records read "OTHERS" as
    the others bucket, the core took it for a group of that name beside an empty bucket, and a
    record wrote {"OTHERS": 0.0, ...} (its 0.3 lost, the target summing to 0.7: a review)."""
    from fairrag_core import FairnessAuditor

    target = make_target(target={"a": 0.4, "b": 0.3, "OTHERS": 0.3})
    assert target.as_dict() == {"a": 0.4, "b": 0.3, OTHERS: 0.3}
    record = FairnessAuditor.create(target={"a": 0.4, "b": 0.3, "OTHERS": 0.3}).describe()
    assert record["target"] == {"a": 0.4, "b": 0.3, "OTHERS": 0.3}
    with pytest.raises(ValueError, match="names the others bucket twice"):
        make_target(target={"a": 0.4, "OTHERS": 0.3, OTHERS: 0.3})


@pytest.mark.parametrize("protected", [OTHERS, "OTHERS"])
def test_the_others_bucket_is_never_the_protected_group(protected):
    """``protected="OTHERS"`` built two buckets, {'OTHERS': 0.5, OTHERS: 0.5}, whose record
    wrote one (a core trial)."""
    with pytest.raises(ValueError, match="not the others bucket"):
        make_target(protected=protected)
    with pytest.raises(ValueError, match="not the others bucket"):
        make_target(target={"a": 0.5, "OTHERS": 0.5}, protected=protected)


@pytest.mark.parametrize(
    ("groups", "shares", "words"),
    [
        (("f", OTHERS), [1.2, 0.4], "must be in \\[0, 1\\]"),
        (("f", OTHERS), [-0.5, 1.5], "must be in \\[0, 1\\]"),
        (("f", OTHERS), [0.4, 0.4], "must sum to 1"),
        (("f", "m"), [0.5, 0.5], "hold the others bucket"),
        (("f", OTHERS), [1.0], "one share per group"),
    ],
)
def test_a_target_built_directly_is_checked_as_make_target_checks(groups, shares, words):
    """A core trial: ``Target(("f", OTHERS), np.array([1.2, 0.4]), "f")`` skipped every check
    (forced exposure then reported a shortfall of 2; no OTHERS bucket: a bare KeyError)."""
    from fairrag_core.target import Target

    with pytest.raises(ValueError, match=words):
        Target(groups, np.array(shares), "f" if "f" in groups else None)


def test_a_target_built_directly_takes_float32_shares_and_refuses_others_as_protected():
    """A review of the check above: float32 shares of counts (summing to 1 within float32)
    were refused at 1e-9; ``protected=OTHERS`` still passed a Target built directly."""
    from fairrag_core.target import Target

    counts = np.array([1, 1, 1], dtype=np.float32)
    target = Target(("a", "b", OTHERS), counts / counts.sum())
    assert target.as_dict()["a"] == pytest.approx(1 / 3)
    # renormalised: it reads back under make_target's 1e-9 (records and configs hold it)
    assert make_target(target=target.as_dict()).as_dict() == target.as_dict()
    for groups, protected in ((("a", OTHERS), OTHERS), (("OTHERS", OTHERS), "OTHERS")):
        with pytest.raises(ValueError, match="never the protected group"):
            Target(groups, np.array([0.3, 0.7]), protected)


@pytest.mark.parametrize(
    "knob",
    [
        {"alpha": np.float32(2)},
        {"gain": np.float32(2)},
        {"gain": np.int64(2)},
        {"tolerance": np.float32(0.05)},
    ],
)
def test_numpy_numbers_are_numbers_to_every_knob(knob):
    """A core trial: alpha took np.float32, gain and tolerance refused numpy numbers ("must be
    a number in [0, 1), got np.float32(0.05)")."""
    ranker = make_ranker("representative_stochastic", protected="f", **knob)
    ((name, value),) = knob.items()
    assert getattr(ranker, name) == pytest.approx(float(value))
    with pytest.raises((TypeError, ValueError), match=name):  # a boolean is no number
        make_ranker("representative_stochastic", protected="f", **{name: np.True_})


def test_every_reader_of_the_others_key_is_the_one_rule():
    """The core, a ranker's description and a placed list's target read ``"OTHERS"`` through
    :func:`fairrag_core.target.others_bucket` (three copies of the rule before; a component
    given both spellings merged them without a word)."""
    from fairrag_core.kit import describe_ranker, ranker_from_description
    from fairrag_core.target import others_bucket

    ranker = make_ranker("representative_stochastic", target={"a": 0.4, "b": 0.3, OTHERS: 0.3})
    again = ranker_from_description(describe_ranker(ranker))
    assert again.target.as_dict() == ranker.target.as_dict()
    with pytest.raises(ValueError, match="names the others bucket twice"):
        others_bucket({"a": 0.4, "OTHERS": 0.3, OTHERS: 0.3})


@pytest.mark.parametrize(
    "target", [{1: 0.5, "1": 0.5}, {None: 0.3, "None": 0.3, "a": 0.4}, {"a": 0.5, "None": 0.5}]
)
def test_a_target_whose_labels_records_key_alike_is_refused(target):
    """Records key a target by strings: ``{1: 0.5, "1": 0.5}`` described itself as
    ``{"1": 0.5, "OTHERS": 0.0}``, half the target lost without a word."""
    from fairrag_core import FairnessAuditor

    if "a" in target and len(target) == 2:  # a lone "None" label keys as itself: kept
        assert FairnessAuditor.create(target=target).describe()["target"]["None"] == 0.5
        return
    with pytest.raises(ValueError, match=r"both written .* give each group one label"):
        make_target(target=target)


def test_shares_of_labels_written_alike_are_summed_in_exposure_by_group():
    """``exposure_by_group`` keyed None and "None" (1 and "1") alike and kept the last share
    only: shares summing to 0.52, a record the audit refuses. Now summed under the key (docs/
    SPEC.md), the list ``groups`` keeping each label."""
    from fairrag_core import FairnessAuditor
    from fairrag_core.metrics import exposure_shares

    groups = [None, "None", "female", 1, "1"]
    record = FairnessAuditor.create(protected="female", target_share=0.5).retrieval(groups)
    shares = exposure_shares(groups)
    assert record["groups"] == groups
    assert record["exposure_by_group"] == pytest.approx(
        {
            "None": shares[None] + shares["None"],
            "female": shares["female"],
            "1": shares[1] + shares["1"],
        }
    )
    assert sum(record["exposure_by_group"].values()) == pytest.approx(1.0)


def test_a_pool_holding_a_target_label_and_its_text_twin_warns():
    """A review: protected 1 beside a document labelled "1" (another group to the ranker):
    exposure_by_group keys both "1", which an audit reads as the protected group's share."""
    from fairrag_core import rerank

    ranker = make_ranker("standard", protected=1)
    with pytest.warns(UserWarning, match="labels 1 and '1'"):
        rerank(ranker, np.array([0.9, 0.8, 0.7]), [1, "1", 0], 3)
    # "1" and 1.0: records write 1.0 as 1, so they share the key too (a review)
    with pytest.warns(UserWarning, match="labels '1' and 1.0"):
        rerank(make_ranker("standard", protected="1"), np.array([0.9, 0.8, 0.7]), ["1", 1.0, 0], 3)


def test_a_curve_keyed_by_a_floats_text_still_finds_its_groups():
    """A review: a per-group curve keyed "0.0"/"1.0" (saved before records wrote 1.0 as 1)
    was refused for a pool of 0.0/1.0 labels, the message naming the same groups it lacked."""
    from fairrag_core.exposure import ExposureModel, FittedCurve

    model = ExposureModel.fitted(FittedCurve((0.6, 0.4), factors=(("0.0", 1.0), ("1.0", 2.0))))
    assert model.entry_weights([0.0, 1.0]).tolist() == pytest.approx([0.6, 0.8])
    with pytest.raises(ValueError, match=r"the ranking shows \['2'\]"):
        model.entry_weights([2.0, 1.0])


def test_a_missing_label_nan_is_the_unknown_group():
    """A core trial: pandas gives NaN for a missing label; the core scored each NaN as a group
    of its own (NaN is unequal to itself: one ``nan`` key per missing value) while the log
    wrote it ``null``."""
    from fairrag_core import group_labels
    from fairrag_core.metrics import awrf, exposure_shares

    nan = float("nan")
    assert exposure_shares(["f", nan, np.float64("nan")]) == exposure_shares(["f", None, None])
    assert group_labels([{"g": nan}, {"g": "f"}], "g") == [None, "f"]
    assert awrf(["f", "m", nan, "f"], protected="f") == awrf(["f", "m", None, "f"], protected="f")


def test_labels_python_treats_as_one_group_are_one_label_in_records():
    """A core trial: protected 1 with labels 1.0 (a pandas int column with a gap): the rankers
    and exposure_share counted 1.0 as group 1, exposure_by_group keyed it "1.0", so the audit
    read a protected share of 0. Records write 1.0 as 1, numpy numbers as Python's."""
    from fairrag_core import FairnessAuditor

    auditor = FairnessAuditor.create(protected=1, target_share=0.5)
    record = auditor.retrieval([1.0, 2.0, np.float32(0.1)])
    assert record["groups"] == [1, 2, float(np.float32(0.1))]
    assert set(record["exposure_by_group"]) == {"1", "2", str(float(np.float32(0.1)))}
    assert record["exposure_by_group"]["1"] == pytest.approx(record["exposure_share"])


def test_an_others_bucket_owed_nothing_needs_no_factor_of_its_own():
    """A core trial: SPEC "a bucket owed 0 needs none", but a target {a: .5, b: .5} under a
    model fitted on a, b, c, d was refused ("leave 2 factors") by effective_shares and both
    rankers that read it."""
    from fairrag_core.exposure import ExposureModel, FittedCurve

    factors = (("a", 1.0), ("b", 2.0), ("c", 0.5), ("d", 1.5))
    model = ExposureModel.fitted(FittedCurve((0.5, 0.3, 0.2), factors=factors))
    target = make_target(target={"a": 0.5, "b": 0.5})
    assert model.effective_shares(target).tolist() == pytest.approx([2 / 3, 1 / 3, 0.0])
    ranker = make_ranker("representative_stochastic", target={"a": 0.5, "b": 0.5}, exposure=model)
    assert len(ranker.rank(np.array([0.9, 0.8, 0.7]), ["a", "b", "c"], 2, rng=0)) == 2


def test_a_fitted_model_naming_a_group_twice_is_refused():
    """A core trial: ``fitted(0.5,0.5;a=1.0;a=2.0;b=1.0)`` was read with a=2.0 (the audit
    refused the same name)."""
    from fairrag_core.exposure import FittedCurve, make_exposure_model

    with pytest.raises(ValueError, match="'a' is named twice"):
        make_exposure_model("fitted(0.5,0.5;a=1.0;a=2.0;b=1.0)")
    with pytest.raises(ValueError, match="twice"):
        FittedCurve((0.5, 0.5), factors=(("a", 1.0), ("a", 2.0)))
