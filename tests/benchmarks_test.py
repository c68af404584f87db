"""The README's benchmark and CLI commands run (tiny sizes: figures come from the full runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=300
    )
    return done.stdout


def test_ranker_benchmark_prints_every_ranker_and_the_batch_paths():
    out = run("benchmarks/bench_rankers.py", "--calls", "50", "--pools", "200", "--draws", "500")
    for name in ("standard", "stochastic", "forced_exposure", "representative_stochastic"):
        assert name in out
    assert "pools/s" in out and "rankings/s" in out


def test_import_benchmark_prints_the_import_time():
    out = run("benchmarks/bench_import.py", "--runs", "1")
    assert "import fairrag_core" in out and "goal: import fairrag_core <= 0.2 s" in out


def test_other_benchmarks_and_the_study_command_parse_their_arguments():
    assert "--rounds" in run("benchmarks/bench_langchain_retriever.py", "--help")
    assert "usage" in run("benchmarks/bench_load.py", "--help").lower()
    amortized_help = run("benchmarks/bench_amortized.py", "--help")
    assert "--orders" in amortized_help and "--integral" in amortized_help
    assert "--backends" in run("benchmarks/bench_first_run.py", "--help")
    ledgers = run("benchmarks/bench_ledgers.py", "--calls", "20")
    for name in ("memory", "sqlite", "redis"):
        assert name in ledgers
    study_help = run("-m", "fairrag_study.cli", "study", "--help")
    for option in ("--corpus", "--llm", "--chroma-host", "--trials", "--base-url"):
        assert option in study_help


def test_fair_benchmark_prints_both_libraries_and_the_ratio():
    out = run("benchmarks/bench_fair.py", "--cold-calls", "3", "--warm-calls", "20")
    assert "fairsearchcore us" in out and "ratio" in out
    assert "3/3" in out and "20/20" in out  # every ranking equal to fairsearchcore's


def test_the_local_model_benchmark_parses_its_arguments():
    out = run("benchmarks/bench_local_llm.py", "--help")
    assert "--batch" in out and "--formats" in out
