"""The kernel backends: numba and numpy compute the same rankings from the same draws."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairrag_core import StochasticRanker, kernels, make_ranker
from fairrag_core.plackett_luce import plackett_luce_log_weights

from .rankers.strategies import fairness_configs, pools

if "numba" not in kernels.available_backends() and os.environ.get("CI", "").lower() != "true":
    pytest.skip(
        "numba is not installed (pip install 'fairrag[fast]'); the numpy backend is tested by "
        "the rest of the suite",
        allow_module_level=True,
    )

BACKENDS = ["numba", "numpy"]
# 64 and 100: log-weights near 2 ** alpha round the Gumbel noise away, so equal scores get equal
# keys and the tie rule (larger noise first) decides.
ALPHAS = [0.5, 1.0, 2.0, 3.7, 4.0, 8.0, 64.0, 100.0]


def _rankings(backend, name, scores, groups, k, config, seed, alpha, calls=3):
    with kernels.use(backend):
        ranker = make_ranker(name, alpha=alpha, seed=seed, **config)
        return [ranker.rank(scores, groups, k).tolist() for _ in range(calls)]


@pytest.mark.parametrize("name", ["stochastic", "representative_stochastic"])
@settings(max_examples=120, deadline=None)
@given(
    pool=pools(min_size=1),
    k=st.integers(1, 12),
    config=fairness_configs(),
    seed=st.integers(0, 2**32),
    alpha=st.sampled_from(ALPHAS),
)
def test_both_backends_give_the_same_rankings_for_a_seed(name, pool, k, config, seed, alpha):
    scores, groups = pool
    compiled = _rankings("numba", name, scores, groups, k, config, seed, alpha)
    assert compiled == _rankings("numpy", name, scores, groups, k, config, seed, alpha)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("alpha", [1.0, 2.0, 4.0, 8.0, 64.0, 2.5])
def test_log_weights_are_the_numpy_reference(backend, alpha):
    scores = np.random.default_rng(3).normal(size=200)
    low, high = float(scores.min()), float(scores.max())
    reference = plackett_luce_log_weights(scores, alpha)
    with kernels.use(backend) as active:
        weights = active.plackett_luce_log_weights(scores, alpha, low, high)
        constant = active.plackett_luce_log_weights(np.full(4, 0.3), alpha, 0.3, 0.3)
    if alpha.is_integer():  # repeated squaring in the same order: the same bits
        assert weights.tolist() == reference.tolist()
    else:  # pow() may differ in the last place between libraries
        np.testing.assert_allclose(weights, reference, rtol=1e-14)
    np.testing.assert_allclose([weights.min(), weights.max()], [1.0, 2.0**alpha], rtol=1e-12)
    assert constant.tolist() == [1.0] * 4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0.5], (0.5, 0.5)),
        ([3.0, -1.0, 2.0], (-1.0, 3.0)),
        ([-0.0, 0.0], (0.0, 0.0)),
        ([1.0, math.inf], (1.0, math.inf)),
        ([-math.inf, 1.0], (-math.inf, 1.0)),
    ],
)
def test_score_range(backend, values, expected):
    with kernels.use(backend) as active:
        assert active.score_range(np.asarray(values)) == expected


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("position", [0, 1, 4])
def test_score_range_reports_nan_wherever_it_is(backend, position):
    values = np.linspace(0.0, 1.0, 5)
    values[position] = math.nan
    with kernels.use(backend) as active:
        low, high = active.score_range(values)
    assert math.isnan(low) and math.isnan(high)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_scores_are_rejected_with_either_backend(backend):
    with kernels.use(backend):
        for name in ("stochastic", "representative_stochastic"):
            ranker = make_ranker(name, protected="female")
            with pytest.raises(ValueError, match=r"non-finite values .* at pool positions \[2\]"):
                ranker.rank([0.1, 0.2, math.nan], ["female", "male", "male"], 2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [3, 40])  # argmax passes, and the sort for large k
def test_batch_rows_are_successive_single_calls(backend, k):
    pools_ = np.random.default_rng(8).random((100, 50))
    pools_[:10, :5] = 0.5  # ties in some pools
    pools_[10] = 0.25  # a constant pool
    batch = StochasticRanker(seed=21).rank_batch(pools_, k)
    with kernels.use(backend):
        ranker = StochasticRanker(seed=21)
        singles = [ranker.rank(pool, None, k).tolist() for pool in pools_]
    assert batch.tolist() == singles


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [2, 40])
def test_tied_top_scores_share_first_place_evenly_even_when_alpha_rounds_the_noise_away(
    backend, k
):
    scores = np.array([0.9, 0.9, 0.9] + [0.5] * 47)  # three tied best; 2 ** 64 absorbs the noise
    draws = 3000
    with kernels.use(backend):
        ranker = StochasticRanker(alpha=64, seed=4)
        singles = np.array([ranker.rank(scores, None, k) for _ in range(draws)])
    batch = StochasticRanker(alpha=64, seed=4).rank_batch(np.tile(scores, (draws, 1)), k)
    assert batch.tolist() == singles.tolist()
    firsts = np.bincount(singles[:, 0], minlength=3)
    assert firsts.sum() == draws and np.all(np.abs(firsts / draws - 1 / 3) < 0.04), firsts
    # The tied candidates fill the first places (three, or k < 3), in some order, every time.
    assert all(set(row[:3]) <= {0, 1, 2} for row in singles.tolist())
    assert len({tuple(row[:2]) for row in singles.tolist()}) == 6  # every ordered pair occurs


def test_use_switches_and_restores_even_after_an_error():
    before = kernels.active
    with pytest.raises(RuntimeError), kernels.use("numpy") as active:
        assert kernels.active is active and active.NAME == "numpy"
        raise RuntimeError
    assert kernels.active is before
    with pytest.raises(ValueError, match=r"unknown kernel backend 'cython'.*\['numba', 'numpy'\]"):
        kernels.use("cython").__enter__()


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
    )


# Makes `import numba` fail in the child, as on a machine without fairrag[fast].
NO_NUMBA = "import sys; sys.modules['numba'] = None\n"


def test_without_numba_the_numpy_backend_runs_every_ranker():
    code = NO_NUMBA + (
        "from fairrag_core import available_rankers, kernels, make_ranker\n"
        "print(kernels.active.NAME, kernels.available_backends())\n"
        "for name in available_rankers():\n"
        "    r = make_ranker(name, protected='f', seed=1)\n"
        "    print(name, r.rank([0.9, 0.5, 0.7, 0.1], ['m', 'f', 'm', 'f'], 3).tolist())\n"
    )
    done = _python(code, FAIRRAG_KERNELS="auto")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "numpy ['numpy']"
    assert len(lines) == 5 and all(line.count(",") == 2 for line in lines[1:])


def test_asking_for_numba_without_it_says_how_to_install_it():
    done = _python(NO_NUMBA + "import fairrag_core", FAIRRAG_KERNELS="numba")
    assert done.returncode != 0
    assert "ImportError: the numba kernel backend needs numba: pip install 'fairrag[fast]'" in (
        done.stderr
    )


def test_an_unknown_backend_setting_names_the_variable():
    done = _python("import fairrag_core", FAIRRAG_KERNELS="fortran")
    assert done.returncode != 0
    assert "FAIRRAG_KERNELS='fortran' is not a kernel backend; use 'auto', 'numba' or 'numpy'" in (
        done.stderr
    )


def test_choosing_numpy_never_imports_numba():
    code = (
        "import sys\n"
        "from fairrag_core import make_ranker\n"
        "make_ranker('representative_stochastic', protected='f').rank([0.2, 0.1], ['f', 'm'])\n"
        "print('numba' in sys.modules)\n"
    )
    done = _python(code, FAIRRAG_KERNELS="numpy")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
