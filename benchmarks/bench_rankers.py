"""Ranker speed: median single-call latency on a 50-candidate pool (k = 5), batch throughput.

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_rankers.py [--calls N] [--pools N]``.
Targets on the 2-core reference machine: standard and stochastic < 20 us per call,
forced_exposure and representative_stochastic < 100 us, batch stochastic > 200,000 pools/s.
Single calls are timed with every kernel backend available (``fairrag_core.kernels``: numba
with ``fairrag[fast]``, numpy always); "ok" judges the backend the set-up installs and runs by
default (``FAIRRAG_KERNELS`` unset).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fairrag_core import available_rankers, kernels, make_ranker

TARGET_US = {
    "standard": 20.0,
    "stochastic": 20.0,
    "forced_exposure": 100.0,
    "representative_stochastic": 100.0,
    "fair": 100.0,
    "amortized": 100.0,  # its in-memory ledger included (one read and one add per call)
}


def single_call_median_us(name: str, calls: int, rng: np.random.Generator) -> float:
    ranker = make_ranker(name, protected="female", seed=0)
    scores = rng.random(50)
    groups = [str(g) for g in rng.choice(["female", "male"], size=50, p=[0.2, 0.8])]
    for _ in range(200):  # warm caches and branch predictors
        ranker.rank(scores, groups, 5)
    timings = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        start = clock()
        ranker.rank(scores, groups, 5)
        timings.append(clock() - start)
    return statistics.median(timings) / 1000.0


def batch_pools_per_second(name: str, pools: int, rng: np.random.Generator) -> float:
    ranker = make_ranker(name, seed=0)
    scores = rng.random((pools, 50))
    ranker.rank_batch(scores[:100], 5)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        ranker.rank_batch(scores, 5)
        best = min(best, time.perf_counter() - start)
    return pools / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--pools", type=int, default=10_000)
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    backends = kernels.available_backends()
    default = kernels.active.NAME
    print(f"kernel backends: {', '.join(backends)} (default: {default})")
    header = "".join(f"{f'{name} us/call':>18}" for name in backends)
    print(f"{'ranker':<28}{header}{'target':>10}{'ok':>6}")
    for name in available_rankers():
        medians = {}
        for backend in backends:
            with kernels.use(backend):  # the same pool for every backend
                pool_rng = np.random.default_rng(2026)
                medians[backend] = single_call_median_us(name, args.calls, pool_rng)
        target = TARGET_US[name]
        ok = "yes" if medians[default] < target else "NO"
        cells = "".join(f"{medians[backend]:>18.1f}" for backend in backends)
        print(f"{name:<28}{cells}{target:>10.0f}{ok:>6}")
    print()
    print(f"{'batch ranker (numpy)':<28}{'pools/s':>16}{'target':>10}")
    for name in ("standard", "stochastic"):
        rate = batch_pools_per_second(name, args.pools, rng)
        target = "200000" if name == "stochastic" else "-"
        print(f"{name:<28}{rate:>16,.0f}{target:>10}")


if __name__ == "__main__":
    main()
