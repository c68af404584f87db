"""Incremental audit: three daily logs audited once into saved partials, then merged, against
one audit of all three. A benchmark (it prints figures), not a test.

Run: ``.venv/bin/python benchmarks/bench_audit_partials.py [--records 30000]``.

It writes three logs of ``--records`` lines each (``bench_audit.write_log``: the handlers'
record shape, three rankers, four tenants), then, each in a child process (its own wall, CPU
and peak RSS): ``fairrag audit`` of all three (``--by tenant --window 1d --max-disparity
0.05``); each day's ``--partials-out`` run; and ``--from-partials`` of the three folders. It
prints each run, the size of the saved partials, and whether every CSV table of the merged
report equals the one-shot's (values to 1e-9 relative).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_audit import _measured, write_log

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--by", "tenant", "--window", "1d"]


def fairrag(*args: str) -> list[str]:
    return [sys.executable, "-m", "fairrag_audit.cli", "audit", *args]


def same_tables(merged: Path, once: Path) -> list[str]:
    """The CSV tables whose contents differ (numbers to 1e-9 relative)."""
    differ = []
    for table in sorted(once.glob("*.csv")):
        a, b = pd.read_csv(merged / table.name), pd.read_csv(table)
        try:
            pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-9, check_dtype=False)
        except AssertionError:
            differ.append(table.name)
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000, help="lines per daily log")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="bench-partials-") as folder:
        base = Path(folder)
        logs = [base / f"day{i}.jsonl" for i in range(3)]
        for seed, log in enumerate(logs):
            write_log(log, args.records, seed)
        runs = {"one-shot, 3 logs": fairrag(*map(str, logs), "--out", str(base / "once"))}
        runs["one-shot, 3 logs"] += [*FLAGS, "--max-disparity", "0.05"]
        for i, log in enumerate(logs):
            runs[f"day {i + 1}: --partials-out"] = fairrag(
                str(log), "--partials-out", str(base / f"p{i}"), *FLAGS
            )
        folders = [str(base / f"p{i}") for i in range(3)]
        runs["--from-partials, 3 days"] = fairrag(
            "--from-partials", *folders, "--out", str(base / "merged"), "--max-disparity", "0.05"
        )
        print(f"{args.records:,} records per day, 3 days; wall s / CPU s / peak RSS GiB")
        for name, command in runs.items():
            wall, cpu, peak, _ = _measured(command, env)
            print(f"  {name:<28} {wall:7.1f} / {cpu:6.1f} / {peak:.2f}")
        saved = sum(f.stat().st_size for f in base.glob("p*/*"))
        print(f"saved partials: {saved / 2**10:,.0f} KiB for 3 days")
        differ = same_tables(base / "merged", base / "once")
        print("every CSV table equal" if not differ else f"tables differ: {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
