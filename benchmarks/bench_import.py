"""Import time of ``fairrag_core``: ``python -c "import fairrag_core"`` in fresh processes.

Run: ``.venv/bin/python benchmarks/bench_import.py [--runs N]``. Prints the median wall time of
N fresh interpreters for an empty program, ``import numpy`` and ``import fairrag_core``, and the
core's own share (the last minus an empty interpreter). Goal: ``import fairrag_core`` <= 0.2 s
(scipy and numba are not imported; ``tests/core/import_test.py`` checks that).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PROGRAMS = {
    "python -c pass": "pass",
    "import numpy": "import numpy",
    "import fairrag_core": "import fairrag_core",
}
GOAL_S = 0.2


def median_seconds(code: str, runs: int) -> float:
    """Median wall time of ``runs`` fresh ``python -c code`` processes (one warm-up first)."""
    command = [sys.executable, "-c", code]
    subprocess.run(command, check=True)  # warm the file cache
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per program")
    args = parser.parse_args()
    print(f"median of {args.runs} fresh processes ({sys.executable})")
    medians = {label: median_seconds(code, args.runs) for label, code in PROGRAMS.items()}
    for label, seconds in medians.items():
        print(f"{label:<24}{seconds:>8.3f} s")
    core = medians["import fairrag_core"]
    print(f"{'fairrag_core alone':<24}{core - medians['python -c pass']:>8.3f} s")
    print(f"goal: import fairrag_core <= {GOAL_S} s: {'yes' if core <= GOAL_S else 'NO'}")


if __name__ == "__main__":
    main()
