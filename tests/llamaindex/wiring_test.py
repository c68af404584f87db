"""The wiring LlamaIndex users build around the fair postprocessor (issue 23, "LlamaIndex wiring"):
handlers in several threads, streams nobody reads, metadata the user made visible, query seeds
around thread pools, nodes that embed their group. Synthetic pools served by a retriever; the
real Chroma index is exercised in ``wrapped_retriever_test.py``.
"""

from __future__ import annotations

import contextvars
import gc
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from llama_index.core import Document
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle

from fairrag_core.kit import context_entry, document_title
from fairrag_llamaindex import (
    PAPER_QA_TEMPLATE,
    FairnessEventHandler,
    FairRerankPostprocessor,
    query_seed,
)
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.llamaindex.fake_llms import FakeRecordingLLM
from tests.llamaindex.pools import PoolRetriever, make_pool


def fair(**fields: Any) -> FairRerankPostprocessor:
    fields.setdefault("group_key", "gender")
    fields.setdefault("protected", "female")
    fields.setdefault("relevance", "similarity")
    return FairRerankPostprocessor(**fields)


def engine(postprocessors, pool=None, llm=None, **kwargs: Any) -> RetrieverQueryEngine:
    return RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(30) if pool is None else pool),
        llm=llm or CitingMockLLM(),
        node_postprocessors=postprocessors,
        text_qa_template=PAPER_QA_TEMPLATE,
        **kwargs,
    )


def ids(nodes) -> list[str]:
    return [n.node.node_id for n in nodes]


def framework_fields(record: dict) -> dict:
    """The record's LlamaIndex-only fields (under ``framework`` from record schema 2 on)."""
    return record.get("framework", record)


# -- handlers record their own runs ------------------------------------------------------------


def _in_two_threads(work):
    """Run ``work(name, barrier)`` for "a" and "b" at once; both hold their handler open
    while the other one's queries run (the barrier), as two request threads of a server do."""
    barrier = threading.Barrier(2, timeout=60)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(work, ["a", "b"], [barrier, barrier]))


def test_handlers_built_from_their_postprocessors_in_two_threads_record_their_own_only():
    def work(name, barrier):
        own = fair(seed=0)
        query_engine = engine([own])
        with FairnessEventHandler.from_postprocessor(own) as handler:
            barrier.wait()
            for i in range(4):
                query_engine.query(f"{name} {i}")
            barrier.wait()
        return handler

    a, b = _in_two_threads(work)
    # on main each handler wrote 8 records, 4 its own and 4 the other thread's
    assert [r["query"] for r in a.records] == [f"a {i}" for i in range(4)]
    assert [r["query"] for r in b.records] == [f"b {i}" for i in range(4)]


def test_plain_handlers_entered_in_two_threads_record_their_own_context_only():
    def work(name, barrier):
        query_engine = engine([fair(seed=0)])
        with FairnessEventHandler(group_key="gender", protected="female") as handler:
            barrier.wait()
            for i in range(4):
                query_engine.query(f"{name} {i}")
            barrier.wait()
        return handler

    a, b = _in_two_threads(work)
    assert [r["query"] for r in a.records] == [f"a {i}" for i in range(4)]
    assert [r["query"] for r in b.records] == [f"b {i}" for i in range(4)]

    # Worker threads do not inherit the block's context: a question asked where no handler's
    # block is open is recorded by every registered handler, so none is lost.
    query_engine = engine([fair(seed=0)])
    with FairnessEventHandler(group_key="gender", protected="female") as handler:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(query_engine.query, ["w0", "w1", "w2"]))
    assert sorted(r["query"] for r in handler.records) == ["w0", "w1", "w2"]


def test_a_handler_from_a_postprocessor_records_its_runs_and_its_copies_only():
    mine = fair(seed=0)
    variant = mine.model_copy(update={"target_share": 0.3})  # LlamaIndex's idiom for a variant
    other = fair(seed=0)
    with FairnessEventHandler.from_postprocessor(mine) as handler:
        engine([other]).query("another component")
        engine([]).query("no fair component")
        engine([mine]).query("mine")
        engine([variant]).query("my copy")
    assert [r["query"] for r in handler.records] == ["mine", "my copy"]


# -- every ranking has a record ----------------------------------------------------------------


def test_a_stream_nobody_reads_is_recorded_unconsumed_when_collected():
    post = fair(ranker="amortized", seed=0)
    query_engine = engine([post], streaming=True)
    with FairnessEventHandler.from_postprocessor(post) as handler:
        response = query_engine.query("never read")
        shown = ids(response.source_nodes)
        del response
        gc.collect()
        (record,) = handler.records  # on main: no record, while the ledger counted the ranking
    assert record.get("answer") is None and record.get("error") is None
    assert framework_fields(record)["answer_status"] == "unconsumed"
    assert record["ranker"] == "amortized" and record["doc_ids"] == shown
    assert post.ledger.state().rankings == len(handler.records) == 1


def test_a_stream_unread_when_the_handler_block_ends_is_recorded_then_and_only_once():
    post = fair(ranker="amortized", seed=0)
    query_engine = engine([post], streaming=True)
    with FairnessEventHandler.from_postprocessor(post) as handler:
        response = query_engine.query("read too late")
        read = query_engine.query("read in time")
        answer = "".join(read.response_gen)
    later = "".join(response.response_gen)  # the caller reads it after the block
    assert later  # the stream still works
    by_query = {r["query"]: r for r in handler.records}
    assert len(handler.records) == 2 == post.ledger.state().rankings
    assert by_query["read too late"].get("answer") is None
    assert framework_fields(by_query["read too late"])["answer_status"] == "unconsumed"
    assert by_query["read in time"]["answer"] == answer
    assert "answer_status" not in framework_fields(by_query["read in time"])


# -- the user's LLM-visible metadata -----------------------------------------------------------


def _documents_with_visible_metadata(n: int = 30) -> list[NodeWithScore]:
    """Documents as users write them: the group hidden from the LLM and the embedding model,
    ``url`` and ``topic`` left visible to the LLM (LlamaIndex shows them as ``key: value``)."""
    pool = []
    for i, node in enumerate(make_pool(n)):
        metadata = {**node.node.metadata, "url": f"https://x.org/{i}", "topic": f"topic {i % 3}"}
        document = Document(
            id_=node.node.node_id,
            text=node.node.text,
            metadata=metadata,
            excluded_llm_metadata_keys=["gender", "doc_id"],
            excluded_embed_metadata_keys=["gender", "doc_id", "url", "topic"],
        )
        pool.append(NodeWithScore(node=document, score=node.score))
    return pool


def test_metadata_the_user_made_visible_to_the_llm_stays_in_the_context():
    pool = _documents_with_visible_metadata()
    plain_llm, fair_llm = FakeRecordingLLM(), FakeRecordingLLM()
    engine([], pool=pool, llm=plain_llm).query("q")  # LlamaIndex on its own
    response = engine([fair(seed=0)], pool=pool, llm=fair_llm).query("q")
    (plain_prompt,), (prompt,) = plain_llm.prompts, fair_llm.prompts
    assert plain_prompt.count("url: ") == 30
    assert prompt.count("url: ") == prompt.count("topic: ") == 5  # on main: 0 and 0
    for rank, node in enumerate(response.source_nodes, 1):
        metadata, text = node.node.metadata, node.node.text
        fields = [("url", metadata["url"]), ("topic", metadata["topic"])]
        entry = context_entry(rank, document_title(metadata, text), text, fields)
        assert entry in prompt
        assert node.node.get_content("llm") == entry
    assert "gender" not in prompt and "doc_id" not in prompt  # what the user hid stays hidden


def test_the_group_key_stays_hidden_even_when_the_user_left_it_visible():
    pool = make_pool(20)
    for node in pool:
        node.node.excluded_llm_metadata_keys = []  # every field visible, the group too
    out = fair(seed=0).postprocess_nodes(pool, QueryBundle("q"))
    for node in out:
        text = node.node.get_content("llm")
        assert f"doc_id: {node.node.metadata['doc_id']}\n" in text
        assert "gender" not in text and "title: " not in text  # the title is the header's


# -- query seeds and threads -------------------------------------------------------------------


def test_query_seed_around_a_thread_pool_warns_naming_the_fix():
    query_engine = engine([fair(seed=0)])
    with pytest.warns(UserWarning, match=r"query_seed\(7\) was used by no ranking.*copy_context"):
        with query_seed(7), ThreadPoolExecutor(max_workers=2) as pool:
            responses = list(pool.map(query_engine.query, ["a", "b"]))
    # what the warning is about: the workers drew their own seeds
    assert all(r.source_nodes[0].node.metadata["query_seed"] != 7 for r in responses)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the fix the warning names: each call runs in the block's context
        with query_seed(7), ThreadPoolExecutor(max_workers=2) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, query_engine.query, q)
                for q in ("a", "b")
            ]
            responses = [f.result() for f in futures]
        # a block its own thread used does not warn, whatever other threads did meanwhile
        with query_seed(3):
            with ThreadPoolExecutor(max_workers=1) as pool:
                pool.submit(query_engine.query, "elsewhere").result()
            here = query_engine.query("here")
    assert all(r.source_nodes[0].node.metadata["query_seed"] == 7 for r in responses)
    assert here.source_nodes[0].node.metadata["query_seed"] == 3


# -- nodes that embed their group --------------------------------------------------------------


def _pool_embedding_the_group(n: int = 30) -> list[NodeWithScore]:
    """The common mistake: the group hidden from the LLM only (``excluded_llm_metadata_keys``),
    so the index embedded it."""
    pool = make_pool(n)
    for node in pool:
        node.node.excluded_embed_metadata_keys = ["doc_id", "title"]
    return pool


def test_a_pool_that_embeds_the_group_key_warns_once_per_postprocessor_naming_the_fix():
    post = fair(seed=0)
    with pytest.warns(UserWarning, match=r"embed the group key 'gender'.*excluded_embed_metadata"):
        engine([post], pool=_pool_embedding_the_group()).query("q")  # on main: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine([post], pool=_pool_embedding_the_group()).query("again")
        engine([fair(seed=0)], pool=make_pool(30)).query("group not embedded")
    with pytest.warns(UserWarning, match="embed the group key"):
        engine([fair(seed=0)], pool=_pool_embedding_the_group()).query("another postprocessor")
