"""Where `fairrag audit`'s CPU goes: each phase of one audit, in CPU seconds. A benchmark (it
prints figures), not a test.

Run: ``.venv/bin/python benchmarks/profile_audit.py LOG [--out DIR]`` (a log written by
``benchmarks/bench_audit.py --keep DIR``). It audits LOG in this process as
``fairrag audit LOG --by tenant --window 1d --max-disparity 0.05`` does (the benchmark's
command) and prints, in the order they ran, the CPU time (``time.process_time``: this process,
all of DuckDB's threads) of: the imports (DuckDB, pandas, the audit's scan, its
statistics, its report and figures), the sieve (``fairrag_audit.lines``), every SQL statement
the audit runs (its first 70 characters; those under 5 ms left out), the line numbers of the
lines left out, the report's statistics (``report_of``), the figures and the rest of the
report, then the total. No profiler runs: the times are those of the audit itself.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PHASES: list[tuple[str, float]] = []


def _timed(name: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    start = time.process_time()
    try:
        return call(*args, **kwargs)
    finally:
        PHASES.append((name, time.process_time() - start))


def _import(name: str, module: str) -> None:
    _timed(f"import {name}", __import__, module)


class _Connection:
    """A DuckDB connection whose ``execute`` notes each statement's CPU time."""

    def __init__(self, con: Any) -> None:
        self._con = con

    def execute(self, sql: str, *args: Any) -> Any:
        return _timed("SQL " + " ".join(sql.split())[:70], self._con.execute, sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="a JSON-lines log (bench_audit.py --keep DIR)")
    parser.add_argument("--out", type=Path, help="folder for the report (else a temp folder)")
    parser.add_argument("--all", action="store_true", help="print phases under 5 ms too")
    args = parser.parse_args(argv)
    _import("DuckDB", "duckdb")
    _import("pandas", "pandas")
    _import("the scan (options, pydantic, fairrag_core)", "fairrag_audit.partials")
    _import("the statistics", "fairrag_audit.analysis")
    _import("the report and figures (matplotlib)", "fairrag_audit.report")
    from fairrag_audit import analysis, partials, report, scan
    from fairrag_audit.options import AuditOptions

    opened = scan.file_connection

    @contextmanager
    def noted() -> Iterator[Any]:
        with opened() as con:
            yield _Connection(con)

    sieve, numbers, figures = scan.sieve, partials.line_numbers, report.write_figures
    partials.file_connection = noted
    scan.sieve = lambda *a: _timed("sieve (fairrag_audit.lines)", sieve, *a)
    partials.line_numbers = lambda *a: _timed("line numbers of lines left out", numbers, *a)
    report.write_figures = lambda *a: _timed("figures", figures, *a)
    options = AuditOptions.create([args.log], by=["tenant"], window="1d", max_disparity=0.05)
    found = _timed(
        "== read, checked and summed (compute_partials)", partials.compute_partials, options
    )
    result = _timed("report's statistics (report_of)", analysis.report_of, found, options)
    out = args.out or Path(tempfile.mkdtemp(prefix="profile-audit-"))
    _timed("== report written (write_report, with the figures)", report.write_report, result, out)
    for name, seconds in PHASES:
        if args.all or seconds >= 0.005:
            print(f"{seconds:7.2f} s  {name}")
    print(f"{time.process_time():7.2f} s  total CPU of this process (interpreter start included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
