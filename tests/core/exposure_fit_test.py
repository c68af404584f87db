"""The fitted exposure model (docs/SPEC.md, "Exposure model" → Fitted): its file, its names,
its estimator, and the rankers that take it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fairrag_core import RepresentativeStochasticRanker, StochasticRanker, make_ranker
from fairrag_core.audit import exposure_name
from fairrag_core.exposure import (
    ExposureModel,
    FittedCurve,
    load_fitted_curve,
    make_exposure_model,
    save_fitted_curve,
)
from fairrag_core.metrics import exposure_share
from fairrag_core.position_curve import (
    PositionObservation,
    fit_curve,
    observation_from_record,
    split_units,
    wilson_interval,
)

STEEP = FittedCurve((0.5, 0.25, 0.12, 0.08, 0.05))
"""A generator that reads the top: more so than DCG (0.339, 0.214, 0.170, 0.146, 0.131)."""
HUMP = FittedCurve((0.1, 0.3, 0.3, 0.2, 0.1))
"""Not decreasing: the rankers may not assume v_1 >= v_2 >= ..."""


def _protected_below_pool(n: int = 25):
    scores = np.concatenate([np.linspace(1.0, 0.6, n), np.linspace(0.5, 0.1, n)])
    return scores, ["male"] * n + ["female"] * n


def _share(ranker, scores, groups, curve, draws=600, k=5):
    labels = np.asarray(groups, dtype=object)
    model = ExposureModel.fitted(curve)
    rankings = [ranker.rank(scores, groups, k) for _ in range(draws)]
    return np.mean([exposure_share(labels[r].tolist(), "female", exposure=model) for r in rankings])


def test_a_curve_file_round_trips_and_is_read_by_name(tmp_path):
    curve = FittedCurve(STEEP.weights, (0.4, 0.2, 0.1, 0.06, 0.03), (0.6, 0.3, 0.14, 0.1, 0.07),
                        {"model": "smollm2", "answers": 120})  # fmt: skip
    path = save_fitted_curve(curve, tmp_path / "curve.json")
    loaded = load_fitted_curve(path)
    assert loaded == curve and loaded.lower == curve.lower and loaded.upper == curve.upper
    assert dict(loaded.provenance) == {"model": "smollm2", "answers": 120}
    model = make_exposure_model(f"fitted:{path}")
    assert model.name == "fitted" and model.curve == curve
    assert model.weights(3).tolist() == [0.5, 0.25, 0.12]
    # Records name it by its weights, a name that reads back to the same model.
    name = exposure_name(model)
    assert name == "fitted(0.5,0.25,0.12,0.08,0.05)"
    assert make_exposure_model(name) == model


def test_positions_beyond_the_fit_are_an_error_never_extrapolated():
    model = ExposureModel.fitted(STEEP)
    with pytest.raises(ValueError, match=r"ranks 1\.\.5 only.*k=6"):
        model.weights(6)
    ranker = RepresentativeStochasticRanker(protected="female", exposure=model, seed=0)
    scores, groups = _protected_below_pool()
    with pytest.raises(ValueError, match=r"ranks 1\.\.5 only"):
        ranker.rank(scores, groups, 6)
    assert len(ranker.rank(scores[:3], groups[:3], 5)) == 3  # a short pool: ranks 1..3


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FittedCurve(()), "at least one"),
        (lambda: FittedCurve((0.5, 0.6)), "sum 1"),
        (lambda: FittedCurve((1.0, 0.0)), "> 0"),
        (lambda: FittedCurve((0.5, 0.5), (0.1,)), "one bound per weight"),
        (lambda: ExposureModel("fitted"), "curve"),
        (lambda: ExposureModel("dcg", curve=STEEP), "curve"),
        (lambda: make_exposure_model("fitted(0.5,x)"), "fitted"),
        (lambda: make_exposure_model("fitted:"), "JSON file"),
    ],
)
def test_bad_curves_are_clear_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_file_that_is_not_a_curve_names_itself(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"weights": [1.0]}))
    with pytest.raises(ValueError, match=r"other\.json.*not a fitted curve"):
        make_exposure_model(f"fitted:{path}")
    with pytest.raises(ValueError, match="cannot read"):
        make_exposure_model(f"fitted:{tmp_path / 'missing.json'}")


@pytest.mark.parametrize("curve", [STEEP, HUMP], ids=["steep", "hump"])
def test_representative_stochastic_reaches_the_target_under_the_fitted_curve(curve):
    scores, groups = _protected_below_pool()
    fitted = RepresentativeStochasticRanker(protected="female", exposure=curve_model(curve), seed=1)
    assert abs(_share(fitted, scores, groups, curve) - 0.5) <= 0.05
    # Under DCG it targets another curve: the generator's share is further from parity.
    dcg = RepresentativeStochasticRanker(protected="female", seed=1)
    assert abs(_share(dcg, scores, groups, curve) - 0.5) > abs(
        _share(fitted, scores, groups, curve) - 0.5
    )


def curve_model(curve: FittedCurve) -> ExposureModel:
    return ExposureModel.fitted(curve)


@pytest.mark.parametrize("curve", [STEEP, HUMP], ids=["steep", "hump"])
def test_sample_is_successive_rank_calls_under_a_fitted_curve(curve):
    scores, groups = _protected_below_pool(8)
    ranker = RepresentativeStochasticRanker(protected="female", exposure=curve_model(curve))
    rows = ranker.sample(scores, groups, 5, 4000, rng=5)
    single = np.array([ranker.rank(scores, groups, 5, rng=np.random.default_rng(s)) for s in
                       range(4000)])  # fmt: skip
    labels = np.asarray(groups, dtype=object)
    for position in range(5):
        batch = np.mean(labels[rows[:, position]] == "female")
        successive = np.mean(labels[single[:, position]] == "female")
        assert abs(batch - successive) < 0.04, position


def test_amortized_balances_the_stream_under_the_fitted_curve_and_its_ledger_holds_it():
    rng = np.random.default_rng(0)
    scores = np.sort(rng.uniform(0.3, 0.7, 30))[::-1]
    groups = ["female" if rng.random() < 0.25 + 0.5 * i / 30 else "male" for i in range(30)]
    model = curve_model(STEEP)
    amortized = make_ranker("amortized", protected="female", exposure=model, seed=3)
    labels = np.asarray(groups, dtype=object)
    served = {"female": 0.0, "male": 0.0}
    for _ in range(400):
        for position, index in enumerate(amortized.rank(scores, groups, 5)):
            served[labels[index]] += STEEP.weights[position]
    state = amortized.ledger.state()
    assert state.totals == pytest.approx(served, rel=1e-9)  # the ledger adds fitted weights
    assert abs(served["female"] / sum(served.values()) - 0.5) < 0.02
    stochastic = _share(StochasticRanker(seed=3), scores, groups, STEEP, draws=400)
    assert stochastic < 0.4  # the pool really is skewed under this curve


def test_wilson_interval_matches_the_closed_form():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27753), abs=1e-5)
    assert wilson_interval(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    assert all(np.isnan(wilson_interval(0, 0)))


def test_the_estimator_and_its_split():
    observations = [
        PositionObservation(f"q{q}", ("a", "b", "a"), (True, q % 2 == 0, False)) for q in range(20)
    ]
    curve = fit_curve(observations, 3, seed=1)
    p = np.array([(20 + 0.5) / 21, (10 + 0.5) / 21, 0.5 / 21])
    assert curve.weights == pytest.approx(tuple(p / p.sum()), abs=1e-6)
    assert sum(curve.weights) == pytest.approx(1.0, abs=1e-12)
    bounds = zip(curve.lower, curve.weights, curve.upper, strict=True)
    assert all(lo <= w <= hi for lo, w, hi in bounds)
    assert curve.provenance["shown_per_position"] == [20, 20, 20]
    with pytest.raises(ValueError, match="position 4 was shown in none"):
        fit_curve(observations, 4)
    fit, held = split_units([o.unit for o in observations], seed=2)
    assert len(fit) == len(held) == 10 and set(fit).isdisjoint(held)
    assert split_units([o.unit for o in observations], seed=2) == (fit, held)


def test_a_record_gives_its_observation():
    record = {
        "question": "q",
        "titles": ["Ada Lovelace", "Alan Turing", "Grace Hopper"],
        "groups": ["female", "male", "female"],
        "answer": "- Grace Hopper",
        "attributed_sources": [{"title": "grace hopper"}],
        "model": "m",
    }
    obs = observation_from_record(record)
    assert obs == PositionObservation("q", ("female", "male", "female"), (False, False, True), "m")
    assert observation_from_record({**record, "answer": None}) is None


def test_a_curve_and_its_model_refuse_what_is_not_a_number_and_bounds_that_cross():
    """Strings and bools were read as floats ("0.5", True), a lower bound above its upper one
    or below 0 was kept, a weight's upper bound above 1 was kept, and 1 and "1" were two
    groups' factors for one text label."""
    from fairrag_core.exposure import ExposureModel, FittedCurve

    for weights in (("0.5", 0.5), (True,)):
        with pytest.raises(TypeError, match="weights must hold numbers"):
            FittedCurve(weights)
    with pytest.raises(ValueError, match="lower must be at most upper"):
        FittedCurve((0.5, 0.5), lower=(0.6, 0.4), upper=(0.5, 0.6))
    with pytest.raises(ValueError, match="upper must be finite and >= 0"):
        FittedCurve((0.5, 0.5), lower=(0.4, 0.4), upper=(0.6, -5))
    # a weight is a share of 1: a bound above it is an edited file, not an interval (the
    # factors' bounds may pass 1, a factor may)
    with pytest.raises(
        ValueError, match="upper bounds a weight, a share of 1, so must be at most 1"
    ):
        FittedCurve((0.5, 0.5), lower=(0.4, 0.4), upper=(0.6, 1.5))
    both = FittedCurve((1.0,), factors=(("f", 1.2),), factor_lower=(1.0,), factor_upper=(1.4,))
    assert both.factor_upper == (1.4,)  # a factor's bound may pass 1
    # one end of an interval is none: a curve that states one was accepted, half-read
    with pytest.raises(ValueError, match="factor_lower and factor_upper are the ends of one"):
        FittedCurve((1.0,), factors=(("f", 1.2),), factor_upper=(1.4,))
    with pytest.raises(ValueError, match="lower and upper are the ends of one interval"):
        FittedCurve((0.5, 0.5), lower=(0.4, 0.4))
    with pytest.raises(ValueError, match="twice"):
        FittedCurve((1.0,), factors=((1, 2.0), ("1", 0.5)))
    with pytest.raises(TypeError, match="patience must be a number"):
        ExposureModel("rbp", patience="0.5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="patience must be a number"):
        ExposureModel("rbp", patience=True)
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        make_ranker("stochastic", seed=-1)
    assert FittedCurve((0.5, 0.5), lower=(0.4, 0.4), upper=(0.6, 0.6)).k == 2


def test_representative_stochastic_warns_under_a_curve_that_rises():
    """A core trial: weights 0.1 -> 0.3 at target 0.2 gave the protected group nothing, the
    look-ahead assuming weights that never rise (docs/SPEC.md names the limit)."""
    import warnings

    from fairrag_core import make_ranker
    from fairrag_core.exposure import ExposureModel, FittedCurve

    rising = ExposureModel.fitted(FittedCurve((0.1, 0.15, 0.2, 0.25, 0.3)))
    with pytest.warns(RuntimeWarning, match=r"rises \(at positions \[2, 3, 4, 5\]"):
        make_ranker("representative_stochastic", protected="f", exposure=rising)
    falling = ExposureModel.fitted(FittedCurve((0.3, 0.25, 0.2, 0.15, 0.1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_ranker("representative_stochastic", protected="f", exposure=falling)


_GROUPS = {
    "format": "fairrag-fitted-exposure-groups/1",
    "weights": [0.6, 0.4],
    "group_factors": {"female": 1.0, "male": 0.9},
}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"group_factor_lower": {"female": 0.9}}, r"group_factor_lower has no bound for .*male"),
        ({"group_factor_lower": [0.9, 0.9]}, "group_factor_lower must be an object"),
        ({"weights": 1}, "weights must be a list of numbers"),
        ({"weights": ["0.6", "0.4"]}, "weights must be a list of numbers"),
        ({"provenance": "abc"}, "provenance must be an object"),
        ({"lower": [10**400, 1]}, "lower holds a number past a float's range"),
        ({"lower": 0}, "lower must be a list of numbers"),  # 0 is no absent field
        ({"group_factor_lower": []}, "group_factor_lower must be an object"),
    ],
)
def test_a_malformed_curve_file_names_the_file_and_the_field(tmp_path, changes, message):
    """A researcher's trial: a missing group bound read "the field 'male' is missing", a list
    "list indices must be integers", a number "'int' object is not iterable", a huge integer an
    OverflowError traceback (exit 1): each names its field now, with the file."""
    path = tmp_path / "curve.json"
    path.write_text(json.dumps({**_GROUPS, **changes}))
    with pytest.raises(ValueError, match=message) as raised:
        load_fitted_curve(path)
    assert str(path) in str(raised.value)


def test_a_curve_file_of_5000_digits_names_the_file(tmp_path):
    path = tmp_path / "curve.json"
    path.write_text('{"format": "fairrag-fitted-exposure/1", "weights": [1' + "0" * 5000 + "]}")
    with pytest.raises(ValueError, match="cannot read a fitted curve") as raised:
        load_fitted_curve(path)
    assert str(path) in str(raised.value)


def test_a_file_that_is_not_json_names_the_formats_accepted(tmp_path):
    """A user trial: ``fitted:curve.csv`` printed the JSON parser's message alone."""
    path = tmp_path / "curve.csv"
    path.write_text("position,weight\n1,0.6\n2,0.4\n")
    with pytest.raises(
        ValueError, match=r"not JSON .*expected a JSON object with format"
    ) as raised:
        load_fitted_curve(path)
    assert str(path) in str(raised.value) and "fairrag-fitted-exposure/1" in str(raised.value)


def test_a_group_given_twice_in_a_curve_file_is_refused(tmp_path):
    """A review: JSON ``group_factors`` naming a group twice kept the last value."""
    path = tmp_path / "curve.json"
    path.write_text(
        '{"format": "fairrag-fitted-exposure-groups/1", "weights": [0.6, 0.4], '
        '"group_factors": {"male": 1.0, "female": 1.0, "male": 2.0}}'
    )
    with pytest.raises(ValueError, match="'male' is given twice"):
        load_fitted_curve(path)
