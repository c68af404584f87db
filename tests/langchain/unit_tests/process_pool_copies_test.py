"""Copies of a seeded FairRetriever sent to a real process pool (docs/SPEC.md, "Adapters" →
Copies): each task draws its own stream, the same on every run."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from functools import partial

import pytest

from fairrag_langchain import FairRetriever
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool

TASKS = 40


def ask(retriever: FairRetriever, question: str) -> tuple[str, ...]:
    """One task: the titles the retriever shows (module level: picklable)."""
    return tuple(d.metadata["title"] for d in retriever.invoke(question))


def fair(ranker: str) -> FairRetriever:
    return FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()),
        ranker=ranker,
        group_key="gender",
        protected="female",
        seed=0,
        k=5,
    )


def run_pool(retriever: FairRetriever) -> list[tuple[str, ...]]:
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        return list(pool.map(partial(ask, retriever), ["a popular question"] * TASKS))


@pytest.mark.filterwarnings("ignore:.*in-memory ledger:UserWarning")
@pytest.mark.parametrize("ranker", ["stochastic", "representative_stochastic", "amortized"])
def test_pool_tasks_draw_distinct_reproducible_streams(ranker):
    first = run_pool(fair(ranker))
    assert len(set(first)) > 1  # today's main: 1 distinct list in 40 tasks
    assert run_pool(fair(ranker)) == first  # task i draws copy i's stream on every run
