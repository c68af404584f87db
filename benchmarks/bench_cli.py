"""How fast the ``fairrag`` command answers: help, a subcommand's help and a refused flag.

Run: ``.venv/bin/python benchmarks/bench_cli.py [--runs N]``. Each command runs in N fresh
processes, interleaved with a bare ``python -c "import numpy"`` (the floor: the core needs
numpy), so load on a shared machine hits both alike. Prints the median wall and CPU (user +
system) time of each, its ratio to the numpy floor and the heavy modules it imported.

Goal (issue 24): ``fairrag --help``, ``fairrag study --help`` and a refused flag each under
0.5 s and at most 3x the numpy floor measured beside them. The study, sweep and audit stacks
(Chroma, torch, pandas, DuckDB, matplotlib, scipy) are imported only when a subcommand runs;
``tests/cli_startup_test.py`` checks that on ``sys.modules``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

FLOOR = ("python -c 'import numpy'", ["-c", "import numpy"])
CASES = [
    ("fairrag --help", ["--help"]),
    ("fairrag --version", ["--version"]),
    ("fairrag study --help", ["study", "--help"]),
    ("fairrag study --bogus (refused)", ["study", "--bogus"]),
    ("fairrag study --k 0 (refused)", ["study", "--k", "0"]),
    ("fairrag sweep --help", ["sweep", "--help"]),
    ("fairrag audit --help", ["audit", "--help"]),
]
GOALED = {"fairrag --help", "fairrag study --help", "fairrag study --bogus (refused)"}
HEAVY = (
    "chromadb",
    "duckdb",
    "langchain_core",
    "llama_index",
    "matplotlib",
    "onnxruntime",
    "pandas",
    "scipy",
    "sentence_transformers",
    "torch",
)
GOAL_S, GOAL_RATIO = 0.5, 3.0

# The command as its console script runs it (``fairrag`` is fairrag_study.cli:main).
ENTRY = "import sys; from fairrag_study.cli import main; sys.argv[0] = 'fairrag'; sys.exit(main())"
PROBE = (
    "import sys, json\n"
    "from fairrag_study.cli import main\n"
    "try:\n    main(json.loads(sys.argv[1]))\nexcept SystemExit:\n    pass\n"
    f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _once(command: list[str]) -> tuple[float, float]:
    cpu = _children_cpu()
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start, _children_cpu() - cpu


def heavy_modules(args: list[str]) -> list[str]:
    """The heavy top-level modules imported by ``fairrag *args`` (help and errors included)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per command")
    args = parser.parse_args()
    commands = {label: [sys.executable, "-c", ENTRY, *argv] for label, argv in CASES}
    floor_command = [sys.executable, *FLOOR[1]]
    for command in [floor_command, *commands.values()]:  # warm the file cache
        _once(command)
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in [FLOOR[0], *commands]}
    for _ in range(args.runs):  # interleaved: each round runs the floor and every command
        times[FLOOR[0]].append(_once(floor_command))
        for label, command in commands.items():
            times[label].append(_once(command))
    medians = {
        label: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        for label, runs in times.items()
    }
    floor_wall, floor_cpu = medians[FLOOR[0]]
    print(f"median of {args.runs} fresh processes, interleaved ({sys.executable})")
    print(f"{'command':<34}{'wall':>8}{'cpu':>8}{'x floor':>9}  heavy modules imported")
    print(f"{FLOOR[0]:<34}{floor_wall:>7.3f}s{floor_cpu:>7.3f}s{1:>8.1f}x  (the floor)")
    failed = []
    for label, argv in CASES:
        wall, cpu = medians[label]
        heavy = heavy_modules(argv)
        ratio = wall / floor_wall
        print(f"{label:<34}{wall:>7.3f}s{cpu:>7.3f}s{ratio:>8.1f}x  {', '.join(heavy) or '-'}")
        if label in GOALED and (wall >= GOAL_S or ratio > GOAL_RATIO or heavy):
            failed.append(label)
    print(
        f"goal: {', '.join(sorted(GOALED))} each < {GOAL_S} s and <= {GOAL_RATIO:g}x the numpy "
        f"floor, with no heavy module: {'met' if not failed else 'NOT met by ' + ', '.join(failed)}"
    )


if __name__ == "__main__":
    main()
