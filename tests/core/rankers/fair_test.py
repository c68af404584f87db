"""The FA*IR ranker, checked against the reference library fairsearchcore as an oracle.

fairsearchcore 1.0.4 (the test extra) fails on pandas >= 1 before it computes any adjusted
table: ``LegalAssignmentKey.__hash__`` returns a ``numpy.int64`` (it adds to a pandas column sum)
and Python requires an ``int`` ("TypeError: __hash__ method should return an integer";
fair-search/fairsearch-fair-python issues #3 and #4). The fixture below casts that hash to
``int``, the fix proposed in issue #4. A hash only places keys in a dict (equality is unchanged),
so the values the oracle computes are the library's own.
"""

from __future__ import annotations

from collections.abc import Iterator

import fairsearchcore as fsc
import numpy as np
import pytest
from fairsearchcore import fail_prob, mtable_generator
from fairsearchcore.models import FairScoreDoc
from hypothesis import given, settings
from hypothesis import strategies as st

from fairrag_core import StandardRanker, make_ranker
from fairrag_core.rankers.fair import FairRanker, adjusted_alpha, fair_mtable

from .strategies import pools

# fairsearchcore warns outside the ranges it was tested on (k < 10, small p).
pytestmark = pytest.mark.filterwarnings("ignore:Library has not been tested:UserWarning")


@pytest.fixture(scope="module", autouse=True)
def _fairsearchcore_hash_fix() -> Iterator[None]:
    original = fail_prob.LegalAssignmentKey.__hash__
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fail_prob.LegalAssignmentKey, "__hash__", lambda self: int(original(self)))
        yield


_ORACLE: dict[tuple[int, float, float], mtable_generator.MTableGenerator] = {}


def oracle(k: int, p: float, alpha: float) -> mtable_generator.MTableGenerator:
    """fairsearchcore's adjusted table generator (what ``Fair`` uses), memoised for speed."""
    if (k, p, alpha) not in _ORACLE:
        _ORACLE[(k, p, alpha)] = mtable_generator.MTableGenerator(k, p, alpha, True)
    return _ORACLE[(k, p, alpha)]


def oracle_ranking(
    scores: list[float], protected: list[bool], k: int, p: float, alpha: float
) -> list[int]:
    """fairsearchcore's FA*IR ranking of a pool, as pool indices.

    The library takes FairScoreDoc objects sorted by score (descending); ties keep pool order.
    ``Fair`` refuses k < 2, so k = 1 goes through the same re-ranker with the same table.
    """
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    docs = [FairScoreDoc(i, scores[i], protected[i]) for i in order]
    if k >= 2:
        fair = fsc.Fair(k, p, alpha)
        fair._cache[(k, p, alpha, True)] = oracle(k, p, alpha).mtable_as_list()
        ranked = fair.re_rank(docs)
    else:
        table = oracle(k, p, alpha).mtable_as_list()
        ranked = fsc.re_ranker.fair_top_k(
            k, [d for d in docs if d.is_protected], [d for d in docs if not d.is_protected], table
        )
    return [d.id for d in ranked]


def _cases(seed: int, count: int, max_k: int) -> list[tuple[int, float, float]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        k = int(rng.integers(1, max_k + 1))
        p = float(rng.choice([0.1, 0.25, 0.3, 0.5, 0.7, round(rng.uniform(0.02, 0.98), 3)]))
        alpha = float(rng.choice([0.05, 0.1, 0.15, round(rng.uniform(0.01, 0.15), 4)]))
        cases.append((k, p, alpha))
    return cases


MTABLE_CASES = [*_cases(13, 100, 10), (15, 0.3, 0.1), (20, 0.5, 0.1), (25, 0.7, 0.05)]


def test_mtables_and_adjusted_alpha_equal_fairsearchcore_on_a_hundred_parameter_sets() -> None:
    equal = 0
    for k, p, alpha in MTABLE_CASES:
        reference = oracle(k, p, alpha)
        assert list(fair_mtable(k, p, alpha)) == reference.mtable_as_list(), (k, p, alpha)
        assert adjusted_alpha(k, p, alpha) == reference.adjusted_alpha, (k, p, alpha)
        unadjusted = mtable_generator.MTableGenerator(k, p, alpha, False).mtable_as_list()
        assert list(fair_mtable(k, p, alpha, adjust=False)) == unadjusted, (k, p, alpha)
        equal += 1
    assert equal == len(MTABLE_CASES) == 103
    # The adjustment matters in these cases (else the comparison would not test it).
    assert sum(adjusted_alpha(*c) != c[2] for c in MTABLE_CASES) > 80
    assert any(fair_mtable(*c) != fair_mtable(*c, adjust=False) for c in MTABLE_CASES)


def test_public_fair_object_gives_the_same_tables() -> None:
    for k, p, alpha in [(10, 0.5, 0.1), (12, 0.3, 0.05), (5, 0.5, 0.1)]:
        fair = fsc.Fair(k, p, alpha)
        assert list(fair_mtable(k, p, alpha)) == fair.create_adjusted_mtable()
        assert list(fair_mtable(k, p, alpha, adjust=False)) == fair.create_unadjusted_mtable()


def test_published_example_table() -> None:
    # fairsearchcore's README: k = 20, p = 0.25, alpha = 0.1.
    assert fair_mtable(20, 0.25, 0.1, adjust=False) == (0,) * 8 + (1,) * 6 + (2,) * 5 + (3,)
    assert fair_mtable(20, 0.25, 0.1) == (0,) * 8 + (1,) * 7 + (2,) * 5


RANKING_PARAMS = [(k, p, a) for k in (1, 2, 3, 5, 8, 10) for p in (0.3, 0.5, 0.7) for a in (0.1,)]
RANKING_PARAMS += [(5, 0.5, 0.05), (5, 0.5, 0.15), (5, 0.25, 0.1), (10, 0.8, 0.1)]


def test_rankings_equal_fairsearchcore_on_four_hundred_random_pools() -> None:
    rng = np.random.default_rng(2017)
    compared = with_ties = forced = 0
    for trial in range(400):
        k, p, alpha = RANKING_PARAMS[trial % len(RANKING_PARAMS)]
        n = int(rng.integers(1, 61))
        if trial % 3 == 0:  # few distinct values: ties within and across groups
            scores = rng.choice([0.0, 0.25, 0.5, 1.0], size=n).tolist()
        else:
            scores = rng.normal(size=n).tolist()
        share = rng.uniform(0.0, 0.6)
        choices = np.array(["female", "male", None], dtype=object)
        labels = rng.choice(choices, size=n, p=[share, 0.8 - share, 0.2])
        groups = labels.tolist()
        protected = [g == "female" for g in groups]
        ranker = make_ranker("fair", protected="female", p=p, alpha=alpha)
        got = ranker.rank(scores, groups, k).tolist()
        expected = oracle_ranking(scores, protected, min(k, n), p, alpha)
        assert got == expected, (trial, k, p, alpha, scores, groups)
        compared += 1
        with_ties += len(set(scores)) < n
        forced += got != StandardRanker().rank(scores, groups, k).tolist()
    assert compared == 400
    assert with_ties > 100 and forced > 50  # both rules were exercised


def test_fills_the_table_with_the_best_protected_candidates() -> None:
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]
    groups = ["male", "male", "male", "male", "male", "female", "female"]
    ranker = make_ranker("fair", protected="female", p=0.5, alpha=0.1)
    assert fair_mtable(5, 0.5, 0.1) == (0, 0, 0, 1, 1)
    # m(4) = 1: position 4 must go to the best female, the rest by score.
    assert ranker.rank(scores, groups, 5).tolist() == [0, 1, 2, 5, 3]


def test_protected_goes_first_on_equal_scores_and_unknowns_are_never_protected() -> None:
    ranker = make_ranker("fair", protected="female", p=0.1, alpha=0.1)
    assert ranker.rank([0.5, 0.5, 0.5], [None, "male", "female"], 3).tolist() == [2, 0, 1]
    # Unknown-group candidates do not satisfy the table: the female is pulled up.
    strict = FairRanker(protected="female", p=0.95, alpha=0.1)
    assert strict.mtable(3) == (1, 2, 2)
    ranking = strict.rank([0.9, 0.8, 0.1, 0.05], [None, None, "female", "female"], 3).tolist()
    assert ranking == [2, 3, 0]


def test_too_few_protected_candidates_are_reported_as_a_shortfall() -> None:
    ranker = FairRanker(protected="female", p=0.9, alpha=0.1)
    assert ranker.mtable(5) == (0, 1, 2, 3, 3)
    result = ranker.rank_detailed([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], ["male"] * 5 + ["female"], 5)
    assert result.indices.tolist() == [0, 5, 1, 2, 3]  # m(2) = 1: the female second
    assert result.quota_shortfall == {"female": 2}  # m(5) = 3 women owed, one in the pool
    enough = ranker.rank_detailed([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], ["female"] * 6, 5)
    assert enough.quota_shortfall == {}


def test_p_defaults_to_the_target_share_and_the_ranker_is_registered() -> None:
    ranker = make_ranker("fair", protected="female", target_share=0.3)
    assert isinstance(ranker, FairRanker)
    assert (ranker.p, ranker.alpha, ranker.adjust_alpha) == (pytest.approx(0.3), 0.1, True)
    assert FairRanker(protected="female").p == 0.5
    explicit = FairRanker(protected="female", p=0.2, alpha=0.05, adjust_alpha=False)
    assert explicit.mtable(10) == fair_mtable(10, 0.2, 0.05, adjust=False)


def test_tables_are_cached_per_parameters() -> None:
    first = fair_mtable(7, 0.41, 0.1)
    assert fair_mtable(7, 0.41, 0.1) is first
    assert fair_mtable(7, 0.41, 0.1, adjust=False) is fair_mtable(7, 0.41, 0.1, adjust=False)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"target": {"a": 0.5, "b": 0.5}}, ValueError, "takes a binary target"),
        (
            {"target": {"a": 0.3, "b": 0.3, "c": 0.4}, "protected": "a"},
            ValueError,
            "takes a binary target",
        ),
        ({"protected": "female", "p": 1.5}, ValueError, "p must be in \\[0, 1\\].*1.5"),
        ({"protected": "female", "p": "half"}, TypeError, "p must be a number"),
        ({"protected": "female", "alpha": 0}, ValueError, "alpha must be in \\(0, 1\\).*got 0"),
        ({"protected": "female", "alpha": 1.0}, ValueError, "alpha must be in \\(0, 1\\)"),
        ({"protected": "female", "adjust_alpha": 1}, TypeError, "adjust_alpha must be True"),
        ({}, ValueError, "no fairness target"),
    ],
)
def test_bad_parameters_raise_naming_them(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make_ranker("fair", **kwargs)


def test_bad_table_arguments_raise() -> None:
    with pytest.raises(ValueError, match="k must be >= 1"):
        fair_mtable(0, 0.5, 0.1)
    with pytest.raises(ValueError, match="alpha must be in"):
        adjusted_alpha(5, 0.5, -0.1)


@settings(max_examples=80, deadline=None)
@given(pool=pools(min_size=1, max_size=40), k=st.integers(1, 12), p=st.sampled_from([0.3, 0.5]))
def test_prefixes_meet_the_table_while_protected_candidates_last(
    pool: tuple[list[float], list[str | None]], k: int, p: float
) -> None:
    scores, groups = pool
    ranker = FairRanker(protected="female", p=p)
    result = ranker.rank_detailed(scores, groups, k)
    shown = np.asarray([groups[i] == "female" for i in result.indices.tolist()])
    table = np.asarray(ranker.mtable(len(shown)))
    available = sum(g == "female" for g in groups)
    assert (np.cumsum(shown) >= np.minimum(table, available)).all()
    top = StandardRanker().rank(scores, groups, k)
    top_protected = np.cumsum([groups[i] == "female" for i in top.tolist()])
    if len(set(scores)) == len(scores) and (top_protected >= table).all():
        assert result.indices.tolist() == top.tolist()


def _batch_pools(rng: np.random.Generator, n_pools: int, n: int, ties: bool):
    scores = (
        rng.choice([0.0, 0.25, 0.5, 1.0], size=(n_pools, n))
        if ties
        else rng.normal(size=(n_pools, n))
    )
    labels = rng.choice(np.array(["female", "male", "x"]), size=(n_pools, n), p=[0.3, 0.5, 0.2])
    return scores, labels


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_rank_batch_ranks_many_pools_as_single_calls_and_fairsearchcore_do(ties: bool) -> None:
    """Issue 26: a many-pools path for FA*IR; every row equals rank() on its pool and
    fairsearchcore's ranking (ties within and across groups, pools shorter than k, pools with
    too few protected candidates)."""
    rng = np.random.default_rng(26)
    ranker = make_ranker("fair", protected="female", p=0.5, alpha=0.1)
    for n in (1, 3, 7, 50):
        scores, labels = _batch_pools(rng, 300, n, ties)
        for k in (1, 2, 5, 12):
            batch = ranker.rank_batch(scores, labels, k)
            assert batch.shape == (300, min(k, n))
            for b in range(300):
                single = ranker.rank(scores[b], labels[b].tolist(), k).tolist()
                assert batch[b].tolist() == single, (n, k, b)
            for b in range(0, 300, 30):
                protected = [label == "female" for label in labels[b].tolist()]
                expected = oracle_ranking(scores[b].tolist(), protected, min(k, n), 0.5, 0.1)
                assert batch[b].tolist() == expected
    # Labels as lists (None among them), with a label that is never protected.
    scores, labels = _batch_pools(rng, 50, 20, ties)
    rows = [[None if label == "x" else label for label in row] for row in labels.tolist()]
    single = [ranker.rank(scores[b], rows[b], 5).tolist() for b in range(50)]
    assert ranker.rank_batch(scores, rows, 5).tolist() == single


def test_rank_batch_reads_labels_as_rank_does_whatever_their_array_type() -> None:
    rng = np.random.default_rng(4)
    scores = rng.random((40, 9))
    for protected, labels in (
        (1, rng.integers(0, 3, size=(40, 9))),  # int labels
        (True, rng.integers(0, 3, size=(40, 9))),  # True == 1, as a dict lookup finds it
        ("1", rng.integers(0, 3, size=(40, 9))),  # a str never equals an int
        (b"f", rng.choice(np.array([b"f", b"m"]), size=(40, 9))),
        ("f", rng.choice(np.array([b"f", b"m"]), size=(40, 9))),  # str against bytes
    ):
        ranker = make_ranker("fair", protected=protected, p=0.6, alpha=0.1)
        single = [ranker.rank(scores[b], labels[b].tolist(), 4).tolist() for b in range(40)]
        assert ranker.rank_batch(scores, labels, 4).tolist() == single, protected


@pytest.mark.parametrize(
    ("scores", "groups", "error", "message"),
    [
        ([0.1, 0.2], [["a", "b"]], ValueError, "scores must be 2-D"),
        ([[0.1, float("nan")]], [["a", "b"]], ValueError, r"non-finite values in pools \[0\]"),
        ([[0.1, 0.2]], [["a", "b"], ["a", "b"]], ValueError, "groups has 2 rows but scores has 1"),
        ([[0.1, 0.2]], [["a"]], ValueError, r"groups\[0\] has 1 labels but scores has 2"),
        ([[0.1, 0.2]], np.array([["a", "b", "c"]]), ValueError, r"shape \(1, 2\)"),
        ([[0.1, 0.2]], ["ab"], TypeError, r"groups\[0\] must be a sequence of labels"),
        ([[0.1, 0.2]], "ab", TypeError, "one sequence of labels per pool"),
        ([[0.1, 0.2]], [["a", ["b"]]], TypeError, r"groups\[0\]: .*hashable.* position 1"),
    ],
)
def test_rank_batch_refuses_bad_input_naming_it(scores, groups, error, message) -> None:
    with pytest.raises(error, match=message):
        make_ranker("fair", protected="a").rank_batch(scores, groups, 2)


def test_rank_batch_orders_extreme_and_neighbouring_floats_as_rank_does() -> None:
    """The batch sorts by the scores' bits: -0.0 and 0.0, one-ulp neighbours, subnormals and
    the largest floats of both signs are ordered (ties by position) as the single call orders
    them."""
    values = np.array(
        [0.0, -0.0, 1.0, np.nextafter(1.0, 2.0), np.nextafter(1.0, 0.0), -1.0,
         np.nextafter(-1.0, 0.0), 1e308, -1e308, 5e-324, -5e-324, 0.5]
    )  # fmt: skip
    rng = np.random.default_rng(9)
    ranker = make_ranker("fair", protected="f", p=0.5, alpha=0.1)
    for nonnegative in (False, True):
        pool_values = np.abs(values) if nonnegative else values
        scores = rng.choice(pool_values, size=(400, 12))
        labels = rng.choice(np.array(["f", "m"]), size=(400, 12))
        for k in (1, 3, 5, 12):
            single = [ranker.rank(scores[b], labels[b].tolist(), k).tolist() for b in range(400)]
            assert ranker.rank_batch(scores, labels, k).tolist() == single, (nonnegative, k)


@pytest.mark.parametrize("protected", ["female", "fem", "femalex", "female\0", "", "é"])
def test_rank_batch_compares_string_labels_as_python_does(protected: str) -> None:
    """String arrays are compared a machine word at a time: a label longer than the array's
    width, a prefix, a trailing NUL or the empty string match exactly what rank() matches."""
    rng = np.random.default_rng(7)
    labels = rng.choice(np.array(["female", "male", "fem", "", "é"]), size=(60, 8))
    scores = rng.random((60, 8))
    ranker = make_ranker("fair", protected=protected, p=0.5, alpha=0.1)
    single = [ranker.rank(scores[b], labels[b].tolist(), 4).tolist() for b in range(60)]
    assert ranker.rank_batch(scores, labels, 4).tolist() == single


def test_a_target_naming_two_groups_is_binary() -> None:
    """``{"female": 0.5, "male": 0.5}`` was refused as not binary (its OTHERS bucket, at 0,
    counted as a third group): a study on one's own data could never run FA*IR."""
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    groups = ["male", "male", "male", "female", "female", "male"]
    named = make_ranker("fair", protected="female", target={"female": 0.6, "male": 0.4})
    binary = make_ranker("fair", protected="female", target_share=0.6)
    assert named.p == binary.p == 0.6
    assert list(named.rank(scores, groups, 5)) == list(binary.rank(scores, groups, 5))
