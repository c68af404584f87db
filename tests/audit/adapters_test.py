"""Logs written by the real adapters (with the fake generators) and the study's record shape,
audited together: the audit's numbers equal the ones the handlers logged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.query_engine import RetrieverQueryEngine

from fairrag_audit import audit
from fairrag_core import JsonLinesLog
from fairrag_langchain import FairnessCallbackHandler, FairRetriever, make_fair_rag_chain
from fairrag_langchain.fakes import FakeCitingChatModel
from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex.fakes import CitingMockLLM
from fairrag_study.phases.trials import trial_record as _trial_record
from fairrag_study.plan import Trial
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool
from tests.llamaindex.pools import PoolRetriever, make_pool

QUESTIONS = [f"Who are role models in field {i}?" for i in range(6)]


def langchain_log(path: Path) -> list[dict]:
    handler = FairnessCallbackHandler(group_key="gender", protected="female", path=path)
    store = FixedPoolStore(*imbalanced_pool())
    for ranker in ("standard", "representative_stochastic"):
        retriever = FairRetriever(
            vectorstore=store, ranker=ranker, group_key="gender", protected="female", seed=0
        )
        chain = make_fair_rag_chain(retriever, FakeCitingChatModel())
        for i, question in enumerate(QUESTIONS):
            tenant = "acme" if i % 2 else "globex"
            chain.invoke(question, config={"callbacks": [handler], "metadata": {"tenant": tenant}})
    return handler.records


def llamaindex_log(path: Path) -> list[dict]:
    postprocessor = FairRerankPostprocessor(group_key="gender", protected="female", seed=0)
    handler = FairnessEventHandler.from_postprocessor(postprocessor, log_path=str(path))
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(50)),
        llm=CitingMockLLM(),
        node_postprocessors=[postprocessor],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    with handler:
        for question in QUESTIONS:
            engine.query(question)
    return handler.records


def study_log(path: Path, langchain_records: list[dict]) -> list[dict]:
    """records.jsonl as the study writes it (its own record builder), topic per trial."""
    log = JsonLinesLog(path)
    records = []
    for index, logged in enumerate(langchain_records):
        topic = ("Computing", "Medicine")[index % 2]
        trial = Trial(index, 1, topic, logged["query"], seed=index)
        study_record = _trial_record(logged, logged["ranker"], trial, [], {topic: 10}, 5)
        log.append(study_record)
        records.append(study_record)
    return records


def test_both_adapters_and_the_study_audited_together(tmp_path: Path) -> None:
    lc = langchain_log(tmp_path / "langchain.jsonl")
    li = llamaindex_log(tmp_path / "llamaindex.jsonl")
    # the study's records of its own runs (a study's records.jsonl holds the runs its
    # callback_log.jsonl holds: audited together they are one log given twice, refused)
    (tmp_path / "mirrored").mkdir()
    mirrored = study_log(tmp_path / "mirrored" / "records.jsonl", lc)
    with pytest.raises(ValueError, match="holds the same log as"):
        audit(
            [tmp_path / "langchain.jsonl", tmp_path / "mirrored" / "records.jsonl"],
            protected="female",
        )
    assert len(mirrored) == len(lc)
    st = study_log(tmp_path / "records.jsonl", langchain_log(tmp_path / "study_runs.jsonl"))
    paths = [
        tmp_path / "langchain.jsonl",
        tmp_path / "llamaindex.jsonl",
        tmp_path / "records.jsonl",
    ]
    result = audit(paths, protected="female", by="topic")

    reading = result.reading.set_index("file")
    assert list(reading["used"]) == [len(lc), len(li), len(st)]
    assert list(reading["damaged"]) == [0, 0, 0]
    assert list(reading["sources"]) == ["langchain", "llamaindex", "study"]

    logged = [json.loads(line) for p in paths for line in p.read_text().splitlines()]
    for ranker in ("standard", "representative_stochastic"):
        mine = [r for r in logged if r["ranker"] == ranker]
        rows = result.rankers[result.rankers["ranker"] == ranker].set_index("metric")
        # equal k: the amortized share is the mean of the logged shares
        expected = np.mean([r["exposure_share"] for r in mine])
        assert rows.loc["exposure_share", "value"] == pytest.approx(expected)
        assert rows.loc["exposure_disparity", "value"] == pytest.approx(
            np.mean([r["exposure_disparity"] for r in mine])
        )
        parities = [r["generation_parity"] for r in mine if r.get("generation_parity") is not None]
        assert rows.loc["generation_parity", "value"] == pytest.approx(np.mean(parities))
        assert rows.loc["groundedness", "value"] == pytest.approx(
            np.mean([r["groundedness"] for r in mine])
        )
    topics = set(result.metrics["topic"])
    assert topics == {"Computing", "Medicine", "(missing)"}  # adapters' records have no topic
    pairs = result.pairwise[result.pairwise["metric"] == "exposure_share"]
    assert {(r["a"], r["b"]) for r in pairs.to_dict("records")} == {
        ("representative_stochastic", "standard")
    }
    by_source = audit(paths, protected="female", by="source").metrics
    assert set(by_source["source"]) == {"langchain", "llamaindex", "study"}
    # the record schema: timestamps (time windows), grounded parity, the tenant in metadata
    for ranker in ("standard", "representative_stochastic"):
        mine = [r for r in logged if r["ranker"] == ranker]
        rows = result.rankers[result.rankers["ranker"] == ranker].set_index("metric")
        grounded = [r["grounded_generation_parity"] for r in mine]
        grounded = [g for g in grounded if g is not None]
        assert rows.loc["grounded_generation_parity", "n"] == len(grounded)
        assert rows.loc["grounded_generation_parity", "value"] == pytest.approx(np.mean(grounded))
    windowed = audit(paths, protected="female", by="tenant", window="1h")
    share = windowed.metrics[windowed.metrics["metric"] == "exposure_share"]
    undated = share[share["window"] == "(no timestamp)"]["records"].sum()
    assert undated == sum(not r.get("timestamp") for r in logged)  # adapters still without it
    assert share[share["window"] != "(no timestamp)"]["records"].sum() == sum(
        bool(r.get("timestamp")) for r in logged
    )
    tenants = {t: share[share["tenant"] == t]["records"].sum() for t in ("acme", "globex")}
    assert tenants == {
        t: sum((r.get("metadata") or {}).get("tenant") == t for r in logged) for t in tenants
    }
