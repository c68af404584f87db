"""Reproducibility: the same seed gives the same rankings in two separate processes (with
different hash seeds) and through both adapters, against the same Chroma server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairrag_core import available_rankers
from tests.reliability.conftest import COLLECTION
from tests.reliability.rankings_process import rankings
from tests.reliability.vectors import QUESTIONS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [0, 7, 2026]
PROCESS_DEADLINE = 240

# The amortized ranker's ranking depends on its ledger, the history of the stream it served:
# two components agree only with equal ledgers (tests/core/rankers/amortized_test.py and the
# ledger tests), not when one has served more queries than the other, as here.
STATELESS_RANKERS = [name for name in available_rankers() if name != "amortized"]


def test_same_seed_same_rankings_in_two_processes_and_both_adapters(
    chroma_server, server_collection, query_vectors, tmp_path
):
    config = {
        "host": chroma_server.host,
        "port": chroma_server.port,
        "collection": COLLECTION,
        "query_vectors": {q: query_vectors[q] for q in QUESTIONS[1::3]},
        "rankers": STATELESS_RANKERS,
        "seeds": SEEDS,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    processes = []
    for hash_seed in ("1", "2"):  # set iteration order differs; rankings must not
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "HF_HUB_OFFLINE": "1"}
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.reliability.rankings_process", str(path)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = []
    for process in processes:
        try:
            stdout, stderr = process.communicate(timeout=PROCESS_DEADLINE)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            raise
        assert process.returncode == 0, stderr[-3000:]
        outputs.append(json.loads(stdout))
    here = rankings(config)

    assert outputs[0] == outputs[1] == here
    for ranker in config["rankers"]:
        assert here["langchain"][ranker] == here["llamaindex"][ranker], ranker
        assert len(here["langchain"][ranker]) == len(config["query_vectors"]) * len(SEEDS)
        assert all(len(ids) == 5 for ids in here["langchain"][ranker])
    # The stochastic rankers really are stochastic: other seeds, other rankings.
    draws = here["langchain"]["stochastic"]
    assert len({tuple(ids) for ids in draws}) > len(config["query_vectors"])
    assert len({tuple(ids) for ids in here["sequence"]["stochastic"]}) > 1
