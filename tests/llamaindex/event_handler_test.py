"""FairnessEventHandler on query engines over synthetic pools: one record per query, right query."""

from __future__ import annotations

import asyncio
import json
import math
from concurrent.futures import ThreadPoolExecutor

import pytest
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine

from fairrag_core import FairnessAuditor
from fairrag_core.citations import ContextDocument
from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.llamaindex.pools import PoolRetriever, make_pool

AUDITOR = FairnessAuditor.create(protected="female", target_share=0.5)


def engine(llm=None, pool=None, pool_for=None, postprocessors=None, delays=(), **fields):
    if postprocessors is None:
        postprocessors = [
            FairRerankPostprocessor(group_key="gender", protected="female", seed=0, **fields)
        ]
    return RetrieverQueryEngine.from_args(
        PoolRetriever(
            pool if pool is not None else make_pool(50), pool_for=pool_for, delays=delays
        ),
        llm=llm or CitingMockLLM(),
        node_postprocessors=postprocessors,
        text_qa_template=PAPER_QA_TEMPLATE,
    )


class WrongTitlesLLM(CitingMockLLM):
    """Cites the right people under titles that are not in the context."""

    def complete(self, prompt, formatted=False, **kwargs):
        response = super().complete(prompt, formatted, **kwargs)
        response.text = response.text.replace("DocTitle: ", "DocTitle: Not ")
        return response


def expected_record(response) -> dict:
    """The record, recomputed straight from the core, for a response of the citing mock."""
    groups = [n.node.metadata["gender"] for n in response.source_nodes]
    record = AUDITOR.retrieval(groups)
    context = [
        ContextDocument(n.node.metadata["title"], group=n.node.metadata["gender"])
        for n in response.source_nodes
    ]
    record.update(AUDITOR.generation(response.response, context, record["exposure_share"]))
    return record


def test_one_record_per_query_with_the_cores_numbers(fairness_handler):
    response = engine().query("Who are role models in computer science?")
    (record,) = fairness_handler.records

    assert record["query"] == "Who are role models in computer science?"
    assert record["run_id"].startswith("RetrieverQueryEngine.query-")
    assert record["ranker"] == "representative_stochastic"
    assert record["framework"]["n_reranks"] == 1
    assert record["doc_ids"] == [n.node.node_id for n in response.source_nodes]
    assert record["titles"] == [n.node.metadata["title"] for n in response.source_nodes]
    assert record["answer"] == response.response
    assert record["follows_citation_format"] is True
    expected = expected_record(response)
    for key in (
        "groups",
        "exposure_share",
        "exposure_disparity",
        "generation_parity",
        "fairness_gap",
        "fairness_gap_magnitude",
        "groundedness",
        "n_bullets",
        "n_valid_citations",
    ):
        assert record[key] == pytest.approx(expected[key]), key
    assert record["groundedness"] == 1.0  # the mock cites exactly its context
    assert record["n_valid_citations"] == 5


def test_records_are_also_json_lines_in_the_log_file(fairness_handler):
    engine().query("first")
    engine(llm=WrongTitlesLLM()).query("second")  # NaN generation parity
    with open(fairness_handler.log_path, encoding="utf-8") as handle:
        logged = [json.loads(line) for line in handle]
    memory = fairness_handler.records
    assert [r["query"] for r in logged] == ["first", "second"]
    for on_disk, in_memory in zip(logged, memory, strict=True):
        assert on_disk.keys() == in_memory.keys()
        assert on_disk["doc_ids"] == in_memory["doc_ids"]
        assert on_disk["groups"] == in_memory["groups"]
        assert on_disk["exposure_share"] == pytest.approx(in_memory["exposure_share"])
    assert math.isnan(memory[1]["generation_parity"])
    assert logged[1]["generation_parity"] is None  # strict JSON: NaN is written as null


def test_answer_not_in_the_citation_format_scores_by_the_core_rule(fairness_handler):
    # MockLLM echoes LlamaIndex's default prompt: prose, no bullet.
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(50)),
        llm=MockLLM(),
        node_postprocessors=[
            FairRerankPostprocessor(group_key="gender", protected="female", seed=0)
        ],
    )
    engine.query("Who?")
    (record,) = fairness_handler.records
    assert record["follows_citation_format"] is False
    assert "exposure_share" in record and len(record["groups"]) == 5
    # docs/SPEC.md: an answer without bullets has groundedness 0 and NaN generation parity
    assert record["groundedness"] == 0.0
    for key in ("generation_parity", "fairness_gap", "fairness_gap_magnitude"):
        assert math.isnan(record[key]), key


def test_citations_to_titles_outside_the_context_give_nan_parity(fairness_handler):
    engine(llm=WrongTitlesLLM()).query("Who?")
    (record,) = fairness_handler.records
    assert record["follows_citation_format"] is True
    assert record["n_valid_citations"] == 0
    assert math.isnan(record["generation_parity"])
    assert record["groundedness"] == 0.0


def test_queries_without_the_reranker_are_recorded_as_a_baseline(fairness_handler):
    response = engine(postprocessors=[]).query("baseline")
    (record,) = fairness_handler.records
    assert record["ranker"] is None and record["framework"]["n_reranks"] == 0
    assert record["doc_ids"] == [n.node.node_id for n in response.source_nodes]
    assert len(record["groups"]) == 50  # the whole pool reached the LLM


def test_baseline_recording_can_be_switched_off():
    handler = FairnessEventHandler(
        group_key="gender", protected="female", record_queries_without_reranker=False
    )
    with handler.attach():
        engine(postprocessors=[]).query("baseline")
        engine().query("fair")
    assert [r["query"] for r in handler.records] == ["fair"]


def test_rerank_outside_a_query_is_recorded_on_its_own(fairness_handler):
    postprocessor = FairRerankPostprocessor(
        group_key="gender", protected="female", seed=0, relevance="similarity"
    )
    out = postprocessor.postprocess_nodes(make_pool(50), query_str="direct call")
    (record,) = fairness_handler.records
    assert record["query"] == "direct call"
    assert record["run_id"] is None
    assert "answer" not in record and "follows_citation_format" not in record
    assert record["doc_ids"] == [n.node.node_id for n in out]


def test_other_rerankers_events_are_ignored(fairness_handler):
    from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent

    dispatcher = get_dispatcher("some.other.reranker")
    pool = make_pool(5)
    dispatcher.event(ReRankStartEvent(query="q", nodes=pool, top_n=2, model_name="cross-encoder"))
    dispatcher.event(ReRankEndEvent(nodes=pool[:2]))
    assert fairness_handler.records == []


def test_a_failed_query_is_recorded_with_its_error_and_leaves_no_open_state(fairness_handler):
    class Failing(CitingMockLLM):
        def complete(self, prompt, formatted=False, **kwargs):
            raise RuntimeError("generator down")

    with pytest.raises(RuntimeError, match="generator down"):
        engine(llm=Failing()).query("doomed")
    engine().query("fine")
    failed, fine = fairness_handler.records
    assert failed["query"] == "doomed" and "generator down" in failed["error"]
    assert len(failed["groups"]) == 5 and "exposure_share" in failed  # what it had retrieved
    assert "answer" not in failed and "generation_parity" not in failed
    assert fine["query"] == "fine" and "error" not in fine
    # internal bookkeeping: nothing left open for the failed query
    assert fairness_handler._live.runs == {} and fairness_handler._live.open_reranks == {}


def test_a_failed_query_without_reranker_is_recorded_with_its_error(fairness_handler):
    class Failing(CitingMockLLM):
        def complete(self, prompt, formatted=False, **kwargs):
            raise RuntimeError("generator down")

    with pytest.raises(RuntimeError):
        engine(llm=Failing(), postprocessors=[]).query("doomed baseline")
    (record,) = fairness_handler.records
    assert record["ranker"] is None and "generator down" in record["error"]
    assert record["doc_ids"] == []
    assert "exposure_share" not in record  # nothing was known to have been shown


def test_titles_fall_back_to_the_title_line_of_the_text(fairness_handler):
    pool = make_pool(50)
    for node in pool:
        node.node.metadata.pop("title")
    response = engine(pool=pool).query("Who?")
    (record,) = fairness_handler.records
    titles = [
        n.node.get_content().splitlines()[0].removeprefix("Title: ") for n in response.source_nodes
    ]
    assert record["titles"] == titles
    assert record["n_valid_citations"] == 5 and record["groundedness"] == 1.0


def test_shown_nodes_without_the_handlers_group_key_are_unknown_never_protected():
    handler = FairnessEventHandler(group_key="sex", protected="female")
    with handler.attach():
        engine().query("Who?")
    (record,) = handler.records
    assert record["groups"] == [None] * len(record["groups"]) and record["groups"]
    assert record["exposure_share"] == 0.0
    assert "error" not in record


def test_from_postprocessor_audits_against_the_rankers_target_and_exposure():
    postprocessor = FairRerankPostprocessor(
        group_key="gender", protected="female", target_share=0.3, ranker_params={"exposure": "rbp"}
    )
    handler = FairnessEventHandler.from_postprocessor(postprocessor)
    assert handler.group_key == "gender"
    assert handler.auditor.target.protected_share == pytest.approx(0.3)
    assert handler.auditor.exposure.name == "rbp"


def test_attach_is_idempotent_and_detach_removes_the_handler():
    root = get_dispatcher()
    handler = FairnessEventHandler(group_key="gender", protected="female")
    handler.attach()
    handler.attach()
    try:
        assert sum(h is handler for h in root.event_handlers) == 1
        # one span tree per process, shared by every handler and postprocessor
        assert sum(h is handler.span_handler for h in root.span_handlers) == 1
    finally:
        handler.detach()
    assert all(h is not handler for h in root.event_handlers)
    engine().query("after detach")
    assert handler.records == []


def test_log_path_in_a_missing_folder_fails_at_construction(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        FairnessEventHandler(
            group_key="gender", protected="female", log_path=str(tmp_path / "no" / "x.jsonl")
        )


# -- concurrency: records must belong to the right query --------------------------------------


def _per_query_pool(query: str):
    # Every query gets its own pool (ids prefixed by the query), so a record attributed to the
    # wrong query shows up as foreign node ids.
    return make_pool(50, prefix=query, seed=len(query))


def _assert_attributed(records, responses_by_query):
    assert sorted(r["query"] for r in records) == sorted(responses_by_query)
    assert len({r["run_id"] for r in records}) == len(records)
    for record in records:
        response = responses_by_query[record["query"]]
        assert all(i.startswith(record["query"] + "-") for i in record["doc_ids"])
        assert record["doc_ids"] == [n.node.node_id for n in response.source_nodes]
        assert record["answer"] == response.response
        assert record["groundedness"] == 1.0


async def test_concurrent_aquery_records_are_attributed_to_their_own_query(fairness_handler):
    queries = [f"q{i}" for i in range(8)]
    # All queries start, then re-rank in a shuffled order (retrieval sleeps), then answer after
    # LLM sleeps of their own: start, re-rank and end events of different queries interleave,
    # so neither "the latest open query" nor "the oldest open query" would attribute correctly.
    retrieval = [0.06, 0.14, 0.02, 0.10, 0.16, 0.04, 0.12, 0.08]
    llm = CitingMockLLM(delays=[0.09, 0.0, 0.05, 0.12, 0.02, 0.07, 0.0, 0.03])
    query_engine = engine(llm=llm, pool_for=_per_query_pool, delays=retrieval)
    responses = await asyncio.gather(*(query_engine.aquery(q) for q in queries))

    records = fairness_handler.records
    assert [r["query"] for r in records] != queries  # they really overlapped
    _assert_attributed(records, dict(zip(queries, responses, strict=True)))


async def test_concurrent_aquery_with_identical_text_keeps_each_draw_apart(fairness_handler):
    # Same text, same pool: only the span tree tells the queries apart. Each draw of the
    # stochastic ranker differs, and each record must hold its own query's draw.
    llm = CitingMockLLM(delays=[0.05, 0.04, 0.03, 0.02, 0.01, 0.0])
    query_engine = engine(
        llm=llm, ranker_params={"alpha": 1.0}, delays=[0.0, 0.05, 0.01, 0.04, 0.02, 0.03]
    )
    responses = await asyncio.gather(*(query_engine.aquery("same question") for _ in range(6)))

    records = fairness_handler.records
    assert len(records) == 6
    by_answer = {r.response: r for r in responses}
    assert len(by_answer) > 1, "draws were identical; the test would prove nothing"
    for record in records:
        response = by_answer[record["answer"]]
        assert record["doc_ids"] == [n.node.node_id for n in response.source_nodes]


def test_queries_in_threads_are_attributed_to_their_own_query(fairness_handler):
    queries = [f"t{i}" for i in range(8)]
    query_engine = engine(pool_for=_per_query_pool)
    with ThreadPoolExecutor(max_workers=4) as pool:
        responses = list(pool.map(query_engine.query, queries))
    _assert_attributed(fairness_handler.records, dict(zip(queries, responses, strict=True)))


def test_an_amortized_list_cut_by_a_later_postprocessor_is_recorded_and_warns(fairness_handler):
    from llama_index.core.postprocessor import SimilarityPostprocessor

    post = FairRerankPostprocessor(
        group_key="gender", protected="female", ranker="amortized", seed=0
    )
    cutoff = SimilarityPostprocessor(similarity_cutoff=0.85)  # drops the lower ones
    with pytest.warns(UserWarning, match="its ledger counted the ranking as served"):
        response = engine(postprocessors=[post, cutoff]).query("q")
    (record,) = fairness_handler.records
    assert record["dropped_after_ranking"] == 5 - len(response.source_nodes) > 0
    assert post.ledger.state().rankings == 1  # what it counted: the 5 it ranked


def test_an_amortized_list_cut_whole_by_a_later_postprocessor_is_recorded_and_warns(
    fairness_handler,
):
    from llama_index.core.postprocessor import SimilarityPostprocessor

    post = FairRerankPostprocessor(
        group_key="gender", protected="female", ranker="amortized", seed=0
    )
    cutoff = SimilarityPostprocessor(similarity_cutoff=2.0)  # above every score: drops all
    with pytest.warns(UserWarning, match="had every document removed after it was ranked"):
        response = engine(postprocessors=[post, cutoff]).query("q")
    assert response.source_nodes == []
    (record,) = fairness_handler.records
    # The question is filed under the ranking that was made (and that its ledger counted), not
    # under the plain-retriever baseline.
    assert record["ranker"] == "amortized" and record["k"] == 5
    assert record["dropped_after_ranking"] == 5 and record["groups"] == []
    assert record["ledger_state"]["rankings"] == 0
    assert post.ledger.state().rankings == 1


def test_a_copy_ranking_for_another_target_is_audited_against_it(fairness_handler):
    post = FairRerankPostprocessor(group_key="gender", protected="female", seed=0)
    with FairnessEventHandler.from_postprocessor(post) as follower:
        copy = post.model_copy(update={"target_share": 0.3})
        response = engine(postprocessors=[copy]).query("q")
        engine(postprocessors=[post]).query("q")
    ranked_for_03, own = follower.records
    assert ranked_for_03["target"] == pytest.approx({"female": 0.3, "OTHERS": 0.7})
    groups = [n.node.metadata["gender"] for n in response.source_nodes]
    expected = FairnessAuditor.create(protected="female", target_share=0.3).retrieval(groups)
    assert ranked_for_03["exposure_disparity"] == pytest.approx(expected["exposure_disparity"])
    assert own["target"] == {"female": 0.5, "OTHERS": 0.5}


def test_an_amortized_record_carries_the_ledger_state_that_re_draws_its_ranking(
    fairness_handler,
):
    from fairrag_core.ledger import LedgerState, MemoryLedger
    from fairrag_llamaindex import query_seed

    post = FairRerankPostprocessor(
        group_key="gender", protected="female", ranker="amortized", seed=0
    )
    for i in range(6):
        engine(postprocessors=[post]).query(f"q{i}")
    for number, record in enumerate(fairness_handler.records):
        state = LedgerState.from_record(record["ledger_state"])
        assert state.rankings == number
        again = FairRerankPostprocessor(
            group_key="gender",
            protected="female",
            ranker="amortized",
            ledger=MemoryLedger.from_state(state),
        )
        with query_seed(record["query_seed"]):
            response = engine(postprocessors=[again]).query(record["query"])
        assert [n.node.node_id for n in response.source_nodes] == record["doc_ids"]


async def test_a_handler_whose_block_closed_never_records_another_blocks_question():
    """One ``with FairnessEventHandler.from_postprocessor(fair)`` block per request under
    ``asyncio.gather``: the block that closed first also wrote the other block's question (its
    scope check ran only while its own block was open; a LlamaIndex user trial)."""
    fair = FairRerankPostprocessor(group_key="gender", protected="female", seed=0)
    query_engine = engine(
        llm=CitingMockLLM(delays=[0.0, 0.3]), postprocessors=[fair], pool_for=_per_query_pool
    )

    async def ask(question: str) -> FairnessEventHandler:
        with FairnessEventHandler.from_postprocessor(fair) as handler:
            await query_engine.aquery(question)
        await asyncio.sleep(0.5)  # alive until the other question ended
        return handler

    first, second = await asyncio.gather(ask("qA"), ask("qB"))
    assert [r["query"] for r in first.records] == ["qA"]
    assert [r["query"] for r in second.records] == ["qB"]


def test_a_handler_following_a_postprocessor_may_measure_under_its_own_exposure_model():
    """``from_postprocessor(fair, exposure="uniform")``, as the docstring offers: it was refused
    ("no fairness target", a user trial). The postprocessor's target, the handler's model."""
    import pickle

    fair = FairRerankPostprocessor(group_key="gender", protected="female", seed=0)
    handler = FairnessEventHandler.from_postprocessor(fair, exposure="uniform")
    with handler:
        engine(postprocessors=[fair]).query("q")
    (record,) = handler.records
    assert record["exposure_model"] == "uniform" and record["protected"] == "female"
    share = sum(g == "female" for g in record["groups"]) / len(record["groups"])
    assert record["exposure_share"] == pytest.approx(share)
    assert pickle.loads(pickle.dumps(handler)).auditor.exposure.name == "uniform"
