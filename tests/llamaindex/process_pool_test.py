"""Copies of a seeded FairRerankPostprocessor sent to a real process pool (docs/SPEC.md,
"Adapters" → Copies): each task draws its own stream, the same on every run; the amortized
ranker's stream across tasks is the configured shared ledger's, or a warning says it is not."""

from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from functools import partial

import pytest
from llama_index.core.schema import QueryBundle

from fairrag_core.ledger import SQLiteLedger
from fairrag_llamaindex import FairRerankPostprocessor
from tests.llamaindex.pools import make_pool

TASKS = 40
QUESTION = "influential people in medicine"


def ask(postprocessor: FairRerankPostprocessor, question: str) -> tuple[str, ...]:
    """One task: the ids the postprocessor shows for ``question`` (module level: picklable)."""
    shown = postprocessor.postprocess_nodes(make_pool(50), QueryBundle(question))
    return tuple(n.node.node_id for n in shown)


def fair(**fields) -> FairRerankPostprocessor:
    return FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", **fields
    )


def run_pool(postprocessor: FairRerankPostprocessor) -> list[tuple[str, ...]]:
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        return list(pool.map(partial(ask, postprocessor), [QUESTION] * TASKS))


@pytest.mark.parametrize("ranker", ["stochastic", "representative_stochastic", "amortized"])
def test_pool_tasks_draw_distinct_reproducible_streams(ranker):
    in_one_process = fair(ranker=ranker, seed=0)
    local = [ask(in_one_process, QUESTION) for _ in range(TASKS)]
    amortized = ranker == "amortized"
    with pytest.warns(UserWarning, match="in-memory ledger") if amortized else nullcontext():
        first = run_pool(fair(ranker=ranker, seed=0))
    # the pickled copy of each task draws the next spawned stream: as many lists as in one
    # process, not one list 40 times (today's main: 1 distinct list)
    assert len(set(first)) > 1
    assert len(set(first)) >= len(set(local)) // 2
    again = run_pool(fair(ranker=ranker, seed=0))
    assert again == first  # task i draws copy i's stream, whichever worker runs it


def test_a_shared_ledger_is_the_amortized_stream_across_tasks(tmp_path, recwarn):
    path = str(tmp_path / "ledger.sqlite")
    run_pool(fair(ranker="amortized", seed=0, ledger=path))
    assert not [w for w in recwarn if "in-memory ledger" in str(w.message)]
    # every task's ranking went into the one stream the user configured
    assert SQLiteLedger(path).state().rankings == TASKS


def test_the_in_memory_ledger_warning_is_given_once_per_component():
    amortized = fair(ranker="amortized")
    with pytest.warns(UserWarning, match="in-memory ledger") as caught:
        for _ in range(3):
            pickle.dumps(amortized)
    assert len([w for w in caught if "in-memory ledger" in str(w.message)]) == 1
