"""The adapters' async paths never block the event loop on a ledger: while a SQLite ledger's
file is locked by another writer (the ledger then retries with sleeps) the loop keeps running
other tasks, and the ranking completes once the lock is released. No wall-clock assertion:
the loop's progress is counted while the ledger is known to be waiting."""

from __future__ import annotations

import asyncio
import sqlite3

from llama_index.core.schema import QueryBundle

from fairrag_core.ledger import SQLiteLedger, waits_on_ledger
from fairrag_langchain import FairReranker, FairRetriever
from fairrag_llamaindex import FairRerankPostprocessor
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool
from tests.llamaindex.pools import make_pool

WAIT = 60.0
TICKS = 20


async def _loop_runs_while_the_file_is_locked(path, call) -> list:
    """Lock ``path`` for writing, start ``call()``, count the loop's ticks while the ledger
    waits for the lock, then release it and return the call's result."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the ledger's add now finds the file busy
    try:
        task = asyncio.ensure_future(call())
        ticks = 0
        for _ in range(TICKS):
            await asyncio.sleep(0.01)  # would not come back while the loop is blocked
            ticks += 1
        assert ticks == TICKS
        assert not task.done(), "the ranking finished while its ledger was locked"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    return await asyncio.wait_for(task, WAIT)


def test_fair_retriever_ainvoke_waits_on_a_locked_ledger_off_the_loop(tmp_path):
    path = tmp_path / "ledger.db"
    SQLiteLedger(path, timeout=WAIT)
    documents, distances = imbalanced_pool()
    retriever = FairRetriever(
        vectorstore=FixedPoolStore(documents, distances),
        group_key="gender",
        protected="female",
        ranker="amortized",
        ledger=str(path),
        seed=0,
        k=4,
    )
    assert waits_on_ledger(retriever.core_ranker)
    found = asyncio.run(
        _loop_runs_while_the_file_is_locked(path, lambda: retriever.ainvoke("computing"))
    )
    assert len(found) == 4
    assert SQLiteLedger(path).state().rankings == 1


def test_fair_reranker_acompress_waits_on_a_locked_ledger_off_the_loop(tmp_path):
    """The reranker's async path ranked on the loop: a locked SQLite ledger held every task of
    the server for its whole timeout (an SRE trial: 2.9 s of a 10 ms ticker)."""
    path = tmp_path / "ledger.db"
    SQLiteLedger(path, timeout=WAIT)
    documents, _ = imbalanced_pool()
    reranker = FairReranker(
        group_key="gender", protected="female", ranker="amortized", ledger=str(path), seed=0, k=4
    )
    assert waits_on_ledger(reranker.core_ranker)
    found = asyncio.run(
        _loop_runs_while_the_file_is_locked(
            path, lambda: reranker.acompress_documents(documents, "computing")
        )
    )
    assert len(found) == 4
    assert SQLiteLedger(path).state().rankings == 1


def test_llamaindex_apostprocess_waits_on_a_locked_ledger_off_the_loop(tmp_path):
    path = tmp_path / "ledger.db"
    SQLiteLedger(path, timeout=WAIT)
    postprocessor = FairRerankPostprocessor(
        group_key="gender",
        protected="female",
        relevance="similarity",
        ranker="amortized",
        ledger=str(path),
        top_n=4,
        seed=0,
    )
    query = QueryBundle("Who are influential people in computer science?")
    found = asyncio.run(
        _loop_runs_while_the_file_is_locked(
            path, lambda: postprocessor.apostprocess_nodes(make_pool(20), query)
        )
    )
    assert len(found) == 4
    assert SQLiteLedger(path).state().rankings == 1


def _off_loop_in_child(queue) -> None:
    from fairrag_core.ledger import run_off_loop

    queue.put(asyncio.run(run_off_loop(lambda: 42)))


def test_a_forked_child_ranks_off_the_loop_in_its_own_pool():
    """A child forked after the parent used the ledger pool (gunicorn --preload, multiprocessing's
    fork) starts its own pool: the inherited one has no threads and would never run its work."""
    import multiprocessing

    from fairrag_core.ledger import run_off_loop

    assert asyncio.run(run_off_loop(lambda: 41)) == 41  # the parent's pool exists and is idle
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_off_loop_in_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=WAIT) == 42
    finally:
        child.join(WAIT)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
