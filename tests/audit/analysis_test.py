"""fairrag_audit.audit on small logs whose numbers are computed here by other means: the core's
metrics, numpy, scipy and fairrag_core.stats."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from fairrag_audit import audit
from fairrag_audit.report import write_report
from fairrag_core.audit import exposure_name
from fairrag_core.exposure import ExposureModel
from fairrag_core.metrics import exposure_share
from fairrag_core.stats import t_test
from tests.audit.logs import record, write_log

LISTS = [
    ["male", "male", "female", "male", "male"],
    ["female", "male", "male", "female", "male"],
    ["male", "female", None, "male", "female"],
    ["male", "male", "male", "male", "male"],
    ["female", "female"],  # a shorter list weighs less in the amortized figures
]


def metric(table: pd.DataFrame, name: str, **where: object) -> dict:
    rows = table[table["metric"] == name]
    for key, value in where.items():
        rows = rows[rows[key] == value]
    (row,) = rows.to_dict("records")
    return row


def test_amortized_disparity_and_shares_follow_the_spec(tmp_path: Path) -> None:
    path = write_log(tmp_path / "log.jsonl", [record(g) for g in LISTS])
    result = audit(path, protected="female", confidence=0.9)

    weights = [ExposureModel().weights(len(g)) for g in LISTS]
    w = np.array([v.sum() for v in weights])
    p = np.array([exposure_share(g, "female") for g in LISTS])
    amortized = abs((p * w).sum() / w.sum() - 0.5)  # docs/SPEC.md "Metrics over many rankings"
    row = metric(result.rankers, "amortized_disparity")
    assert row["value"] == pytest.approx(amortized)
    assert row["n"] == len(LISTS)
    share = metric(result.rankers, "exposure_share")
    assert share["value"] == pytest.approx((p * w).sum() / w.sum())
    # the delta-method standard error of a ratio estimator, with t(n-1) at 90%
    m, n = share["value"], len(LISTS)
    se = math.sqrt(n / (n - 1) * ((w**2) * (p - m) ** 2).sum()) / w.sum()
    half = scipy_stats.t.ppf(0.95, n - 1) * se
    assert (share["ci_low"], share["ci_high"]) == pytest.approx((m - half, m + half))
    # the mean of per-list disparities, with its t interval
    disparity = metric(result.rankers, "exposure_disparity")
    per_list = np.abs(p - 0.5)
    low, high = scipy_stats.t.interval(
        0.9, n - 1, loc=per_list.mean(), scale=scipy_stats.sem(per_list)
    )
    assert disparity["value"] == pytest.approx(per_list.mean())
    assert (disparity["ci_low"], disparity["ci_high"]) == pytest.approx((low, high))


THREE = {"a": 0.4, "b": 0.3, "c": 0.3}


@pytest.mark.parametrize("protected", [None, "a"], ids=["no-protected", "protected-a"])
@pytest.mark.parametrize("with_shares", [True, False], ids=["exposure_by_group", "groups-only"])
def test_a_target_of_several_groups_is_audited_by_its_own_disparity(
    tmp_path: Path, protected: str | None, with_shares: bool
) -> None:
    """Records of a three-group target (the study's ``--target``, an adapter's dict target):
    the audit reported |ES_a - 0.4| under the name exposure_disparity (0.2304 against the
    records' 0.3054, a user trial) and an amortized disparity of the protected group alone.
    Now the records' own definition, half the L1 distance (labels the target does not name in
    its OTHERS bucket), read from exposure_by_group or from the list; no amortized disparity."""
    from fairrag_core import FairnessAuditor

    auditor = FairnessAuditor.create(target=THREE, protected=protected)
    lists = [["a", "b", "x", None, "c"], ["b", "b", "a"], ["c", "a", "a", "b"], ["x", "x"]]
    records = []
    for groups in lists:
        made = {"ranker": "fair", **auditor.describe(), **auditor.retrieval(groups)}
        if not with_shares:
            made.pop("exposure_by_group")
        records.append(made)
    path = write_log(tmp_path / "log.jsonl", records)
    result = audit(path)
    own = np.array([r["exposure_disparity"] for r in records])
    assert metric(result.rankers, "exposure_disparity")["value"] == pytest.approx(own.mean())
    assert math.isnan(metric(result.rankers, "amortized_disparity")["value"])
    assert any("4 records have a target of several groups" in note for note in result.notes)


def test_a_two_group_target_written_with_an_empty_others_bucket_stays_binary(
    tmp_path: Path,
) -> None:
    """The core writes ``{"female": .5, "male": .5}`` as three entries (``OTHERS``: 0.0): a
    first several-group rule counted them three and lost the amortized disparity (a review)."""
    from fairrag_core import FairnessAuditor

    auditor = FairnessAuditor.create(target={"female": 0.5, "male": 0.5}, protected="female")
    assert len(auditor.describe()["target"]) == 3  # type: ignore[arg-type]
    records = [{"ranker": "fair", **auditor.describe(), **auditor.retrieval(g)} for g in LISTS]
    result = audit(write_log(tmp_path / "log.jsonl", records))
    weights = [ExposureModel().weights(len(g)) for g in LISTS]
    w = np.array([v.sum() for v in weights])
    p = np.array([exposure_share(g, "female") for g in LISTS])
    row = metric(result.rankers, "amortized_disparity")
    assert row["value"] == pytest.approx(abs((p * w).sum() / w.sum() - 0.5))
    assert not any("several groups" in note for note in result.notes)


def test_group_shares_come_from_groups_or_from_exposure_by_group(tmp_path: Path) -> None:
    plain = [record(g, ranker="a") for g in LISTS[:3]]
    for item in plain:  # as written before the record schema: groups only
        item.pop("exposure_by_group", None)
    derived = write_log(tmp_path / "a.jsonl", plain)
    given = [
        record(g, ranker="b", exposure_by_group={"female": 0.25, "male": 0.75}) for g in LISTS[:3]
    ]
    stated = write_log(tmp_path / "b.jsonl", given)
    result = audit([derived, stated], protected="female")
    shares = result.exposure.set_index(["ranker", "group"])["share"]
    w = np.array([ExposureModel().weights(5).sum()] * 3)
    for group in ("female", "male"):
        per_list = np.array([exposure_share(g, group) for g in LISTS[:3]])
        assert shares[("a", group)] == pytest.approx((per_list * w).sum() / w.sum())
    unknown = ExposureModel().weights(5)[2] / ExposureModel().weights(5).sum() / 3
    assert shares[("a", "(unknown)")] == pytest.approx(unknown)  # null label: its own group
    assert shares[("b", "female")] == pytest.approx(0.25)  # exposure_by_group wins when present
    assert metric(result.rankers, "exposure_share", ranker="b")["value"] == pytest.approx(0.25)


def test_exposure_model_of_the_record_is_used(tmp_path: Path) -> None:
    groups = ["male", "female", "male"]
    rbp = ExposureModel("rbp", 0.5)
    stated = record(groups, exposure=rbp, exposure_model="rbp(0.5)")
    stated.pop("exposure_by_group", None)  # derived from groups and the model the record names
    path = write_log(tmp_path / "log.jsonl", [stated] * 3)
    result = audit(path, protected="female")
    expected = exposure_share(groups, "female", exposure=rbp)
    assert metric(result.rankers, "exposure_share")["value"] == pytest.approx(expected)


def test_an_exposure_model_written_in_exponent_form_is_read(tmp_path: Path) -> None:
    groups = ["male", "female", "male"]
    rbp = ExposureModel("rbp", 9.99999999e-05)
    stated = record(groups, exposure=rbp, exposure_model=exposure_name(rbp))
    assert stated["exposure_model"] == "rbp(9.99999999e-05)"
    stated.pop("exposure_by_group", None)
    path = write_log(tmp_path / "log.jsonl", [stated] * 3)
    result = audit(path, protected="female")
    expected = exposure_share(groups, "female", exposure=rbp)
    assert metric(result.rankers, "exposure_share")["value"] == pytest.approx(expected)


def test_generation_metrics_with_t_intervals_and_missing_counted(tmp_path: Path) -> None:
    parities = [0.2, 0.4, 0.6, None, 0.5]
    records = [
        record(g, generation_parity=gp, groundedness=1.0)
        for g, gp in zip(LISTS, parities, strict=True)
    ]
    result = audit(write_log(tmp_path / "log.jsonl", records), protected="female")
    row = metric(result.rankers, "generation_parity")
    values = np.array([0.2, 0.4, 0.6, 0.5])
    low, high = scipy_stats.t.interval(0.95, 3, loc=values.mean(), scale=scipy_stats.sem(values))
    assert row["value"] == pytest.approx(values.mean())
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high))
    assert (row["n"], row["n_missing"]) == (4, 1)
    grounded = metric(result.rankers, "grounded_generation_parity")
    assert grounded["n"] == 0 and math.isnan(grounded["value"])
    assert any(
        note.startswith("grounded_generation_parity: no value in 5 of 5") for note in result.notes
    )


def test_a_metric_that_is_not_a_number_is_missing_and_the_report_says_why(
    tmp_path: Path,
) -> None:
    """``"0.5"`` and ``true`` are read as missing (docs/SPEC.md "Auditing logs"); the note
    says so, where it used to give a missing value's reason (no valid DocTitle citation) for
    an answer that cited four documents validly."""
    values: list[object] = [0.2, "0.5", True, 0.6, None]
    records = [
        record(g, groundedness=1.0, n_valid_citations=4) | {"generation_parity": gp}
        for g, gp in zip(LISTS, values, strict=True)
    ]
    result = audit(write_log(tmp_path / "log.jsonl", records), protected="female")
    row = metric(result.rankers, "generation_parity")
    assert (row["n"], row["n_missing"]) == (2, 3)
    (note,) = [n for n in result.notes if n.startswith("generation_parity: no value in 3 of 5")]
    assert "2 answered, with a value that is not a JSON number" in note
    assert "1 answered, without a value (" in note  # the null one keeps its reason


def test_pairwise_comparison_is_the_cores_t_test(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    records = []
    for ranker, female_rate in (("standard", 0.2), ("fair", 0.5)):
        for _ in range(30):
            groups = ["female" if x else "male" for x in rng.random(5) < female_rate]
            records.append(record(groups, ranker=ranker))
    result = audit(write_log(tmp_path / "log.jsonl", records), protected="female")
    row = result.pairwise[result.pairwise["metric"] == "exposure_share"].iloc[0]
    shares = {
        name: [exposure_share(r["groups"], "female") for r in records if r["ranker"] == name]
        for name in ("fair", "standard")
    }
    expected = t_test(shares["fair"], shares["standard"], alpha=0.01)
    assert (row["a"], row["b"]) == ("fair", "standard")
    assert row["t"] == pytest.approx(expected.t)
    assert row["p"] == pytest.approx(expected.p)
    assert row["significant"] == expected.significant


def test_by_field_at_top_level_or_in_metadata_and_time_windows(tmp_path: Path) -> None:
    records = [
        record(["female", "male"], tenant="acme", timestamp="2026-12-01T00:10:00Z"),
        record(["male", "male"], metadata={"tenant": "acme"}, timestamp="2026-12-01T00:50:00Z"),
        record(["male", "male"], metadata={"tenant": "globex"}, timestamp="2026-12-01T01:10:00Z"),
        record(["female", "female"], timestamp="2026-12-01T01:20:00+01:00"),  # 00:20 UTC
        record(["female", "male"], tenant="acme"),  # no timestamp
    ]
    path = write_log(tmp_path / "log.jsonl", records)
    result = audit(path, by="tenant", window="1h", protected="female")
    cells = result.metrics[result.metrics["metric"] == "exposure_share"]
    found = {(r["tenant"], r["window"]): r["records"] for r in cells.to_dict("records")}
    assert found == {
        ("acme", "2026-12-01T00:00:00Z"): 2,
        ("acme", "(no timestamp)"): 1,
        ("globex", "2026-12-01T01:00:00Z"): 1,
        ("(missing)", "2026-12-01T00:00:00Z"): 1,
    }
    assert any("1 records without a usable timestamp" in note for note in result.notes)

    since = audit(path, since="2026-12-01T00:30:00Z", protected="female")
    assert int(since.reading["used"].iloc[0]) == 2  # 00:50 and 01:10; the undated one left out
    assert any("without a timestamp left out" in note for note in since.notes)


@pytest.mark.parametrize("field", ["group", "metric", "a", "share", "n"])
def test_a_by_field_named_like_a_column_of_the_tables_is_its_own_column(tmp_path, field):
    """An operator's trial: ``--by group`` (an A/B cohort) crashed writing the CSVs, ``--by
    metric`` ended "Grouper for 'metric' not 1-dimensional", and ``--by a`` wrote pairwise.csv
    with the ranker in the column ``a`` and the cohort gone. Its column is ``by:<field>``."""
    records = [
        record(groups, ranker=ranker, metadata={field: cohort})
        for cohort in ("beta", "ga")
        for ranker in ("standard", "fair")
        for groups in (["female", "male"], ["male", "male"], ["male", "female"])
    ]
    result = audit(write_log(tmp_path / "log.jsonl", records), by=field, protected="female")
    column = f"by:{field}"
    cells = result.metrics[result.metrics["metric"] == "exposure_share"]
    assert sorted(zip(cells["ranker"], cells[column], strict=True)) == [
        ("fair", "beta"), ("fair", "ga"), ("standard", "beta"), ("standard", "ga")
    ]  # fmt: skip
    assert set(result.pairwise[column]) == {"beta", "ga"}
    assert set(result.pairwise["a"]) | set(result.pairwise["b"]) == {"fair", "standard"}
    written = write_report(result, tmp_path / "report")  # every table, report and figure
    assert column in pd.read_csv(written["metrics.csv"]).columns


def test_drift_lists_windows_above_the_band(tmp_path: Path) -> None:
    stamps = [f"2026-12-01T0{h}:0{m}:00Z" for h in range(3) for m in range(4)]
    balanced = (["female", "male"], ["male", "female"])  # in turn: amortized parity
    skewed = ["male", "female"]
    records = [
        record(balanced[i % 2] if i < 8 else skewed, timestamp=stamp)
        for i, stamp in enumerate(stamps)
    ]
    result = audit(
        write_log(tmp_path / "log.jsonl", records),
        window="1h",
        max_disparity=0.05,
        protected="female",
    )
    assert list(result.drift["window"]) == ["2026-12-01T02:00:00Z"]
    expected = abs(exposure_share(skewed, "female") - 0.5)
    assert result.drift["value"].iloc[0] == pytest.approx(expected)
    assert bool(result.drift["certain"].iloc[0])  # every list the same: a zero-width interval


def test_damaged_lines_are_skipped_and_counted_plain_and_gzip(tmp_path: Path) -> None:
    damaged = [
        b'{"ranker": "standard", "groups": ["fem\n',  # torn write
        b"not json at all\n",
        b"[1, 2, 3]\n",  # JSON, but not a record: counted apart
        b"\n",  # blank: not a record, not counted
        b'{"ranker": "standard", "groups": ["male"]',  # torn last line without newline
    ]
    records = [record(g) for g in LISTS]
    records.append({"ranker": "standard", "groups": "oops", "k": "five"})  # wrong types
    records.append({"unrelated": 1})  # an object with none of the record fields
    for name in ("log.jsonl", "log.jsonl.gz"):
        result = audit(write_log(tmp_path / name, records, damaged), protected="female")
        row = result.reading.iloc[0]
        assert (row["lines"], row["damaged"], row["not_records"]) == (11, 3, 2)
        assert row["used"] == 6
        assert metric(result.rankers, "exposure_share")["n"] == 5  # "oops" has no groups
        assert any("3 of 11 lines damaged" in note for note in result.notes)
        assert any("2 lines are JSON but not records" in note for note in result.notes)


def test_records_without_protected_group_are_said_not_computed(tmp_path: Path) -> None:
    old = [{"ranker": "standard", "groups": g, "exposure_share": 0.1} for g in LISTS]
    result = audit(write_log(tmp_path / "log.jsonl", old))
    assert math.isnan(metric(result.rankers, "amortized_disparity")["value"])
    assert any("name no protected group" in note for note in result.notes)
    assert not result.exposure.empty  # group shares need no protected group


def test_records_naming_their_protected_group_and_target(tmp_path: Path) -> None:
    records = [record(g, protected="male", target={"male": 0.7, "OTHERS": 0.3}) for g in LISTS]
    result = audit(write_log(tmp_path / "log.jsonl", records), protected="female")
    w = np.array([ExposureModel().weights(len(g)).sum() for g in LISTS])
    p = np.array([exposure_share(g, "male") for g in LISTS])
    row = metric(result.rankers, "amortized_disparity")
    assert row["value"] == pytest.approx(abs((w * p).sum() / w.sum() - 0.7))


def test_binary_garbage_and_a_one_megabyte_answer(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write_log(path, [record(["female", "male"], answer="- A (DocTitle: B)\n" * 60_000)])
    with open(path, "ab") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe{}\n")  # 3 lines, none of them JSON
    write_log(path, [record(["male", "female"])])
    result = audit(path, protected="female")
    row = result.reading.iloc[0]
    assert (row["lines"], row["damaged"], row["used"]) == (5, 3, 2)
    assert metric(result.rankers, "exposure_share")["value"] == pytest.approx(0.5)


def test_missing_by_field_and_timestamps_are_noted(tmp_path: Path) -> None:
    records = [record(["female", "male"], metadata={"tenant": "acme"}), record(["male"])]
    result = audit(write_log(tmp_path / "log.jsonl", records), by="tenant", protected="female")
    assert any(n.startswith("--by tenant: missing from 1 of 2 records") for n in result.notes)
    assert any(n.startswith("2 of 2 records have no usable `timestamp`") for n in result.notes)


def test_intervals_stay_within_the_metrics_range(tmp_path: Path) -> None:
    records = [record(["male"] * 5)] * 5 + [record(["female"] + ["male"] * 4)]
    result = audit(write_log(tmp_path / "log.jsonl", records), protected="female")
    share = metric(result.rankers, "exposure_share")
    assert share["ci_low"] == 0.0 < share["value"]  # t interval would reach below 0
    assert (result.exposure["ci_low"] >= 0).all() and (result.exposure["ci_high"] <= 1).all()


def test_exposure_by_group_of_the_record_schema_names_the_unknown_group(tmp_path: Path) -> None:
    records = [record(g) for g in LISTS[:3]]
    assert all("exposure_by_group" in r for r in records)  # the core writes it
    result = audit(write_log(tmp_path / "log.jsonl", records), protected="female")
    shares = result.exposure.set_index("group")["share"]
    weights = ExposureModel().weights(5)
    assert shares["(unknown)"] == pytest.approx(weights[2] / weights.sum() / 3)
    assert shares.sum() == pytest.approx(1.0)


def test_amortized_disparity_equals_the_cores_stream_metric(tmp_path: Path) -> None:
    from fairrag_core.metrics.amortized import amortized_disparity, amortized_exposure_shares

    for exposure in ("dcg", "rbp(0.5)", "uniform"):
        model = ExposureModel("rbp", 0.5) if exposure.startswith("rbp") else ExposureModel(exposure)
        records = [record(g, exposure=model, exposure_model=exposure) for g in LISTS]
        result = audit(write_log(tmp_path / f"{exposure}.jsonl", records), protected="female")
        expected = amortized_disparity(LISTS, protected="female", target_share=0.5, exposure=model)
        assert metric(result.rankers, "amortized_disparity")["value"] == pytest.approx(expected)
        shares = amortized_exposure_shares(LISTS, protected="female", exposure=model)
        assert metric(result.rankers, "exposure_share")["value"] == pytest.approx(shares["female"])


def test_a_target_of_more_groups_than_the_cap_is_refused(tmp_path: Path) -> None:
    """A target of several groups is read group by group against the list: its size is capped
    as exposure_by_group's is (an unbounded one made each record's work grow with it)."""
    target = {f"g{i}": 1 / 10_001 for i in range(10_001)}
    path = write_log(tmp_path / "log.jsonl", [record(["female", "male"], target=target)])
    result = audit(path)
    assert result.reading["refused"].tolist() == [1]
    assert result.left_out["reason"].tolist() == [
        "target names 10001 groups, above the cap of 10,000"
    ]


@pytest.mark.parametrize("factors", [(), (("None", 1.5), ("female", 0.8), ("male", 1.2))])
@pytest.mark.parametrize("with_shares", [True, False])
def test_records_of_a_fitted_exposure_model_are_audited_by_it(
    tmp_path: Path, factors, with_shares
) -> None:
    """A researcher's trial: every record of a fitted model (``fitted(v1,...)``, with group
    factors ``;g=λ``) was "an exposure model that is not dcg, uniform or rbp(p)": no exposure
    figure at all, so a deployment ranking by the calibrated rankers could not be audited. Its
    figures equal the core's stream metrics under the same model (``λ_g v_i``)."""
    from fairrag_core.exposure import FittedCurve
    from fairrag_core.metrics.amortized import amortized_disparity, amortized_exposure_shares

    model = ExposureModel.fitted(FittedCurve((0.3, 0.25, 0.2, 0.15, 0.1), factors=factors))
    records = [record(g, exposure=model, exposure_model=exposure_name(model)) for g in LISTS]
    if not with_shares:  # read from groups and the model the record names
        for item in records:
            item.pop("exposure_by_group")
            item.pop("exposure_share")
    result = audit(write_log(tmp_path / "log.jsonl", records), protected="female")
    expected = amortized_disparity(LISTS, protected="female", target_share=0.5, exposure=model)
    assert metric(result.rankers, "amortized_disparity")["value"] == pytest.approx(expected)
    shares = amortized_exposure_shares(LISTS, protected="female", exposure=model)
    assert metric(result.rankers, "exposure_share")["value"] == pytest.approx(shares["female"])
    assert metric(result.rankers, "exposure_share")["n"] == len(LISTS)


def test_a_fitted_model_the_audit_cannot_weigh_gives_no_exposure_figures(tmp_path: Path) -> None:
    """A shown group without a factor, fewer weights than the list, weights off 1: counted as
    a model the audit cannot read, never weighed by a guess."""
    good = "fitted(0.5,0.3,0.2;female=1.0;male=2.0)"
    bad = [
        "fitted(0.5,0.3,0.2;female=1.0)",  # no factor for male
        "fitted(0.6,0.4)",  # 2 weights, 3 shown
        "fitted(0.5,0.3,0.3)",  # sums to 1.1
        "fitted(0.5,0.3,0.2;female=-1;male=1)",  # a factor <= 0
        "fitted(0.5,x,0.2)",
    ]
    groups = ["male", "female", "male"]
    records = [
        {**record(groups), "exposure_model": name, "exposure_by_group": None}
        for name in [good, *bad]
    ]
    result = audit(write_log(tmp_path / "log.jsonl", records), protected="female")
    assert metric(result.rankers, "exposure_share")["n"] == 1
    assert any("5 records name an exposure model the audit cannot read" in n for n in result.notes)


def test_a_per_group_fitted_record_without_its_list_is_not_weighed_by_a_guess(tmp_path: Path):
    """A review: records of a per-group fitted model that carried exposure_by_group but no
    groups were weighed equally (the stream's weights need each entry's group): an amortized
    disparity of 0.056 where the core gives 0.224, without a note. They have no exposure
    figure, counted; boolean labels (written True/False by the core, true/false by JSON) are
    weighed by their factors."""
    from fairrag_core import FairnessAuditor
    from fairrag_core.exposure import FittedCurve
    from fairrag_core.metrics.amortized import amortized_exposure_shares

    model = ExposureModel.fitted(FittedCurve((0.6, 0.4), factors=(("False", 0.5), ("True", 1.5))))
    lists = [[False, False], [True, False], [True, True]]
    auditor = FairnessAuditor.create(target={True: 0.5, False: 0.5}, exposure=model)
    records = [{"ranker": "r", **auditor.describe(), **auditor.retrieval(g)} for g in lists]
    result = audit(write_log(tmp_path / "bools.jsonl", records))
    shares = amortized_exposure_shares(lists, target={True: 0.5, False: 0.5}, exposure=model)
    found = {str(r["group"]).lower(): r["share"] for r in result.exposure.to_dict("records")}
    assert found == pytest.approx({"true": shares[True], "false": shares[False]})
    for item in records:
        item.pop("groups")
    listless = audit(write_log(tmp_path / "listless.jsonl", records))
    assert listless.exposure.empty or listless.exposure["share"].isna().all()
    assert any(
        "3 records name an exposure model the audit cannot read" in n for n in listless.notes
    )


def test_a_boolean_protected_group_is_read_as_records_key_it(tmp_path: Path) -> None:
    """A core trial: records write ``protected: true`` and key the target and
    exposure_by_group ``"True"``; the audit looked up ``"true"`` and read a share of 0."""
    from fairrag_core import FairnessAuditor

    auditor = FairnessAuditor.create(protected=True, target_share=0.5)
    lists = [[True, False, False], [False, True, True]]
    records = [{"ranker": "r", **auditor.describe(), **auditor.retrieval(g)} for g in lists]
    result = audit(write_log(tmp_path / "log.jsonl", records))
    from fairrag_core.metrics.amortized import amortized_exposure_shares

    expected = amortized_exposure_shares(lists, protected=True)[True]
    assert metric(result.rankers, "exposure_share")["value"] == pytest.approx(expected)


def test_a_two_group_target_s_disparity_is_the_records_with_unknown_entries(tmp_path: Path):
    """A core trial: a target {f: .5, m: .5} was audited as binary, |p - τ| (0.207), where the
    core's records hold half the L1 distance over f, m and OTHERS (0.428) when entries of
    unknown group are shown; with no protected group the audit gave none."""
    from fairrag_core import FairnessAuditor

    lists = [["f", None, None, "m"], ["m", None, "f", None]]
    for protected in ("f", None):
        auditor = FairnessAuditor.create(target={"f": 0.5, "m": 0.5}, protected=protected)
        records = [{"ranker": "r", **auditor.describe(), **auditor.retrieval(g)} for g in lists]
        result = audit(write_log(tmp_path / f"{protected}.jsonl", records))
        mean = np.mean([r["exposure_disparity"] for r in records])
        assert metric(result.rankers, "exposure_disparity")["value"] == pytest.approx(mean)


def test_by_values_python_reads_as_one_are_one(tmp_path: Path) -> None:
    """A known limit until now: ``--by version`` split 7 and 7.0 (one value to Python, and
    both written by a caller's int or float) into two rows."""
    records = [record(["female", "male"], metadata={"version": v}) for v in (7, 7.0, 8, 7.5)]
    result = audit(write_log(tmp_path / "log.jsonl", records), by="version", protected="female")
    cells = result.metrics[result.metrics["metric"] == "exposure_share"]
    assert sorted(zip(cells["version"], cells["records"], strict=True)) == [
        ("7", 2),
        ("7.5", 1),
        ("8", 1),
    ]


def test_a_fitted_model_name_past_the_audits_bounds_is_not_read(tmp_path: Path) -> None:
    """The audit reads untrusted logs: a fitted model name of 20,000 group factors over a list
    of 2,000 entries took 6 s for one record (every entry looked up among every factor, a
    quadratic cost a 16 MiB line would make hours). Past MAX_FITTED_GROUPS factors the model
    is one the audit cannot read; within them each entry is one map look-up."""
    from fairrag_audit.scan import MAX_FITTED_GROUPS

    def written(groups: int) -> dict:
        name = (
            "fitted(" + ",".join(["0.0005"] * 2000)
            + "".join(f";g{i}=1.0" for i in range(groups)) + ")"
        )  # fmt: skip
        return {
            "ranker": "r",
            "protected": "g1",
            "target": {"g1": 0.5, "OTHERS": 0.5},
            "exposure_model": name,
            "groups": [f"g{i % groups}" for i in range(2000)],
        }

    past = audit(write_log(tmp_path / "past.jsonl", [written(MAX_FITTED_GROUPS + 1)]))
    assert metric(past.rankers, "exposure_share")["n"] == 0
    within = audit(write_log(tmp_path / "within.jsonl", [written(MAX_FITTED_GROUPS)]))
    assert metric(within.rankers, "exposure_share")["value"] == pytest.approx(2 / 2000)


def test_only_records_without_groups_nor_k_are_said_to_weigh_equally(tmp_path: Path) -> None:
    """A user trial: records with ``k`` and ``exposure_share`` but no ``groups`` were said to
    have "no `groups` and no `k`" and to weigh equally, while the amortized figures weighed
    them by k (W of DCG over k positions), as they should."""
    records = []
    for i in range(40):
        k = 1 if i % 2 else 10
        made = {"ranker": "standard", "protected": "female", "target": {"female": 0.5}}
        made |= {"exposure_model": "dcg", "exposure_share": 0.9 if k == 1 else 0.1}
        records.append(made | ({"k": k} if i < 20 else {}))
    result = audit(write_log(tmp_path / "log.jsonl", records))
    (note,) = [n for n in result.notes if "weighs equally" in n]
    assert note.startswith("20 records have no `groups` and no `k`")
    weight = {k: float((1 / np.log2(np.arange(2, k + 2))).sum()) for k in (1, 10)}
    weighed = (10 * weight[1] * 0.9 + 10 * weight[10] * 0.1 + 10 * 0.9 + 10 * 0.1) / (
        10 * weight[1] + 10 * weight[10] + 20
    )
    assert metric(result.rankers, "exposure_share")["value"] == pytest.approx(weighed)


def test_an_exposure_share_read_as_missing_is_said_why(tmp_path: Path) -> None:
    """An operator's trial: records without ``groups`` whose ``exposure_share`` was ``"0.5"``,
    ``true`` or null had no share (as they should not), and "What could not be computed" said
    nothing of them."""
    records = []
    for i, share in enumerate(["0.5", True, None, 0.4, 0.6] * 4):
        made = {"ranker": "standard", "protected": "female", "target": {"female": 0.5}}
        made |= {"exposure_model": "dcg", "k": 5, "exposure_share": share}
        records.append(made if i != 4 else {k: v for k, v in made.items() if k != "exposure_share"})
    result = audit(write_log(tmp_path / "log.jsonl", records))
    assert any(
        n.startswith("8 records without `groups`") and "not a JSON number" in n
        for n in result.notes
    )
    assert any(
        n.startswith("5 records without `groups`") and "(absent or null)" in n for n in result.notes
    )
    assert metric(result.rankers, "exposure_share")["n"] == 7


def test_by_values_that_are_one_whole_number_are_one_group_as_python_reads_them(tmp_path: Path):
    """An operator's trial: ``1e20`` and ``100000000000000000000`` were two groups, and
    ``9223372036854775808.0`` was labelled ``9223372036854776000.0`` (whole numbers were merged
    only below 9e15); an integer in digits keeps its exact digits, as Python reads it."""
    import json

    values = ["1500", "1500.0", "1.5e3", "1e20", "100000000000000000000", "9223372036854775808.0"]
    values += ["100000000000000000001", "1e38"]  # 1e38: the bound, included (it stayed 1e38)
    lines = []
    for value in values * 3:
        made = record(["female", "male"], ranker="standard")
        lines.append(json.dumps(made)[:-1] + f', "tenant": {value}}}')
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = audit(path, by=("tenant",), protected="female")
    expected = {str(int(json.loads(v))) for v in values}  # Python's whole numbers
    assert set(result.metrics["tenant"]) == expected
    assert len(expected) == 5  # 1500, 1e20, 2**63, 1e20 + 1, 1e38
