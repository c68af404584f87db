"""The per-group fitted exposure model (docs/SPEC.md, "Exposure model" → Fitted, per group):
its file and names, its estimator, the share of expected attributions, and the rankers that
target it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fairrag_core import RepresentativeStochasticRanker, make_ranker
from fairrag_core.exposure import (
    ExposureModel,
    FittedCurve,
    fitted_name,
    load_fitted_curve,
    make_exposure_model,
    save_fitted_curve,
)
from fairrag_core.metrics import exposure_disparity, exposure_share
from fairrag_core.position_curve import PositionObservation, fit_group_curve
from fairrag_core.target import make_target

V = (0.3, 0.25, 0.2, 0.15, 0.1)
GAP = FittedCurve(V, factors=(("female", 0.6), ("male", 1.4)))
"""A generator that attributes a woman's entry at 0.6/1.4 the rate of a man's at each rank."""


def _pool(n: int = 25):
    rng = np.random.default_rng(0)
    scores = np.sort(rng.uniform(0.2, 0.9, 2 * n))[::-1]
    groups = ["female" if i % 2 else "male" for i in range(2 * n)]
    return scores, groups


def _attribution_share(labels) -> float:
    """The women's share of expected attributions, by the formula (not the library)."""
    factor = dict(GAP.factors)
    mass = [factor[g] * V[i] for i, g in enumerate(labels)]
    return sum(m for m, g in zip(mass, labels, strict=True) if g == "female") / sum(mass)


def test_the_share_of_expected_attributions_is_the_formula():
    model = ExposureModel.fitted(GAP)
    labels = ["male", "female", "female", "male", "female"]
    expected = (0.6 * 0.25 + 0.6 * 0.2 + 0.6 * 0.1) / (
        1.4 * 0.3 + 0.6 * 0.25 + 0.6 * 0.2 + 1.4 * 0.15 + 0.6 * 0.1
    )
    assert exposure_share(labels, "female", exposure=model) == pytest.approx(expected, abs=1e-12)
    assert exposure_disparity(labels, protected="female", exposure=model) == pytest.approx(
        abs(expected - 0.5), abs=1e-12
    )
    assert model.entry_weights(labels).tolist() == pytest.approx(
        [1.4 * 0.3, 0.6 * 0.25, 0.6 * 0.2, 1.4 * 0.15, 0.6 * 0.1]
    )
    # t' of sum v: women owed t / lambda_f against (1 - t) / lambda_m.
    shares = model.effective_shares(make_target(protected="female"))
    assert shares.tolist() == pytest.approx([1.4 / 2.0, 0.6 / 2.0])
    both = model.effective_shares(make_target(target={"female": 0.5, "male": 0.5}))
    assert both.tolist() == pytest.approx([0.7, 0.3, 0.0])  # OTHERS: owed none


def test_a_group_curve_file_round_trips_and_records_name_it(tmp_path):
    curve = FittedCurve(V, (0.2,) * 5, (0.4,) * 5, {"model": "smollm2"}, (("male", 1.4),
                        ("female", 0.6)), (1.2, 0.4), (1.6, 0.8))  # fmt: skip
    path = save_fitted_curve(curve, tmp_path / "groups.json")
    payload = json.loads(path.read_text())
    assert payload["format"] == "fairrag-fitted-exposure-groups/1"
    assert payload["group_factors"] == {"female": 0.6, "male": 1.4}
    assert payload["group_factor_lower"] == {"female": 0.4, "male": 1.2}
    assert payload["table"]["female"] == pytest.approx([0.6 * v for v in V])
    loaded = load_fitted_curve(path)
    assert loaded == curve and loaded.factor_lower == (0.4, 1.2)
    model = make_exposure_model(f"fitted:{path}")
    assert model.per_group and model.curve == curve
    name = fitted_name(curve)
    assert name == "fitted(0.3,0.25,0.2,0.15,0.1;female=0.6;male=1.4)"
    assert make_exposure_model(name) == model
    # The position-only file is read as before, without factors.
    plain = save_fitted_curve(FittedCurve(V), tmp_path / "plain.json")
    assert not make_exposure_model(f"fitted:{plain}").per_group


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.pop("group_factors"), "field 'group_factors' is missing"),
        (lambda p: p.update(group_factors={}), "non-empty object"),
        (lambda p: p.update(group_factors={"female": -1.0, "male": 1.0}), "finite and > 0"),
        (lambda p: p.update(group_factor_lower={"female": 0.1}), r"'male'"),
        # a user trial: a table that is not factor x weights was accepted and never read
        (lambda p: p["table"].update(female=[9, 9, 9, 9, 9]), r"table\['female'\] is \[9\.0"),
        (lambda p: p["table"].pop("male"), r"table must give .* \['female', 'male'\]"),
    ],
)
def test_bad_group_files_are_clear_errors(tmp_path, change, message):
    payload = save_fitted_curve(GAP, tmp_path / "g.json").read_text()
    data = json.loads(payload)
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        make_exposure_model(f"fitted:{path}")


@pytest.mark.parametrize("name", ["representative_stochastic", "amortized"])
def test_a_ranker_whose_target_the_factors_do_not_cover_is_refused_when_built(name):
    """A user trial: a per-group curve of other groups (black, white) with protected='female'
    was accepted by every adapter and refused only at the first ranking."""
    other = ExposureModel.fitted(FittedCurve(V, factors=(("black", 0.8), ("white", 1.1))))
    with pytest.raises(ValueError, match=r"factors for groups \['black', 'white'\] only; the "):
        make_ranker(name, protected="female", exposure=other)
    make_ranker(name, protected="female", exposure=ExposureModel.fitted(GAP))  # covered


def test_labels_and_targets_the_factors_do_not_cover_are_errors():
    model = ExposureModel.fitted(GAP)
    with pytest.raises(ValueError, match=r"factors for groups \['female', 'male'\].*\['nb'\]"):
        model.entry_weights(["female", "nb"])
    three = ExposureModel.fitted(FittedCurve(V, factors=(("a", 1.0), ("b", 2.0), ("c", 3.0))))
    with pytest.raises(ValueError, match="OTHERS"):
        three.effective_shares(make_target(protected="a"))
    with pytest.raises(ValueError, match="the target names 'x'"):
        model.effective_shares(make_target(target={"x": 0.5, "female": 0.5}))
    with pytest.raises(ValueError, match="group=factor"):
        make_exposure_model("fitted(0.5,0.5;female)")
    # a label whose name could not be read back: refused, never a model named wrongly
    with pytest.raises(ValueError, match=r"must not contain ';'.*\['f;m'\]"):
        FittedCurve(V, factors=(("f;m", 1.0), ("x", 2.0)))
    # '=' and ',' in a label read back (the factor is after the last '=')
    odd = FittedCurve(V, factors=(("a=b,c", 0.5), ("d", 2.0)))
    assert make_exposure_model(fitted_name(odd)).curve == odd


def test_representative_stochastic_hits_the_target_share_of_expected_attributions():
    scores, groups = _pool()
    labels = np.asarray(groups, dtype=object)
    fitted = RepresentativeStochasticRanker(protected="female", exposure=ExposureModel.fitted(GAP))
    rows = fitted.sample(scores, groups, 5, 4000, rng=1)
    share = np.mean([_attribution_share(labels[r].tolist()) for r in rows])
    assert abs(share - 0.5) <= 0.02
    # The same ranker under the position curve alone (no factors) undershoots: it gives women
    # half of sum v, which is less than half the attributions.
    blind = RepresentativeStochasticRanker(
        protected="female", exposure=ExposureModel.fitted(FittedCurve(V))
    )
    rows = blind.sample(scores, groups, 5, 4000, rng=1)
    assert np.mean([_attribution_share(labels[r].tolist()) for r in rows]) < 0.4


def test_amortized_hits_the_target_share_of_expected_attributions_over_its_stream():
    scores, groups = _pool(15)
    labels = np.asarray(groups, dtype=object)
    amortized = make_ranker("amortized", protected="female", exposure=GAP_MODEL, seed=3)
    factor = dict(GAP.factors)
    served = {"female": 0.0, "male": 0.0}
    for _ in range(400):
        for position, index in enumerate(amortized.rank(scores, groups, 5)):
            served[labels[index]] += factor[labels[index]] * V[position]
    assert abs(served["female"] / sum(served.values()) - 0.5) < 0.01


GAP_MODEL = ExposureModel.fitted(GAP)


def test_the_estimator_recovers_a_known_group_curve():
    """Answers drawn with P(attributed | i, g) = lambda_g p_i (each group shown at each
    position equally often): the fitted factors' intervals cover lambda_g / mean(lambda), the
    weights' cover p / sum p."""
    p = np.array([0.8, 0.6, 0.5, 0.4, 0.3])
    lam = {"female": 0.5, "male": 1.0}
    rng = np.random.default_rng(4)
    observations = []
    for q in range(300):
        groups = tuple("female" if (q + i) % 2 else "male" for i in range(5))
        hits = tuple(bool(rng.random() < lam[g] * p[i]) for i, g in enumerate(groups))
        observations.append(PositionObservation(f"q{q % 60}", groups, hits))
    curve = fit_group_curve(observations, 5, seed=2)
    mean = (lam["female"] + lam["male"]) / 2
    for j, (group, factor) in enumerate(curve.factors):
        truth = lam[group] / mean
        assert curve.factor_lower[j] <= truth <= curve.factor_upper[j], (group, factor)
    ratio = curve.factor_of["female"] / curve.factor_of["male"]
    assert ratio == pytest.approx(0.5, abs=0.1)
    truth = p / p.sum()
    assert np.all(np.array(curve.lower) <= truth) and np.all(truth <= np.array(curve.upper))
    assert curve.provenance["shown_per_group_position"]["female"] == [150] * 5
    with pytest.raises(ValueError, match="no observation names the group"):
        fit_group_curve([PositionObservation("q", (None,) * 5, (True,) * 5)], 5)


def test_rerank_refuses_a_pool_label_without_a_factor_before_a_ledger_counts_it():
    """The amortized ledger added the ranking, then the placement's weight had no factor:
    a ranking nobody was served steered the stream. The whole pool is checked first, so the
    error does not depend on which candidates the draw shows either."""
    from fairrag_core import rerank

    amortized = make_ranker("amortized", protected="female", exposure=GAP_MODEL, seed=3)
    for groups in (["female", None, "male"], ["female", "male", "male", "nb"]):
        with pytest.raises(ValueError, match="the pool holds") as refused:
            rerank(amortized, [0.4, 0.3, 0.2, 0.1][: len(groups)], groups, 2)
        assert "female" in str(refused.value) and "male" in str(refused.value)
        assert amortized.ledger.state(amortized.ledger_key).rankings == 0
    placed = rerank(amortized, [0.3, 0.2, 0.1], ["female", "male", "male"], 2)
    assert (
        amortized.ledger.state(amortized.ledger_key).rankings == 1 and len(placed.placements) == 2
    )


def test_factor_bounds_follow_their_factors_and_a_blank_label_is_refused():
    """A core trial: factors given out of label order were sorted and their bounds were not
    (female's interval held male's factor), and a blank label made a name the model could not
    read back."""
    from fairrag_core.exposure import FittedCurve

    curve = FittedCurve(
        (0.5, 0.5),
        factors=(("male", 0.9), ("female", 1.2)),
        factor_lower=(0.85, 1.1),
        factor_upper=(0.95, 1.3),
    )
    assert curve.factors == (("female", 1.2), ("male", 0.9))
    assert (curve.factor_lower, curve.factor_upper) == ((1.1, 0.85), (1.3, 0.95))
    with pytest.raises(ValueError, match="must not contain ';' nor be blank"):
        FittedCurve((0.5, 0.5), factors=(("", 2.0), ("m", 1.0)))


def test_a_curve_file_with_factors_out_of_label_order_keeps_each_groups_interval(tmp_path):
    """A review: a file (hand-written, another tool's) listing male before female had its
    bounds reordered twice on load, each group given the other's interval."""
    from fairrag_core.exposure import FittedCurve, load_fitted_curve, save_fitted_curve

    path = save_fitted_curve(
        FittedCurve(
            (0.5, 0.5),
            factors=(("female", 1.2), ("male", 0.9)),
            factor_lower=(1.1, 0.85),
            factor_upper=(1.3, 0.95),
        ),
        tmp_path / "curve.json",
    )
    payload = json.loads(path.read_text())
    for name in ("group_factors", "group_factor_lower", "group_factor_upper"):
        payload[name] = dict(reversed(list(payload[name].items())))  # male first
    path.write_text(json.dumps(payload))
    loaded = load_fitted_curve(path)
    assert loaded.factors == (("female", 1.2), ("male", 0.9))
    assert (loaded.factor_lower, loaded.factor_upper) == ((1.1, 0.85), (1.3, 0.95))


@pytest.mark.parametrize("name", ["amortized", "representative_stochastic", "forced_exposure"])
def test_a_ranker_called_directly_refuses_a_label_without_a_factor_before_the_draw(name):
    """``rerank`` refused a label the per-group curve has no factor for, but a ranker's own
    ``rank`` served it, and the amortized ranker put it in its ledger, whose stream the
    metrics then refused (a re-implementation from the SPEC)."""
    ranker = make_ranker(name, protected="female", exposure=ExposureModel.fitted(GAP), seed=0)
    scores, groups = [0.1, 0.2, 0.9, 0.05], ["female", "male", "nb", "female"]
    for call in (ranker.rank, ranker.rank_detailed, ranker.sample):
        with pytest.raises(ValueError, match=r"factors for groups \['female', 'male'\].*\['nb'\]"):
            call(scores, groups, 2)
    if name == "amortized":
        assert ranker.ledger.state().rankings == 0
    assert len(ranker.rank(scores, ["female", "male", "male", "female"], 2)) == 2


def test_a_curve_file_holding_factors_under_the_position_format_is_refused(tmp_path):
    """A user trial: a per-group file whose ``format`` said position-only was read as a
    position curve, its factors dropped without a word."""
    from fairrag_core.exposure import (
        FITTED_FORMAT,
        FittedCurve,
        load_fitted_curve,
        save_fitted_curve,
    )

    path = save_fitted_curve(
        FittedCurve((0.5, 0.5), factors=(("female", 1.2), ("male", 0.9))), tmp_path / "c.json"
    )
    payload = json.loads(path.read_text())
    payload["format"] = FITTED_FORMAT
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match="group_factors given under format"):
        load_fitted_curve(path)
