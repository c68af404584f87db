"""The adapter contract of docs/SPEC.md ("Adapters", "Records") on LlamaIndex's documented paths.

Synthetic pools served by a retriever, so every path (query engines sync, async and streaming,
chat engines, postprocessors chained after the fair one) runs in milliseconds; the real Chroma
index is exercised in ``real_index_test.py``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import re
import warnings
from typing import Any

import numpy as np
import pytest
from llama_index.core.base.llms.types import CompletionResponse
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.postprocessor import LongContextReorder, SimilarityPostprocessor
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from fairrag_core import FairnessAuditor, make_ranker, rerank
from fairrag_core.kit import (
    PLACEMENT_KEYS,
    RELEVANCE_CONVERSIONS,
    context_entry,
    describe_ranker,
    document_title,
)
from fairrag_core.prompts import render_entries
from fairrag_llamaindex import (
    PAPER_QA_TEMPLATE,
    FairnessEventHandler,
    FairRerankPostprocessor,
    query_seed,
)
from fairrag_llamaindex.fakes import CitingMockLLM, cite_context
from tests.llamaindex.fake_llms import FakeProseLLM, FakeRecordingLLM
from tests.llamaindex.pools import PoolRetriever, make_pool

QUESTION = "Who are influential people in computer science?"


def fair(**fields: Any) -> FairRerankPostprocessor:
    fields.setdefault("group_key", "gender")
    fields.setdefault("protected", "female")
    fields.setdefault("relevance", "similarity")
    return FairRerankPostprocessor(**fields)


def open_pool(n: int = 30) -> list[NodeWithScore]:
    """A pool whose nodes show every metadata field to the LLM and the embedding model (as
    LlamaIndex's defaults do), with texts that never name the group."""
    nodes = []
    for i, node in enumerate(make_pool(n)):
        title = node.node.metadata["title"]
        nodes.append(
            NodeWithScore(
                node=TextNode(
                    id_=node.node.node_id,
                    text=f"{title} worked on problem {i}.",
                    metadata=dict(node.node.metadata),
                ),
                score=node.score,
            )
        )
    return nodes


def query_engine(postprocessors, pool=None, llm=None, **kwargs: Any) -> RetrieverQueryEngine:
    return RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(30) if pool is None else pool),
        llm=llm or FakeRecordingLLM(),
        node_postprocessors=postprocessors,
        text_qa_template=PAPER_QA_TEMPLATE,
        **kwargs,
    )


def expected_ranking(pool, seed: int, k: int = 5, ranker: str = "representative_stochastic"):
    """The core's ranking of ``pool`` drawn with the query seed ``seed``."""
    return rerank(
        make_ranker(ranker, protected="female"),
        [n.score for n in pool],
        [n.node.metadata["gender"] for n in pool],
        k,
        rng=np.random.default_rng(seed),
        ids=[n.node.node_id for n in pool],
    )


def ids(nodes) -> list[str]:
    return [n.node.node_id for n in nodes]


@pytest.fixture
def handler():
    """A handler registered the usual LlamaIndex way: ``add_event_handler`` on the root."""
    root = get_dispatcher()
    handler = FairnessEventHandler(group_key="gender", protected="female")
    root.add_event_handler(handler)
    try:
        yield handler
    finally:
        root.event_handlers = [h for h in root.event_handlers if h is not handler]


# -- 1. the group label never reaches the LLM or the embeddings ------------------------------


def test_the_llm_prompt_is_the_kits_context_prompt_and_never_names_the_group():
    llm = FakeRecordingLLM()
    pool = open_pool()
    response = query_engine([fair(seed=3)], pool=pool, llm=llm).query(QUESTION)

    (prompt,) = llm.prompts
    # The fields the nodes leave visible to the LLM stay in the context (doc_id here), but
    # never the group key, nor the title twice (docs/SPEC.md, "Adapters" -> Context text).
    entries = [
        context_entry(
            rank,
            document_title(n.node.metadata, n.node.get_content()),
            n.node.get_content(),
            [("doc_id", n.node.metadata["doc_id"])],
        )
        for rank, n in enumerate(response.source_nodes, 1)
    ]
    assert prompt == render_entries(QUESTION, entries)
    assert "gender" not in prompt and "female" not in prompt
    assert "[1]\nTitle: " in prompt  # the titles come from metadata, in the kit's header


def test_returned_nodes_hide_group_and_placement_keys_from_llm_and_embeddings():
    out = fair(seed=1).postprocess_nodes(open_pool(), QueryBundle(QUESTION))
    for node in out:
        for mode in (MetadataMode.LLM, MetadataMode.EMBED):
            text = node.node.get_content(metadata_mode=mode)
            assert "gender" not in text and "female" not in text, text
            assert not any(f"{key}:" in text for key in PLACEMENT_KEYS), text
        assert node.node.get_content(metadata_mode=MetadataMode.EMBED) == node.node.text


def test_each_nodes_llm_text_is_the_kits_context_entry_whatever_its_whitespace():
    pool = open_pool()
    for i, node in enumerate(pool):
        text = node.node.get_content()
        node.node.set_content(["  \n" + text + "\n\n", f"Title: Own {i}\n{text}"][i % 2])
    out = fair(seed=1).postprocess_nodes(pool, QueryBundle(QUESTION))
    for rank, node in enumerate(out, 1):
        original = next(n for n in pool if n.node.node_id == node.node.node_id).node
        text = original.get_content()
        title = document_title(original.metadata, text)
        fields = [("doc_id", original.metadata["doc_id"])]  # visible to the LLM in the pool
        assert node.node.get_content(MetadataMode.LLM) == context_entry(rank, title, text, fields)


def test_show_metadata_keys_opts_in_to_showing_the_group():
    out = fair(seed=1, show_metadata_keys=["gender"]).postprocess_nodes(
        open_pool(), QueryBundle(QUESTION)
    )
    assert all("gender: " in n.node.get_content(MetadataMode.LLM) for n in out)


def test_show_metadata_keys_shows_a_placement_key_to_the_llm_and_keys_to_the_embedding():
    """A user trial: ``fair_rank`` named in ``show_metadata_keys`` never reached the LLM (the
    fields were read before the placement set it), and the embedding text held the shown
    values without their keys (``female\n1``); Haystack's ``context_text`` shows both."""
    postprocessor = fair(seed=1, show_metadata_keys=["fair_rank", "gender"])
    out = postprocessor.postprocess_nodes(open_pool(), QueryBundle(QUESTION))
    for rank, node in enumerate(out, start=1):
        meta, text = node.node.metadata, node.node.get_content(MetadataMode.NONE)
        fields = [("doc_id", meta["doc_id"]), ("fair_rank", rank), ("gender", meta["gender"])]
        title = document_title(meta, text)
        assert node.node.get_content(MetadataMode.LLM) == context_entry(rank, title, text, fields)
        embedded = node.node.get_content(MetadataMode.EMBED)
        assert embedded == f"fair_rank: {rank}\ngender: {meta['gender']}\n{text}", embedded
    # the title named too: the header's Title line, once (a user trial: shown twice)
    titled = fair(seed=1, show_metadata_keys=["title", "fair_rank"])
    for node in titled.postprocess_nodes(open_pool(), QueryBundle(QUESTION)):
        llm = node.node.get_content(MetadataMode.LLM)
        assert llm.count(node.node.metadata["title"]) == 1 + node.node.text.count(
            node.node.metadata["title"]
        ), llm
    # placed again without shown keys: the earlier placement's embedded fields are gone
    again = fair(seed=2).postprocess_nodes(out, QueryBundle(QUESTION))
    for node in again:
        embedded = node.node.get_content(MetadataMode.EMBED)
        assert embedded == node.node.get_content(MetadataMode.NONE), embedded


# -- 2. handler and postprocessor agree ------------------------------------------------------


def test_every_record_states_its_target_protected_and_exposure_model(handler):
    query_engine([fair(seed=0)]).query(QUESTION)
    (record,) = handler.records
    assert record["target"] == {"female": 0.5, "OTHERS": 0.5}
    assert record["protected"] == "female"
    assert record["exposure_model"] == "dcg"


def test_a_handler_from_a_postprocessor_follows_its_later_changes():
    postprocessor = fair(seed=0, target_share=0.5)
    handler = FairnessEventHandler.from_postprocessor(postprocessor)
    with handler.attach():
        engine = query_engine([postprocessor])
        engine.query(QUESTION)
        postprocessor.target_share = 0.3
        postprocessor.ranker_params = {"exposure": "rbp"}
        engine.query(QUESTION)
    first, second = handler.records
    assert first["target"]["female"] == 0.5 and first["exposure_model"] == "dcg"
    assert second["target"]["female"] == pytest.approx(0.3)
    assert second["exposure_model"].startswith("rbp")
    auditor = FairnessAuditor.create(protected="female", target_share=0.3, exposure="rbp")
    expected = auditor.retrieval(second["groups"])
    assert second["exposure_disparity"] == pytest.approx(expected["exposure_disparity"])


# -- 3. relevance ----------------------------------------------------------------------------


def test_relevance_names_the_kits_conversions_plus_auto():
    assert FairRerankPostprocessor.model_fields["relevance"].default == "auto"
    for name in RELEVANCE_CONVERSIONS:
        assert fair(relevance=name).relevance == name
    assert "chroma_l2" in RELEVANCE_CONVERSIONS
    with pytest.raises(ValueError, match="relevance"):
        fair(relevance="score")


def test_auto_relevance_outside_any_engine_is_refused_loudly():
    with pytest.raises(ValueError, match="relevance='auto'"):
        fair(relevance="auto").postprocess_nodes(make_pool(20), QueryBundle(QUESTION))


def test_auto_relevance_under_a_retriever_without_a_vector_store_takes_scores_as_given(handler):
    pool = make_pool(30)
    with query_seed(5):
        response = query_engine([fair(relevance="auto")], pool=pool).query(QUESTION)
    assert ids(response.source_nodes) == [
        pool[i].node.node_id for i in expected_ranking(pool, 5).indices
    ]


def test_scores_that_rise_along_the_stores_order_are_refused():
    pool = make_pool(30)
    with pytest.raises(ValueError, match="rises along"):
        query_engine([fair(relevance="negated")], pool=pool).query(QUESTION)


# -- 4. configuration changes take effect or are refused -------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"ranker": "standard"},
        {"seed": 99},
        {"target_share": 0.9},
        {"ranker_params": {"alpha": 0.5}},
        {"protected": "male"},
    ],
)
def test_a_field_set_after_construction_takes_effect(change):
    pool = make_pool(50)
    changed = fair(seed=1, target_share=0.3)
    for name, value in change.items():
        setattr(changed, name, value)
    fresh = fair(**{"seed": 1, "target_share": 0.3, **change})
    for _ in range(3):
        assert ids(changed.postprocess_nodes(pool, QueryBundle(QUESTION))) == ids(
            fresh.postprocess_nodes(pool, QueryBundle(QUESTION))
        )
    assert changed.to_dict()[next(iter(change))] == next(iter(change.values()))


def test_model_copy_with_an_update_takes_effect_and_leaves_the_original_alone():
    pool = make_pool(50)
    original = fair(seed=1)
    standard = original.model_copy(update={"ranker": "standard"})
    assert ids(standard.postprocess_nodes(pool, QueryBundle(QUESTION))) == ids(pool[:5])
    assert original.core_ranker.name == "representative_stochastic"


def test_deep_and_shallow_copies_never_share_a_generator():
    # Copy i of a component draws the i-th spawned stream of its seed (docs/SPEC.md, "Adapters"
    # → Copies): distinct from the original's and each other's, the same on every run.
    pool = make_pool(50)

    def drawn(postprocessor):
        return [ids(postprocessor.postprocess_nodes(pool, QueryBundle(QUESTION))) for _ in "ab"]

    def copies_of(original):
        return [copy.deepcopy(original), original.model_copy(), copy.copy(original)]

    original, again = fair(seed=4), fair(seed=4)
    streams = [drawn(each) for each in [original, *copies_of(original)]]
    assert streams[0][0] != streams[0][1]
    assert len({tuple(stream[0]) for stream in streams}) == 4  # four distinct streams
    assert [drawn(each) for each in [again, *copies_of(again)]] == streams  # reproducible


def test_an_invalid_assignment_is_refused_and_the_old_value_stays():
    postprocessor = fair(seed=1)
    with pytest.raises(ValueError, match="target"):
        postprocessor.target_share = 1.5
    assert postprocessor.target_share is None
    assert postprocessor.core_ranker.target.protected_share == 0.5


def test_a_ready_ranker_is_serialised_with_its_whole_configuration():
    ready = make_ranker("stochastic", protected="female", target_share=0.4, seed=3, alpha=2.0)
    postprocessor = FairRerankPostprocessor(ranker=ready, group_key="gender")
    assert postprocessor.to_dict()["ranker"] == describe_ranker(ready)
    assert postprocessor.model_dump()["ranker"]["params"]["alpha"] == 2.0
    rebuilt = FairRerankPostprocessor.from_dict(postprocessor.to_dict())  # read back whole
    assert describe_ranker(rebuilt.core_ranker) == describe_ranker(ready)
    with pytest.raises(ValueError, match="keys"):  # never simplified: a damaged one is refused
        FairRerankPostprocessor(ranker={"name": "stochastic", "alpah": 2.0}, group_key="g")


def test_unknown_constructor_arguments_are_refused():
    with pytest.raises(ValueError, match="pool_szie"):
        fair(pool_szie=10)


def test_unknown_handler_arguments_are_refused():
    with pytest.raises(ValueError, match="log_paht"):
        FairnessEventHandler(group_key="gender", protected="female", log_paht="x.jsonl")


def test_a_typo_in_ranker_params_names_the_parameter():
    with pytest.raises(ValueError, match="alpah"):
        fair(ranker_params={"alpah": 1.0})


# -- 5. score = relevance; placement metadata; later steps -----------------------------------


def test_node_score_is_the_relevance_and_metadata_has_the_kits_placement():
    pool = make_pool(30)
    with query_seed(12):
        out = fair().postprocess_nodes(pool, QueryBundle(QUESTION))
    expected = expected_ranking(pool, 12)
    assert ids(out) == [pool[i].node.node_id for i in expected.indices]
    for node, placement in zip(out, expected.placements, strict=True):
        meta = node.node.metadata
        assert node.score == meta["relevance_score"] == placement.score
        assert meta["exposure_weight"] == placement.exposure_weight
        assert (meta["query_seed"], meta["pool_size"], meta["fair_k"]) == (12, 30, 5)
        assert set(PLACEMENT_KEYS) <= set(meta)


def test_a_later_similarity_cutoff_cuts_on_relevance(handler):
    pool = make_pool(50)
    with query_seed(3):
        ranked = fair().postprocess_nodes(pool, QueryBundle(QUESTION))
    cutoff = sorted(n.score for n in ranked)[2]  # keeps exactly 3 of the 5
    cut = SimilarityPostprocessor(similarity_cutoff=cutoff)
    with query_seed(3):
        response = query_engine([fair(), cut], pool=pool).query(QUESTION)
    assert ids(response.source_nodes) == [n.node.node_id for n in ranked if n.score >= cutoff]
    direct, record = handler.records  # the direct call is recorded on its own, unanswered
    assert direct["answer"] is None if "answer" in direct else True
    assert record["doc_ids"] == ids(response.source_nodes)
    assert record["ranker"] == "representative_stochastic"
    assert record["dropped_after_ranking"] == 2 and record["k"] == 5


def test_after_long_context_reorder_the_record_audits_the_order_shown(handler):
    response = query_engine([fair(seed=2), LongContextReorder()]).query(QUESTION)
    (record,) = handler.records
    assert record["doc_ids"] == ids(response.source_nodes)
    assert record["reordered_after_ranking"] is True
    assert record["dropped_after_ranking"] == 0
    assert record["groups"] == [n.node.metadata["gender"] for n in response.source_nodes]


class NumberCitingLLM(FakeRecordingLLM):
    """Cites context entries ``[1]`` and ``[2]`` by number, whatever they hold."""

    @classmethod
    def class_name(cls) -> str:
        return "NumberCitingLLM"

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._prompts.append(prompt)
        return CompletionResponse(text="- The first source [1]\n- The second source [2]")


class DropFirst(BaseNodePostprocessor):
    """A later step that shows the LLM every node but the first."""

    def _postprocess_nodes(self, nodes, query_bundle=None):
        return nodes[1:]


@pytest.mark.parametrize("later", [LongContextReorder, DropFirst])
def test_an_entry_number_cites_the_document_labelled_with_it_after_a_later_step(handler, later):
    """A user trial: the postprocessor labels each node ``[fair rank]``, a label the node keeps
    when a later step reorders or drops nodes; the record read ``[n]`` as the n-th node shown,
    crediting another document (attributed parity 0 where the answer cited a woman and a man)."""
    llm = NumberCitingLLM()
    with query_seed(5):
        query_engine([fair(seed=2), later()], llm=llm).query(QUESTION)
    (record,) = handler.records
    labelled = dict(re.findall(r"^\[(\d)\]\nTitle: ([^\n]+)", llm.prompts[-1], re.M))
    assert set(labelled) == (
        {"1", "2", "3", "4", "5"} if later is LongContextReorder else {"2", "3", "4", "5"}
    )
    cited = [(s["line_number"], s["title"]) for s in record["attributed_sources"]]
    if later is LongContextReorder:
        assert record["reordered_after_ranking"] is True
        assert cited == [(1, labelled["1"]), (2, labelled["2"])]
    else:
        assert record["dropped_after_ranking"] == 1
        # [1], the dropped node's label, is a number no shown entry carries: counted, not credited
        assert cited == [(2, labelled["2"])] and record["n_out_of_range"] == 1


# -- 6. exactly one record per answered question ---------------------------------------------


def _assert_one_fair_record(handler, response, question=QUESTION):
    (record,) = handler.records
    assert record["source"] == "llamaindex" and record["schema"] == 2
    assert record["query"] == question
    assert record["ranker"] == "representative_stochastic"
    assert record["doc_ids"] == ids(response.source_nodes)
    assert record["groundedness"] == 1.0 and record["n_valid_citations"] == 5
    assert record["model"] == "citing-mock"
    assert record["timestamp"].endswith("Z")
    assert isinstance(record["query_seed"], int)
    return record


def test_one_record_per_query_when_registered_with_add_event_handler(handler):
    response = query_engine([fair(seed=0)]).query(QUESTION)
    _assert_one_fair_record(handler, response)


async def test_one_record_per_async_query(handler):
    response = await query_engine([fair(seed=0)]).aquery(QUESTION)
    _assert_one_fair_record(handler, response)


def test_a_streaming_query_is_recorded_once_its_stream_is_consumed(handler):
    response = query_engine([fair(seed=0)], streaming=True).query(QUESTION)
    assert handler.records == []  # nothing answered yet
    text = "".join(response.response_gen)
    record = _assert_one_fair_record(handler, response)
    assert record["answer"] == text


def test_a_stream_its_reader_stops_keeps_what_it_delivered(handler):
    """A server whose client disconnects closes the stream: the record dropped the text the
    user had received and named no error type (a user trial); as LangChain's handler, it keeps
    it, with ``GeneratorExit``."""
    response = query_engine([fair(seed=0)], streaming=True).query(QUESTION)
    tokens = response.response_gen
    received = next(tokens)
    tokens.close()
    (record,) = handler.records
    assert record["answer"].startswith(received)
    assert record["error"] == "GeneratorExit: the stream was closed before its end"


class SlowStreamLLM(CitingMockLLM):
    """A mock LLM (a test double) that streams its first chunk, then waits (an hour) for the
    rest."""

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        text = cite_context(prompt)

        async def chunks() -> Any:
            yield CompletionResponse(text=text[:10], delta=text[:10])
            await asyncio.sleep(3600)  # cancelled while it waits, however loaded the machine
            yield CompletionResponse(text=text, delta=text[10:])

        return chunks()


async def test_a_stream_whose_reading_task_is_cancelled_has_no_answer(handler):
    """A task cancelled while its stream waits on the LLM is not a reader that stopped:
    ``CancelledError``, no answer (a review found it recorded as GeneratorExit with the
    partial text)."""
    response = await query_engine([fair(seed=0)], llm=SlowStreamLLM(), streaming=True).aquery(
        QUESTION
    )

    async def read() -> None:
        async for _ in response.async_response_gen():
            pass

    task = asyncio.ensure_future(read())
    await asyncio.sleep(0.2)  # the first chunk read, the second awaited
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (record,) = handler.records
    assert record.get("answer") is None and record["error"].startswith("CancelledError")


async def test_an_async_streaming_query_is_recorded_once_its_stream_is_consumed(handler):
    response = await query_engine([fair(seed=0)], streaming=True).aquery(QUESTION)
    text = "".join([token async for token in response.async_response_gen()])
    record = _assert_one_fair_record(handler, response)
    assert record["answer"] == text


@pytest.mark.parametrize("engine_class", [ContextChatEngine, CondensePlusContextChatEngine])
def test_chat_engines_are_recorded_once_per_message(handler, engine_class):
    engine = engine_class.from_defaults(
        retriever=PoolRetriever(make_pool(30)),
        llm=FakeRecordingLLM(),
        node_postprocessors=[fair(seed=0)],
    )
    response = engine.chat(QUESTION)
    record = _assert_one_fair_record(handler, response)
    assert record["answer"] == response.response


@pytest.mark.parametrize("engine_class", [ContextChatEngine, CondensePlusContextChatEngine])
def test_streaming_chat_engines_are_recorded_once_the_stream_ends(handler, engine_class):
    engine = engine_class.from_defaults(
        retriever=PoolRetriever(make_pool(30)),
        llm=FakeRecordingLLM(),
        node_postprocessors=[fair(seed=0)],
    )
    response = engine.stream_chat(QUESTION)
    text = "".join(response.response_gen)
    record = _assert_one_fair_record(handler, response)
    assert record["answer"] == text.strip()


@pytest.mark.parametrize("engine_class", [ContextChatEngine, CondensePlusContextChatEngine])
async def test_async_chat_engines_are_recorded_once_per_message(handler, engine_class):
    engine = engine_class.from_defaults(
        retriever=PoolRetriever(make_pool(30)),
        llm=FakeRecordingLLM(),
        node_postprocessors=[fair(seed=0)],
    )
    response = await engine.achat(QUESTION)
    _assert_one_fair_record(handler, response)
    streamed = await engine.astream_chat(QUESTION)
    text = "".join([token async for token in streamed.async_response_gen()])
    _, second = handler.records
    assert second["answer"] == text.strip() and second["doc_ids"] == ids(streamed.source_nodes)


def _shown_by_condense_question(response) -> list[NodeWithScore]:
    """The nodes the condense_question engine's query engine showed its LLM (its tool output's
    response: LlamaIndex leaves ``source_nodes`` empty on ``astream_chat``)."""
    (tool_output,) = response.sources
    return list(tool_output.raw_output.source_nodes)


@pytest.mark.parametrize("method", ["chat", "stream_chat", "achat", "astream_chat"])
async def test_condense_question_chat_engines_record_the_list_their_query_engine_showed(
    handler, method
):
    from llama_index.core.chat_engine import CondenseQuestionChatEngine

    streaming = method in ("stream_chat", "astream_chat")
    engine = CondenseQuestionChatEngine.from_defaults(
        query_engine=query_engine([fair(seed=0)], llm=FakeRecordingLLM(), streaming=streaming),
        llm=FakeRecordingLLM(),
    )
    if method == "chat":
        response = engine.chat(QUESTION)
    elif method == "achat":
        response = await engine.achat(QUESTION)
    elif method == "stream_chat":
        response = engine.stream_chat(QUESTION)
        "".join(response.response_gen)
    else:
        response = await engine.astream_chat(QUESTION)
        "".join([token async for token in response.async_response_gen()])
        await asyncio.sleep(0.05)  # the engine writes the answer to its memory in a task
    shown = _shown_by_condense_question(response)
    assert len(shown) == 5
    (record,) = handler.records
    assert record["ranker"] == "representative_stochastic"
    assert record["doc_ids"] == ids(shown)
    assert record["groups"] == [n.node.metadata["gender"] for n in shown]
    assert record["n_valid_citations"] == 5


def test_a_handler_scoped_to_one_postprocessor_records_only_its_engine():
    mine, other = fair(seed=0), fair(seed=1)
    handler = FairnessEventHandler.from_postprocessor(mine, scope=[mine])
    with handler.attach():
        query_engine([other]).query("not mine")
        query_engine([]).query("plain")
        response = query_engine([mine]).query(QUESTION)
    (record,) = handler.records
    assert record["query"] == QUESTION and record["doc_ids"] == ids(response.source_nodes)


@pytest.mark.parametrize("entry", [123, "my-engine", "index"])
def test_a_scope_entry_no_question_is_recorded_by_is_refused(entry):
    """A user trial: ``scope=[index]`` (or a name, a number) was accepted and could never
    match, so the handler recorded nothing, with no error nor warning."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    if entry == "index":
        entry = VectorStoreIndex([], embed_model=MockEmbedding(embed_dim=4))
    with pytest.raises(ValueError, match=r"scope holds a \w+ .*give the query engines"):
        FairnessEventHandler(group_key="gender", protected="female", scope=[entry])
    with pytest.raises(ValueError, match="scope must be a list"):
        FairnessEventHandler(group_key="gender", protected="female", scope="my-engine")


def test_a_handler_from_a_postprocessor_refuses_a_group_key_of_its_own():
    """A user trial: ``from_postprocessor(fair, group_key="sex")`` was accepted, the handler's
    field read ``sex``, and records grouped by the postprocessor's ``gender``."""
    with pytest.raises(ValueError, match=r"group_key 'sex': a handler from a postprocessor"):
        FairnessEventHandler.from_postprocessor(fair(seed=0), group_key="sex")
    same = FairnessEventHandler.from_postprocessor(fair(seed=0), group_key="gender")
    assert same.group_key == "gender"


def test_a_handler_scoped_to_one_engine_records_only_that_engine():
    plain, other = query_engine([]), query_engine([fair(seed=1)])
    handler = FairnessEventHandler(group_key="gender", protected="female", scope=[plain])
    with handler.attach():
        other.query("not mine")
        response = plain.query(QUESTION)
    (record,) = handler.records
    assert record["query"] == QUESTION and record["ranker"] is None
    assert record["doc_ids"] == ids(response.source_nodes)


def test_legacy_reranking_callback_events_are_emitted():
    debug = LlamaDebugHandler()
    postprocessor = fair(seed=0, callback_manager=CallbackManager([debug]))
    out = postprocessor.postprocess_nodes(make_pool(20), QueryBundle(QUESTION))
    (pair,) = debug.get_event_pairs(CBEventType.RERANKING)
    start, end = pair
    assert start.payload["query_str"] == QUESTION
    assert start.payload["top_k"] == 5
    assert start.payload["model_name"] == "fairrag:representative_stochastic"
    assert ids(end.payload["nodes"]) == ids(out)


def test_a_prose_answer_scores_groundedness_0_and_nan_parity(handler):
    query_engine([fair(seed=0)], llm=FakeProseLLM()).query(QUESTION)
    (record,) = handler.records
    assert record["follows_citation_format"] is False
    assert record["groundedness"] == 0.0
    assert math.isnan(record["generation_parity"])


def test_instrument_tags_reach_the_records_metadata(handler):
    from llama_index.core.instrumentation.dispatcher import instrument_tags

    with instrument_tags({"tenant": "acme"}):
        query_engine([fair(seed=0)]).query(QUESTION)
    (record,) = handler.records
    assert record["metadata"] == {"tenant": "acme"}


def test_memory_is_bounded_when_records_go_to_a_file(tmp_path):
    path = tmp_path / "fairness.jsonl"
    handler = FairnessEventHandler(
        group_key="gender", protected="female", log_path=str(path), max_records=2
    )
    with handler.attach():
        engine = query_engine([fair(seed=0)])
        for i in range(3):
            engine.query(f"q{i}")
    assert [r["query"] for r in handler.records] == ["q1", "q2"]
    logged = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["query"] for r in logged] == ["q0", "q1", "q2"]


def test_the_log_file_is_also_named_path_as_in_langchains_handler(tmp_path):
    path = tmp_path / "fairness.jsonl"
    handler = FairnessEventHandler.from_postprocessor(fair(seed=0), path=str(path))
    assert handler.log_path == str(path)
    with handler.attach():
        query_engine([handler.postprocessor]).query(QUESTION)
    assert [json.loads(line)["query"] for line in path.read_text().splitlines()] == [QUESTION]
    with pytest.raises(ValueError, match="pathh"):
        FairnessEventHandler(group_key="gender", protected="female", pathh=str(path))


# -- 7. per-query seeds ----------------------------------------------------------------------


def test_a_query_seed_reaches_the_record_and_the_nodes_and_draws_the_cores_ranking(handler):
    pool = make_pool(40)
    with query_seed(7):
        response = query_engine([fair(seed=0)], pool=pool).query(QUESTION)
    (record,) = handler.records
    assert record["query_seed"] == 7
    assert all(n.node.metadata["query_seed"] == 7 for n in response.source_nodes)
    assert ids(response.source_nodes) == [
        pool[i].node.node_id for i in expected_ranking(pool, 7).indices
    ]


def test_reversed_queries_are_redrawn_from_their_recorded_seeds(handler):
    pools = {f"q{i}": make_pool(40, seed=i, prefix=f"q{i}") for i in range(16)}
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(pool_for=pools.__getitem__),
        llm=FakeRecordingLLM(),
        node_postprocessors=[fair(seed=2026)],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    for question in reversed(pools):
        engine.query(question)
    records = handler.records
    assert len(records) == 16
    identical = 0
    for record in records:
        with query_seed(record["query_seed"]):
            again = engine.query(record["query"])
        identical += ids(again.source_nodes) == record["doc_ids"]
    assert identical == 16


async def test_query_seeds_stay_with_their_asyncio_task(handler):
    import asyncio

    engine = query_engine([fair(seed=0)], llm=FakeRecordingLLM(delays=[0.02, 0.0, 0.01]))

    async def ask(seed: int) -> Any:
        with query_seed(seed):
            return await engine.aquery(f"seed {seed}")

    responses = await asyncio.gather(*(ask(s) for s in (11, 22, 33)))
    by_query = {r["query"]: r for r in handler.records}
    for seed, response in zip((11, 22, 33), responses, strict=True):
        assert by_query[f"seed {seed}"]["query_seed"] == seed
        assert response.source_nodes[0].node.metadata["query_seed"] == seed


# -- 8. smaller ------------------------------------------------------------------------------


def test_a_pool_not_larger_than_top_n_warns_once_per_postprocessor():
    postprocessor = fair(seed=0, top_n=5)
    with pytest.warns(UserWarning, match="similarity_top_k"):
        postprocessor.postprocess_nodes(make_pool(5), QueryBundle(QUESTION))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        postprocessor.postprocess_nodes(make_pool(2), QueryBundle(QUESTION))


def test_an_empty_group_key_fails_at_construction():
    with pytest.raises(ValueError, match="group_key"):
        fair(group_key="")


def test_only_the_first_line_gives_a_node_its_title(handler):
    pool = make_pool(30)
    for i, node in enumerate(pool):
        node.node.metadata.pop("title")
        node.node.set_content(f"Born in {i}.\nTitle: Injected {i}")
    query_engine([fair(seed=0)], pool=pool).query(QUESTION)
    (record,) = handler.records
    assert record["titles"] == [None] * 5


def test_a_megabyte_of_hostile_text_is_audited(handler):
    # A megabyte of line breaks before a line that is no title: a regex that retries at
    # every line start is quadratic on it; the kit's rule reads it once.
    pool = make_pool(30)
    for node in pool:
        node.node.metadata.pop("title")
        node.node.set_content("\n" * 1_000_000 + "no title here")
    fair(seed=0).postprocess_nodes(pool, QueryBundle(QUESTION))
    (record,) = handler.records
    assert record["titles"] == [None] * 5 and len(record["groups"]) == 5


def test_a_full_disk_is_counted_and_logged_never_lost_silently(tmp_path, monkeypatch, caplog):
    import errno

    import fairrag_core.jsonl as jsonl

    def disk_full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonl, "_write_all", disk_full)
    root = get_dispatcher()
    handler = FairnessEventHandler(
        group_key="gender", protected="female", log_path=str(tmp_path / "log.jsonl")
    )
    root.add_event_handler(handler)
    try:
        engine = query_engine([fair()])
        with caplog.at_level("ERROR"):
            for i in range(3):
                engine.query(f"Who are role models {i}?")
    finally:
        root.event_handlers = [h for h in root.event_handlers if h is not handler]
    assert handler.log is not None and handler.log.errors == 3
    assert len(handler.records) == 3  # kept in memory
    assert sum("could not write a record" in r.message for r in caplog.records) == 3


async def test_amortized_through_chat_engines_and_streams_counts_what_each_message_showed(
    handler, tmp_path
):
    from fairrag_core.ledger import LedgerState, make_ledger

    path = str(tmp_path / "exposure.db")
    post = fair(ranker="amortized", seed=0, ledger=path, ledger_key="tenant")
    chat = ContextChatEngine.from_defaults(
        retriever=PoolRetriever(make_pool(30)), llm=FakeRecordingLLM(), node_postprocessors=[post]
    )
    streamed = query_engine([post], streaming=True).query(QUESTION)
    "".join(streamed.response_gen)
    responses = [streamed, chat.chat(QUESTION)]
    stream_chat = chat.stream_chat(QUESTION)
    "".join(stream_chat.response_gen)
    responses.append(stream_chat)
    achat = await chat.astream_chat(QUESTION)
    "".join([token async for token in achat.async_response_gen()])
    responses.append(achat)
    shown: dict = {}
    for response in responses:
        for node in response.source_nodes:
            group = node.node.metadata["gender"]
            shown[group] = shown.get(group, 0.0) + node.node.metadata["exposure_weight"]
    state = make_ledger(path).state("tenant")
    assert state.rankings == 4 and state.totals == pytest.approx(shown, rel=1e-12)
    records = handler.records
    assert len(records) == 4
    assert [LedgerState.from_record(r["ledger_state"]).rankings for r in records] == [0, 1, 2, 3]


@pytest.mark.parametrize("streaming", [False, True])
def test_the_canned_empty_response_is_no_models_answer(handler, streaming):
    """A query whose retriever found nothing gets LlamaIndex's "Empty Response" with no LLM
    call; the record credited it to the engine's LLM as its answer, failing the citation
    format (a LlamaIndex trial)."""
    llm = FakeRecordingLLM()
    engine = query_engine([fair(seed=0)], pool=[], llm=llm, streaming=streaming)
    response = engine.query("Who are role models in computing?")
    if streaming:
        assert "".join(response.response_gen) == "Empty Response"
    else:
        assert str(response) == "Empty Response"
    (record,) = handler.records
    assert not llm.prompts
    assert record["model"] is None and record.get("answer") is None
    assert record["framework"]["answer_status"] == "not_from_a_model"
    assert record["pool_size"] == 0 and record["k"] == 0
