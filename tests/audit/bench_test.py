"""The scale benchmark runs end to end on a small log (its figures come from the full run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_audit_writes_audits_and_counts_its_damaged_lines(tmp_path: Path) -> None:
    # --keep relative to the caller's folder (an operator's trial: the children, run from the
    # repository, did not find the log)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_audit.py"),
            "--records",
            "10000",
            "--gzip",
            "--keep",
            "kept",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    kept = tmp_path / "kept"
    assert done.returncode == 0, done.stdout + done.stderr
    assert "damaged lines counted: 1 (written: 1)" in done.stdout
    assert "peak RSS" in done.stdout
    # the third child read every field the audit reads, each line counted (damaged ones too)
    assert "its fields, read only" in done.stdout
    assert "fields CPU ratio" in done.stdout
    # one answer in three cites context entry numbers: the paper's parity is n/a for them
    assert "generation: Of 9999 answers," in done.stdout
    assert "the attributed one for 9999" in done.stdout
    assert "answers using each, one answer may use several): doctitle" in done.stdout
    assert (kept / "report" / "report.html").is_file()
    # the profile of one audit on the same log: its phases named (their times not asserted)
    profiled = subprocess.run(
        [sys.executable, "benchmarks/profile_audit.py", str(kept / "log.jsonl.gz"), "--all"],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    for phase in ("sieve (fairrag_audit.lines)", "SQL CREATE TABLE raw_records", "figures"):
        assert phase in profiled.stdout
    assert "total CPU of this process" in profiled.stdout
