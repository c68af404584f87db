"""The amortized ranker's cost per call with each ledger: median of single calls, 50 -> 5.

Run: ``.venv/bin/python benchmarks/bench_ledgers.py [--calls N]``. The Redis ledger uses a
redis-server started here on a free loopback port (the tests' helper; skipped with a note when
redis-server is not installed: ``make system-deps``). Each call reads the stream from the
ledger, draws, and adds the served ranking: one read and one atomic update.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test helper that runs redis-server (tests/redis_server.py)

from fairrag_core import make_ranker  # noqa: E402
from fairrag_core.ranking import Ranker  # noqa: E402


def median_us(ranker: Ranker, calls: int) -> float:
    """Median wall time of one ``rank`` call (µs) on a fixed pool of 50, after a warm-up."""
    rng = np.random.default_rng(2026)
    scores = rng.random(50)
    groups = [str(g) for g in rng.choice(["female", "male"], size=50, p=[0.2, 0.8])]
    for _ in range(min(200, calls)):
        ranker.rank(scores, groups, 5)
    timings = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        start = clock()
        ranker.rank(scores, groups, 5)
        timings.append(clock() - start)
    return statistics.median(timings) / 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    print(f"{'ledger':<10}{'us/call':>10}")
    with tempfile.TemporaryDirectory() as folder:
        ledgers: dict[str, object] = {"memory": None, "sqlite": Path(folder) / "ledger.db"}
        for name, ledger in ledgers.items():
            ranker = make_ranker("amortized", protected="female", seed=0, ledger=ledger)
            print(f"{name:<10}{median_us(ranker, args.calls):>10.1f}")
        if shutil.which("redis-server") is None:
            print("redis     skipped: redis-server is not installed (make system-deps)")
            return
        from tests.redis_server import running_redis

        with running_redis(Path(folder) / "redis") as server:
            ranker = make_ranker("amortized", protected="female", seed=0, ledger=server.url)
            print(f"{'redis':<10}{median_us(ranker, args.calls):>10.1f}")


if __name__ == "__main__":
    main()
