"""FairnessCallbackHandler on an in-memory pool with fake chat models: what is recorded, when,
and on malformed, empty and hallucinating answers."""

from __future__ import annotations

import json
import math
import uuid

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import RunnableLambda

from fairrag_core import FairnessAuditor
from fairrag_langchain import FairnessCallbackHandler, FairRetriever, make_fair_rag_chain
from fairrag_langchain.fakes import FakeCitingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool


@pytest.fixture
def store():
    return FixedPoolStore(*imbalanced_pool())


@pytest.fixture
def retriever(store):
    return FairRetriever(group_key="gender", vectorstore=store, protected="female", seed=0)


def handler_for(**params) -> FairnessCallbackHandler:
    params.setdefault("protected", "female")
    params.setdefault("group_key", "gender")
    return FairnessCallbackHandler(**params)


def config(handler, run_id=None):
    cfg = {"callbacks": [handler]}
    if run_id is not None:
        cfg["run_id"] = run_id
    return cfg


def test_standalone_retriever_run_is_recorded_at_retriever_end(retriever, tmp_path):
    handler = handler_for(path=tmp_path / "fairness.jsonl")
    documents = retriever.invoke("who?", config=config(handler))
    (record,) = handler.records
    groups = [d.metadata["gender"] for d in documents]
    expected = FairnessAuditor.create(protected="female").retrieval(groups)
    assert record["groups"] == groups
    assert record["titles"] == [d.metadata["title"] for d in documents]
    assert record["exposure_share"] == pytest.approx(expected["exposure_share"])
    assert record["exposure_disparity"] == pytest.approx(expected["exposure_disparity"])
    assert record["ranker"] == "representative_stochastic"
    assert record["query"] == "who?"
    assert record["run_id"] == record["framework"]["retriever_run_id"]
    assert record["framework"]["llm_run_id"] is None
    assert "generation_parity" not in record
    lines = (tmp_path / "fairness.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [json.loads(json.dumps(record))]


def test_chain_run_links_generation_to_its_retrieval(retriever, tmp_path):
    handler = handler_for(path=tmp_path / "log.jsonl")
    chain = make_fair_rag_chain(retriever, FakeCitingChatModel())
    run_id = uuid.uuid4()
    output = chain.invoke("Who are role models?", config=config(handler, run_id))
    (record,) = handler.records
    assert record["run_id"] == str(run_id)
    assert record["framework"]["retriever_run_id"] != record["run_id"]
    assert record["framework"]["llm_run_id"] is not None
    assert record["titles"] == [d.metadata["title"] for d in output["context"]]
    assert record["n_citations"] == record["n_valid_citations"] == 5
    assert record["groundedness"] == 1.0
    assert record["framework"]["llm_runs"] == 1
    for name in ("generation_parity", "fairness_gap", "fairness_gap_magnitude"):
        assert record[name] == pytest.approx(output["metrics"][name])
    assert record["fairness_gap"] == pytest.approx(
        record["generation_parity"] - record["exposure_share"]
    )
    assert record["answer"] == output["answer"]
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 1


def fake_answer_chain(retriever, answer: str):
    return make_fair_rag_chain(retriever, FakeListChatModel(responses=[answer]))


def test_malformed_answer(retriever):
    handler = handler_for()
    answer = "Sure! Here they are:\n- Person 00 (DocTitle:\n- somebody\n* * *"
    fake_answer_chain(retriever, answer).invoke("q", config=config(handler))
    (record,) = handler.records
    assert record["n_citations"] == 0
    assert record["n_bullets"] == 2
    assert record["unparsed_lines"] == ["- Person 00 (DocTitle:", "- somebody"]
    assert record["groundedness"] == 0.0
    assert math.isnan(record["generation_parity"])  # nothing valid cited: NaN, counted


def test_empty_answer(retriever, tmp_path):
    handler = handler_for(path=tmp_path / "log.jsonl")
    fake_answer_chain(retriever, "").invoke("q", config=config(handler))
    (record,) = handler.records
    assert record["n_bullets"] == 0
    assert record["groundedness"] == 0.0
    line = json.loads((tmp_path / "log.jsonl").read_text())
    assert line["generation_parity"] is None  # NaN is written as null: strict JSON
    assert line["fairness_gap"] is None


def test_hallucinating_answer(retriever):
    handler = handler_for()
    chain = make_fair_rag_chain(retriever, FakeCitingChatModel(hallucination_rate=1.0))
    chain.invoke("q", config=config(handler))
    (record,) = handler.records
    assert record["n_citations"] == 5
    assert record["n_valid_citations"] == 0
    assert record["groundedness"] == 0.0
    assert all(not c["valid"] for c in record["citations"])


def test_summary_gives_means_per_ranker(store):
    handler = handler_for()
    standard = FairRetriever(
        group_key="gender", vectorstore=store, ranker="standard", protected="female"
    )
    fair = FairRetriever(group_key="gender", vectorstore=store, protected="female", seed=1)
    for retriever in (standard, fair):
        chain = make_fair_rag_chain(retriever, FakeCitingChatModel())
        chain.batch([f"q{i}" for i in range(20)], config=config(handler))
    summary = handler.summary()
    assert set(summary) == {"standard", "representative_stochastic"}
    assert summary["standard"]["runs"] == 20
    assert summary["standard"]["exposure_share"]["mean"] == 0.0  # all female ranked last
    assert summary["representative_stochastic"]["exposure_share"]["mean"] > 0.35
    assert summary["standard"]["generation_parity"]["n"] == 20


def test_other_retrievers_are_recorded_under_their_name(store):
    handler = handler_for()
    plain = store.as_retriever(search_kwargs={"k": 5})
    plain.invoke("q", config=config(handler))
    (record,) = handler.records
    # no fair ranking made this list: ranker null, the retriever named
    assert record["ranker"] is None and record["framework"]["retriever"] == "VectorStoreRetriever"
    assert record["relevance_function"] is None  # every field in every record


def test_shown_documents_without_the_handlers_group_key_are_unknown_never_protected(retriever):
    handler = handler_for(group_key="sex")
    retriever.invoke("q", config=config(handler))
    (record,) = handler.records
    assert record["groups"] == [None] * 5
    assert record["exposure_share"] == 0.0
    assert record["exposure_disparity"] == pytest.approx(0.5)
    assert "error" not in record


def test_a_failing_chain_still_writes_what_it_retrieved(retriever):
    handler = handler_for()

    def boom(_):
        raise RuntimeError("model unavailable")

    chain = retriever | RunnableLambda(boom)
    with pytest.raises(RuntimeError):
        chain.invoke("q", config=config(handler))
    (record,) = handler.records
    assert record["error"] == "RuntimeError: model unavailable"
    assert len(record["groups"]) == 5


def test_a_failed_retrieval_is_logged_with_its_error(tmp_path):
    class BrokenStore(FixedPoolStore):
        def similarity_search_with_score(self, *args, **kwargs):
            raise ConnectionError("store down")

    handler = handler_for(path=tmp_path / "log.jsonl")
    broken = FairRetriever(
        vectorstore=BrokenStore(*imbalanced_pool()), group_key="gender", protected="female"
    )
    with pytest.raises(ConnectionError):
        broken.invoke("q", config=config(handler))
    (record,) = handler.records
    assert (
        record["error"].startswith("VectorStoreUnavailableError")
        and "store down" in record["error"]
    )
    assert record["query"] == "q" and "exposure_share" not in record
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 1


def test_a_model_call_without_retrieval_writes_nothing():
    handler = handler_for()
    FakeCitingChatModel().invoke("Title: Ada Lovelace", config=config(handler))
    assert handler.records == []
    assert handler._roots == {} and handler._root_of == {}  # nothing left behind


def test_state_is_released_after_each_run(retriever):
    handler = handler_for()
    chain = make_fair_rag_chain(retriever, FakeCitingChatModel())
    chain.batch(["a", "b", "c"], config=config(handler))
    assert len(handler.records) == 3
    assert handler._roots == {} and handler._root_of == {}


def test_bad_configuration_fails_at_construction(tmp_path):
    with pytest.raises(ValueError, match="no fairness target"):
        FairnessCallbackHandler(group_key="gender")
    with pytest.raises(TypeError, match="group_key"):
        FairnessCallbackHandler(protected="female")
    with pytest.raises(ValueError, match="does not exist"):
        handler_for(path=tmp_path / "missing" / "log.jsonl")


def test_handler_audits_with_the_exposure_model_it_is_given(retriever):
    handler = handler_for(exposure="uniform")
    retriever.invoke("q", config=config(handler))
    (record,) = handler.records
    groups = record["groups"]
    assert record["exposure_share"] == pytest.approx(groups.count("female") / len(groups))
