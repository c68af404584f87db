"""The amortized ranker (docs/SPEC.md, item 6): its draw, its ledger, its stream."""

from __future__ import annotations

import copy
import itertools
import math
import pickle
import threading

import numpy as np
import pytest

from fairrag_core import (
    AmortizedRanker,
    LedgerUnavailableError,
    RepresentativeStochasticRanker,
    StochasticRanker,
    make_ranker,
    position_weights,
)
from fairrag_core.ledger import MemoryLedger, SQLiteLedger
from fairrag_core.metrics import exposure_share
from fairrag_core.plackett_luce import gumbel_order, plackett_luce_log_weights
from fairrag_core.rankers import amortized as amortized_module
from fairrag_core.rankers.amortized import (
    DEFAULT_ALPHA,
    DEFAULT_GAIN,
    DEFAULT_SPREAD,
    draw_amortized,
    draw_amortized_many,
    flat_top_log_weights,
)

V5 = position_weights(5)


def _served(scores, groups, ranking) -> dict:
    """``{label: exposure}`` of one served ranking (what the ledger must have received)."""
    out: dict = {}
    for position, index in enumerate(ranking.tolist()):
        out[groups[index]] = out.get(groups[index], 0.0) + float(V5[position])
    return out


def _skewed_pool(n: int = 30, seed: int = 0):
    """Protected candidates a little below the others: stochastic shows them ~25% of exposure."""
    rng = np.random.default_rng(seed)
    scores = np.sort(rng.uniform(0.3, 0.7, n))[::-1]
    groups = ["female" if rng.random() < 0.25 + 0.5 * i / n else "male" for i in range(n)]
    return scores, groups


def test_make_ranker_builds_it_with_a_ledger_and_a_key(tmp_path):
    ledger = SQLiteLedger(tmp_path / "l.db")
    ranker = make_ranker("amortized", protected="female", ledger=ledger, ledger_key="tenant-a")
    assert isinstance(ranker, AmortizedRanker)
    assert (ranker.ledger, ranker.ledger_key, ranker.gain) == (ledger, "tenant-a", DEFAULT_GAIN)
    assert "ledger=SQLiteLedger(" in repr(ranker)
    default = make_ranker("amortized", protected="female")
    assert isinstance(default.ledger, MemoryLedger)
    assert default.ledger_key == "default"
    assert isinstance(
        make_ranker("amortized", protected="f", ledger=str(tmp_path / "x.db")).ledger, SQLiteLedger
    )


def test_the_ledger_holds_exactly_the_rankings_served():
    scores, groups = _skewed_pool()
    groups = [None if i % 7 == 0 else g for i, g in enumerate(groups)]
    ranker = make_ranker("amortized", protected="female", ledger_key="t", seed=1)
    expected: dict = {}
    for _ in range(200):
        for label, value in _served(scores, groups, ranker.rank(scores, groups, 5)).items():
            expected[label] = expected.get(label, 0.0) + value
    state = ranker.ledger.state("t")
    assert state.rankings == 200
    assert state.totals == pytest.approx(expected, rel=1e-12)
    assert None in state.totals  # the unknown group is stored as itself
    assert ranker.ledger.state("default").rankings == 0


def test_the_stream_reaches_the_target_where_stochastic_misses_it_and_keeps_more_relevance():
    """The defaults and the old defaults (alpha 8, spread None) both bring the stream to the
    target. On this pool of uniformly spread scores (12 of 30 candidates in the top 40% of the
    score range) only the old defaults keep more score-weighted relevance than
    representative_stochastic: spread 4 gives the candidates near the top nearly equal exposure,
    which costs score here (measured: defaults 1.877, representative 1.964, old defaults 1.993;
    docs/SPEC.md item 6, "Spread"). On the study's pools, whose top is sparse, the defaults lose
    0.53x representative_stochastic's nDCG@5."""
    scores, groups = _skewed_pool()
    labels = np.asarray(groups, dtype=object)
    streams = {
        "amortized": make_ranker("amortized", protected="female", seed=3),
        "old defaults": make_ranker("amortized", protected="female", alpha=8, spread=None, seed=3),
        "stochastic": StochasticRanker(seed=3),
        "representative": RepresentativeStochasticRanker(protected="female", seed=3),
    }
    share, relevance = {}, {}
    for name, ranker in streams.items():
        rankings = [ranker.rank(scores, groups, 5) for _ in range(1000)]
        share[name] = np.mean([exposure_share(labels[r].tolist(), "female") for r in rankings])
        relevance[name] = np.mean([scores[r] @ V5 for r in rankings])
    assert share["stochastic"] < 0.35  # the pool really is skewed
    for name in ("amortized", "old defaults"):
        assert abs(share[name] - 0.5) < 0.02, name
        state = streams[name].ledger.state()
        assert abs(state.totals["female"] / state.total - 0.5) < 0.02, name
    assert relevance["old defaults"] > relevance["representative"]


def _default_log_weights(scores) -> np.ndarray:
    """The defaults' log-weights: flat-topped, spread 4 over R = 2 ** 7 - 1 (SPEC item 6)."""
    scores = np.asarray(scores, dtype=float)
    span = 2.0**DEFAULT_ALPHA - 1
    return flat_top_log_weights(scores, span, DEFAULT_SPREAD, scores.min(), scores.max())


def _first_position_female_probability(scores, groups, correction: dict) -> float:
    """P(female first) = sum_f exp(w_f + c_f) / sum_d exp(w_d + c_d) (SPEC item 6, one draw)."""
    log_weights = _default_log_weights(scores)
    keys = log_weights + np.array([correction[g] for g in groups])
    female = np.array([g == "female" for g in groups])
    return float(np.exp(np.logaddexp.reduce(keys[female]) - np.logaddexp.reduce(keys)))


@pytest.mark.parametrize(
    ("past", "female_share"),
    [({"male": 100.0}, 0.0), ({"female": 100.0}, 1.0), ({"female": 49.9, "male": 50.1}, 0.499)],
)
def test_the_ledger_steers_the_first_position_as_the_formula_says(past, female_share):
    scores, groups = _skewed_pool()
    ledger = MemoryLedger()
    ledger.add("stream", past)
    ranker = make_ranker("amortized", protected="female", ledger=ledger, ledger_key="stream")
    ledger.add = lambda key, exposure: None  # keep the stream's state fixed for every draw
    span = 2.0**DEFAULT_ALPHA - 1
    c_female = span * float(np.clip(DEFAULT_GAIN * (0.5 - female_share), -1, 1))
    expected = _first_position_female_probability(
        scores, groups, {"female": c_female, "male": -c_female}
    )
    draws = 3000
    picks = [groups[ranker.rank(scores, groups, 1, rng=s)[0]] for s in range(draws)]
    observed = picks.count("female") / draws
    tolerance = 4.5 * math.sqrt(max(expected * (1 - expected), 1e-4) / draws)
    assert abs(observed - expected) < tolerance
    if female_share == 0.0:
        assert observed > 0.99
    elif female_share == 1.0:
        assert observed < 0.01


@pytest.mark.parametrize(
    ("past", "gain", "span", "expected_correction"),
    [
        ([0.0, 0.0], 10.0, 1.0, 0.0),  # an empty stream: no correction before the first draw
        ([1.0, 3.0], 10.0, 1.0, 1.0),  # female share 0.25: 10 * 0.25 = 2.5, capped at 1
        ([3.0, 1.0], 10.0, 1.0, -1.0),
        ([0.96, 1.04], 10.0, 1.0, 0.2),  # female share 0.48: uncapped
        ([0.96, 1.04], 10.0, 3.0, 0.6),  # the span scales it
        ([1.0, 3.0], 10.0, 3.0, 3.0),  # ... and caps it
    ],
)
def test_first_draw_is_plackett_luce_with_the_capped_correction(
    past, gain, span, expected_correction
):
    """Two candidates, one per group: P(female first) = sigmoid(w_f + c_f - w_m - c_m)."""
    log_weights = np.array([3.0, 2.0])  # male, female
    codes = np.array([1, 0])  # target buckets: 0 = female, 1 = OTHERS
    shares = np.array([0.5, 0.5])
    logit = (2.0 + expected_correction) - (3.0 - expected_correction)
    expected = 1 / (1 + math.exp(-logit))
    rng = np.random.default_rng(5)
    draws = 6_000
    female_first = sum(
        draw_amortized(log_weights, codes, shares, np.array(past), V5[:1], gain, span, rng)[0] == 1
        for _ in range(draws)
    )
    # 4.5 standard errors: a wrong correction (or none) moves it by far more.
    tolerance = 4.5 * math.sqrt(expected * (1 - expected) / draws)
    assert abs(female_first / draws - expected) < tolerance


def test_the_partial_list_counts_within_a_ranking():
    """Empty stream, two equal candidates per group: after a male first, the second position
    sees female share 0 and corrects by +1 / -1, so P(female second) = 2e / (2e + 1/e)."""
    log_weights = np.zeros(4)
    codes = np.array([0, 0, 1, 1])
    shares = np.array([0.5, 0.5])
    rng = np.random.default_rng(6)
    seconds = []
    for _ in range(6_000):
        ranking = draw_amortized(log_weights, codes, shares, np.zeros(2), V5[:2], 5.0, 1.0, rng)
        if codes[ranking[0]] == 1:
            seconds.append(codes[ranking[1]] == 0)
    expected = 2 * math.e / (2 * math.e + math.exp(-1.0))
    tolerance = 4.5 * math.sqrt(expected * (1 - expected) / len(seconds))
    assert abs(np.mean(seconds) - expected) < tolerance


def test_same_seed_and_same_ledger_state_give_the_same_ranking():
    scores, groups = _skewed_pool()
    a = make_ranker("amortized", protected="female", seed=9)
    b = make_ranker("amortized", protected="female", seed=9)
    sequence_a = [a.rank(scores, groups, 5).tolist() for _ in range(20)]
    sequence_b = [b.rank(scores, groups, 5).tolist() for _ in range(20)]
    assert sequence_a == sequence_b
    assert a.ledger.state().totals == b.ledger.state().totals


def test_concurrent_requests_read_the_same_state_and_no_update_is_lost():
    """Two requests read the ledger before either adds (a stale read): both draws see the same
    state, and both rankings are in the ledger afterwards."""
    scores, groups = _skewed_pool()
    reads = threading.Barrier(2, timeout=10)
    seen = []

    class BothReadFirst(MemoryLedger):
        blocking = True

        def _read(self, key):
            state = super()._read(key)
            if self.blocking:
                seen.append(state)
                reads.wait()  # neither request adds before both have read
            return state

    ledger = BothReadFirst()
    ledger.add("k", {"male": 10.0})
    ranker = make_ranker("amortized", protected="female", ledger=ledger, ledger_key="k")
    results = [None, None]

    def request(i: int) -> None:
        results[i] = ranker.rank(scores, groups, 5, rng=i)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    ledger.blocking = False
    assert seen == [({'"male"': 10.0}, 1)] * 2
    expected = {"male": 10.0}
    for ranking in results:
        for label, value in _served(scores, groups, ranking).items():
            expected[label] = expected.get(label, 0.0) + value
    state = ledger.state("k")
    assert state.rankings == 3
    assert state.totals == pytest.approx(expected, rel=1e-12)


def test_threads_sharing_one_ranker_lose_no_update():
    scores, groups = _skewed_pool()
    ranker = make_ranker("amortized", protected="female", ledger=MemoryLedger(), ledger_key="k")
    served: list = []
    lock = threading.Lock()

    def work(seed: int) -> None:
        for i in range(100):
            ranking = ranker.rank(scores, groups, 5, rng=seed * 1000 + i)
            with lock:
                served.append(ranking)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    expected: dict = {}
    for ranking in served:
        for label, value in _served(scores, groups, ranking).items():
            expected[label] = expected.get(label, 0.0) + value
    state = ranker.ledger.state("k")
    assert state.rankings == len(served) == 600
    assert state.totals == pytest.approx(expected, rel=1e-12)


def test_a_ledger_failure_serves_nothing_and_the_ranker_works_again():
    scores, groups = _skewed_pool()

    class Flaky(MemoryLedger):
        down = False

        def _add(self, key, exposure):
            if self.down:
                raise LedgerUnavailableError("ledger down (test)")
            super()._add(key, exposure)

    ledger = Flaky()
    ranker = make_ranker("amortized", protected="female", ledger=ledger, seed=0)
    ranker.rank(scores, groups, 5)
    ledger.down = True
    with pytest.raises(LedgerUnavailableError, match="ledger down"):
        ranker.rank(scores, groups, 5)
    ledger.down = False
    ranker.rank(scores, groups, 5)
    assert ledger.state().rankings == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"ledger_key": ""}, ValueError, "ledger_key must be a non-empty string"),
        ({"ledger_key": 7}, ValueError, "ledger_key must be a non-empty string .*, got 7"),
        ({"gain": -1.0}, ValueError, "gain must be a finite number >= 0, got -1.0"),
        ({"gain": math.inf}, ValueError, "gain must be a finite number"),
        ({"ledger": "ftp://host/x"}, ValueError, "ledger must be an ExposureLedger"),
        ({"alpha": 0}, ValueError, "alpha must be a finite number > 0"),
        ({"spread": 0.5}, ValueError, "spread must be None or a finite number >= 1"),
        ({"spread": math.nan}, ValueError, "spread must be None or a finite number >= 1"),
        ({"spread": True}, TypeError, "spread must be None or a number >= 1, got True"),
        ({"spread": "4"}, TypeError, "spread must be None or a number >= 1, got '4'"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, error, message):
    with pytest.raises(error, match=message):
        make_ranker("amortized", protected="female", **kwargs)


def test_a_label_the_ledger_cannot_store_is_refused_before_any_work():
    ranker = make_ranker("amortized", protected="female", seed=0)
    with pytest.raises(TypeError, match=r"group label 1\.5 \(float\)"):
        ranker.rank([0.9, 0.8, 0.7], ["female", 1.5, "male"], 3)
    with pytest.raises(TypeError, match=r"group label True \(bool\)"):  # True == 1 as a key
        ranker.rank([0.9, 0.8, 0.7], [1, True, "male"], 3)
    assert ranker.ledger.state().rankings == 0
    # Labels read once: a generator of groups works.
    ranking = ranker.rank([0.9, 0.8, 0.7], (g for g in ["female", 2, None]), 3)
    assert sorted(ranking.tolist()) == [0, 1, 2]
    assert ranker.ledger.state().totals.keys() == {"female", 2, None}


def test_a_copy_of_the_ranker_shares_its_ledger_but_not_its_generator(tmp_path):
    ranker = make_ranker("amortized", protected="female", ledger=tmp_path / "l.db", seed=1)
    twin = copy.deepcopy(ranker)
    assert twin.ledger is ranker.ledger
    assert twin._rng is not ranker._rng
    scores, groups = _skewed_pool()
    twin.rank(scores, groups, 5)
    ranker.rank(scores, groups, 5)
    assert ranker.ledger.state().rankings == 2
    revived = pickle.loads(pickle.dumps(ranker))  # another process would reopen the same file
    assert revived.ledger.path == ranker.ledger.path
    assert revived.ledger.state().rankings == 2


def test_a_detailed_result_keeps_the_state_it_was_drawn_from_and_redraws_from_it():
    scores, groups = _skewed_pool()
    ranker = make_ranker("amortized", protected="female", seed=4)
    for _ in range(30):
        ranker.rank(scores, groups, 5)
    result = ranker.rank_detailed(scores, groups, 5, rng=1234)
    assert result.ledger_state.rankings == 30
    assert ranker.ledger.state().rankings == 31
    # Another ranker on a ledger holding the recorded totals draws the same list from the seed.
    replay = MemoryLedger()
    replay.add("default", result.ledger_state.totals)
    again = make_ranker("amortized", protected="female", ledger=replay)
    assert again.rank(scores, groups, 5, rng=1234).tolist() == result.indices.tolist()
    # Not from the stream's current state: the ledger really is part of the draw.
    later = [ranker.rank(scores, groups, 5, rng=1234).tolist() for _ in range(20)]
    assert any(ranking != result.indices.tolist() for ranking in later)


def test_sampling_and_expected_exposure_draw_from_the_ledger_without_adding_to_it(tmp_path):
    from fairrag_core.metrics import expected_exposure_of

    scores, groups = _skewed_pool()
    ranker = make_ranker("amortized", protected="female", ledger=tmp_path / "l.db", seed=2)
    for _ in range(40):
        ranker.rank(scores, groups, 5)
    before = ranker.ledger.state()
    batch = ranker.sample(scores, groups, 5, 1000, rng=9)
    expected_exposure_of(ranker, scores, groups, k=5, n_samples=100, rng=1)
    assert ranker.ledger.state() == before  # measuring served nothing
    assert batch.shape == (1000, 5)
    assert all(len(set(row)) == 5 for row in batch.tolist())
    # Every row is an independent draw from the same state: the first position's frequencies
    # are those of the next rank() call on a ledger holding these totals (one seed each).
    replay = MemoryLedger()
    replay.add("default", before.totals)
    fresh = make_ranker("amortized", protected="female", ledger=replay)
    firsts = []
    for seed in range(1000):
        firsts.append(fresh.rank(scores, groups, 5, rng=seed)[0])
        replay.reset("default")
        replay.add("default", before.totals)
    sampled = np.bincount(batch[:, 0], minlength=len(scores)) / 1000
    served = np.bincount(firsts, minlength=len(scores)) / 1000
    assert np.abs(sampled - served).sum() / 2 < 0.1  # total variation, 1000 draws each


class _Noise:
    """A stand-in generator giving :func:`draw_amortized` chosen noise (its two calls)."""

    def __init__(self, gumbels: np.ndarray, uniforms: np.ndarray) -> None:
        self._gumbels, self._uniforms = gumbels, uniforms

    def gumbel(self, size: int) -> np.ndarray:
        return self._gumbels[:size]

    def random(self, size: int) -> np.ndarray:
        return self._uniforms[:size]


@pytest.mark.parametrize("case", range(12))
def test_sample_rows_are_exactly_successive_single_draws(case):
    """Issue 26: sample is drawn for all rows at once; row b is still exactly the (b+1)-th
    successive single draw from the same state and generator (ties, several groups, large
    alpha, an empty ledger and gain 0 included), and row 0 is what rank() draws with that
    seed on a ledger in that state."""
    rng = np.random.default_rng(case)
    n = int(rng.integers(2, 45))
    k = int(rng.integers(1, 9))
    scores = rng.random(n)
    if case % 3 == 0:
        scores = np.round(scores, 1)  # equal scores
    several = case % 2 == 1
    labels = ["a", "b", "c", None] if several else ["a", "b", None]
    groups = [labels[int(i)] for i in rng.integers(0, len(labels), n)]
    fairness = {"target": {"a": 0.4, "b": 0.3, "c": 0.3}} if several else {"protected": "a"}
    past = {} if case % 4 == 0 else {"a": float(rng.uniform(0, 9)), "b": float(rng.uniform(0, 30))}
    alpha = [1.0, 4.0, 8.0, 80.0][case % 4]
    gain = [0.0, 2.0, 80.0][case % 3]

    def ledger():
        fresh = MemoryLedger()
        if past:
            fresh.add("default", past)
        return fresh

    ranker = make_ranker("amortized", alpha=alpha, gain=gain, ledger=ledger(), **fairness)
    batch = ranker.sample(scores, groups, k, 500, rng=case)
    pool, k_used, generator = ranker._prepare(scores, groups, k, case)
    weights = ranker.exposure.weights(k_used)
    state = ranker._past(ranker.ledger.state())
    expected = [ranker._draw(pool, weights, state, generator) for _ in range(500)]
    assert batch.tolist() == np.asarray(expected).tolist()
    again = make_ranker("amortized", alpha=alpha, gain=gain, ledger=ledger(), **fairness)
    assert again.rank(scores, groups, k, rng=case).tolist() == batch[0].tolist()


def test_the_batch_draw_matches_the_single_draw_at_the_edges_of_its_choices():
    """Uniforms at 0, just below 1 and at the exact boundary between two groups, and a group
    whose mass underflows: the batch draw takes the same group as the single draw."""
    rng = np.random.default_rng(5)
    n, k = 12, 5
    log_weights = plackett_luce_log_weights(rng.random(n), 8.0)
    codes = np.array([0, 1] * 6, dtype=np.intp)
    shares = np.array([0.5, 0.5])
    weights = position_weights(k)
    cases = [np.zeros(k), np.full(k, 1.0 - 2.0**-53), np.full(k, 0.5), rng.random(k)]
    for past in (np.array([0.0, 0.0]), np.array([1.0, 40.0]), np.array([1e-300, 5.0])):
        for span in (1.0, 255.0, 1e6):
            gumbels = rng.gumbel(size=(len(cases), n))
            uniforms = np.array(cases)
            orders = gumbel_order(log_weights + gumbels, gumbels)
            batch = draw_amortized_many(
                log_weights, codes, shares, past, weights, 80.0, span, orders, uniforms
            )
            for row in range(len(cases)):
                noise = _Noise(gumbels[row], uniforms[row])
                single = draw_amortized(
                    log_weights, codes, shares, past, weights, 80.0, span, noise
                )
                assert batch[row].tolist() == single.tolist(), (past, span, row)


def test_the_batch_draw_takes_the_last_group_where_rounding_leaves_the_single_draw_there(
    monkeypatch,
):
    """Three groups, two of them with masses near 2**-53 and uniforms a hair below 1: the
    correctly rounded total (math.fsum) exceeds the running sum, so the single draw's inverse
    CDF runs off the end and takes the last group left; the batch draw does the same."""
    ran_off = []

    def counting(logits, uniform):
        top = max(logits)
        masses = [math.exp(x - top) for x in logits]
        running = list(itertools.accumulate(masses))
        ran_off.append(uniform * math.fsum(masses) >= running[-1])
        return original(logits, uniform)

    original = amortized_module._sample_index
    monkeypatch.setattr(amortized_module, "_sample_index", counting)
    rng = np.random.default_rng(0)
    codes = np.array([0, 1, 2, 0, 1, 2], dtype=np.intp)
    shares, past, weights = np.full(3, 1 / 3), np.zeros(3), position_weights(3)
    for _ in range(300):
        log_weights = np.array([0.0, -36 - rng.random(), -36 - rng.random(), -1.0, -37.0, -37.5])
        gumbels = rng.gumbel(size=(4, 6)) * 1e-3
        uniforms = 1.0 - rng.random((4, 3)) * 1e-15
        orders = gumbel_order(log_weights + gumbels, gumbels)
        batch = draw_amortized_many(
            log_weights, codes, shares, past, weights, 0.0, 1.0, orders, uniforms
        )
        for row in range(4):
            noise = _Noise(gumbels[row], uniforms[row])
            single = draw_amortized(log_weights, codes, shares, past, weights, 0.0, 1.0, noise)
            assert batch[row].tolist() == single.tolist()
    assert sum(ran_off) > 50  # the rule was exercised


def test_spread_gives_flat_topped_log_weights_over_the_same_range():
    """docs/SPEC.md item 6, "Spread": w = R (1 - (1 - u) ** spread), u = s_norm - 1."""
    scores = np.array([0.9, 0.8, 0.5, 0.1])
    u = (scores - 0.1) / 0.8
    span = 2.0**7 - 1
    weights = flat_top_log_weights(scores, span, 4.0, 0.1, 0.9)
    np.testing.assert_allclose(weights, span * (1 - (1 - u) ** 4), rtol=1e-12)
    assert weights[0] == span and weights[-1] == 0.0
    # Concave: the top two are closer than under s_norm ** alpha, the bottom two further apart.
    convex = plackett_luce_log_weights(scores, 7.0) - 1.0
    assert weights[0] - weights[1] < convex[0] - convex[1]
    assert weights[2] - weights[3] > convex[2] - convex[3]
    assert flat_top_log_weights(np.full(3, 0.4), span, 4.0, 0.4, 0.4).tolist() == [0.0] * 3
    ranker = make_ranker("amortized", protected="female", alpha=7.0, spread=4.0)
    assert ranker.spread == 4.0 and "spread=4.0" in repr(ranker)
    # The defaults (issue 26): alpha 7, spread 4, gain 80; spread=None is the old draw's weights.
    assert (DEFAULT_ALPHA, DEFAULT_SPREAD, DEFAULT_GAIN) == (7.0, 4.0, 80.0)
    default = make_ranker("amortized", protected="female")
    assert (default.alpha, default.spread, default.gain) == (7.0, 4.0, 80.0)
    assert "alpha=7.0, gain=80.0, spread=4.0" in repr(default)
    assert make_ranker("amortized", protected="female", spread=None).spread is None


def test_spread_varies_the_top_of_the_list_and_the_stream_still_reaches_the_target():
    """Issue 26: at alpha 8 without spread (the old defaults) rank 1 barely varies; at the
    defaults (spread 4, alpha 7) it does, and the stream's female share still reaches the
    target."""
    scores, groups = _skewed_pool(30, seed=3)
    sharp = make_ranker("amortized", protected="female", alpha=8.0, spread=None, seed=0)
    flat = make_ranker("amortized", protected="female", seed=0)
    for ranker in (sharp, flat):
        for _ in range(300):
            ranker.rank(scores, groups, 5)
    firsts = {
        name: set(r.sample(scores, groups, 5, 300, rng=1)[:, 0].tolist())
        for name, r in (("sharp", sharp), ("flat", flat))
    }
    assert len(firsts["sharp"]) <= 2
    assert len(firsts["flat"]) >= 5
    state = flat.ledger.state()
    assert abs(state.totals["female"] / state.total - 0.5) < 0.02


@pytest.mark.parametrize("case", range(4))
def test_with_spread_sample_rows_are_still_successive_single_draws_and_none_is_the_old_draw(case):
    rng = np.random.default_rng(100 + case)
    n, k = int(rng.integers(6, 40)), int(rng.integers(1, 8))
    scores = rng.random(n)
    groups = ["female" if x < 0.4 else "male" for x in rng.random(n)]
    past = {"female": float(rng.uniform(0, 5)), "male": float(rng.uniform(0, 15))}

    def ranker(**params):
        ledger = MemoryLedger()
        ledger.add("default", past)
        return make_ranker("amortized", protected="female", ledger=ledger, **params)

    flat = ranker(alpha=7.0, spread=4.0)
    batch = flat.sample(scores, groups, k, 200, rng=case)
    pool, k_used, generator = flat._prepare(scores, groups, k, case)
    weights = flat.exposure.weights(k_used)
    state = flat._past(flat.ledger.state())
    expected = [flat._draw(pool, weights, state, generator) for _ in range(200)]
    assert batch.tolist() == np.asarray(expected).tolist()
    assert (
        ranker(alpha=7.0, spread=4.0).rank(scores, groups, k, rng=case).tolist()
        == batch[0].tolist()
    )
    # The defaults are alpha 7 with spread 4, bit for bit.
    assert (
        ranker().sample(scores, groups, k, 50, rng=case).tolist()
        == ranker(alpha=7.0, spread=4.0).sample(scores, groups, k, 50, rng=case).tolist()
    )
    # spread=None (the old defaults with alpha 8) draws with s_norm ** alpha, bit for bit: the
    # same noise through draw_amortized_many with those log-weights gives the same rows.
    old = ranker(alpha=8.0, spread=None)
    pool, k_used, generator = old._prepare(scores, groups, k, case)
    log_weights = plackett_luce_log_weights(pool.scores, 8.0, pool.low, pool.high)
    assert old._log_weights(pool).tolist() == log_weights.tolist()
    orders, uniforms = amortized_module._successive_noise(generator, log_weights, 50, k_used)
    assert (
        old.sample(scores, groups, k, 50, rng=case).tolist()
        == draw_amortized_many(
            log_weights,
            pool.codes,
            old.target.shares,
            old._past(old.ledger.state()),
            old.exposure.weights(k_used),
            80.0,
            2.0**8 - 1,
            orders,
            uniforms,
        ).tolist()
    )
