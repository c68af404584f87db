"""Import time of ``fairrag_core``: ``python -c "import fairrag_core"`` in fresh processes.

Run: ``.venv/bin/python benchmarks/bench_import.py [--runs N]``. Prints the median wall time of
N fresh interpreters for an empty program, ``import numpy`` and ``import fairrag_core``, and the
core's own share (the last minus an empty interpreter); beside it the median CPU time (user +
system) of the same processes, which a busy shared machine inflates less than wall time.
Goal: ``import fairrag_core`` <= 0.2 s (scipy and numba are not imported;
``tests/core/import_test.py`` checks that). ``python -c`` puts the current folder first on
``sys.path``: the checkout measured is the one you run from (or on ``PYTHONPATH`` elsewhere).
"""

from __future__ import annotations

import argparse
import resource
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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_seconds(code: str, runs: int) -> tuple[float, float]:
    """Median wall and CPU time of ``runs`` fresh ``python -c code`` processes (after one
    warm-up run that fills the file cache)."""
    command = [sys.executable, "-c", code]
    subprocess.run(command, check=True)
    walls, cpus = [], []
    for _ in range(runs):
        cpu = _children_cpu()
        start = time.perf_counter()
        subprocess.run(command, check=True)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per program")
    args = parser.parse_args()
    print(f"median of {args.runs} fresh processes ({sys.executable})")
    print(f"{'program':<24}{'wall':>9}{'cpu':>9}")
    medians = {label: median_seconds(code, args.runs) for label, code in PROGRAMS.items()}
    for label, (wall, cpu) in medians.items():
        print(f"{label:<24}{wall:>8.3f}s{cpu:>8.3f}s")
    (core_wall, core_cpu), (empty_wall, empty_cpu) = (
        medians["import fairrag_core"],
        medians["python -c pass"],
    )
    print(f"{'fairrag_core alone':<24}{core_wall - empty_wall:>8.3f}s{core_cpu - empty_cpu:>8.3f}s")
    print(
        f"goal: import fairrag_core <= {GOAL_S} s (wall): {'yes' if core_wall <= GOAL_S else 'NO'}"
    )


if __name__ == "__main__":
    main()
