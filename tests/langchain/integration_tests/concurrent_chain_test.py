"""The fairness callback handler under 200 concurrent ``ainvoke`` runs of the full chain over the
real Chroma, with a fake chat model that cites from its context."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from fairrag_core.prompts import scenario_question
from fairrag_langchain import FairnessCallbackHandler, FairRetriever, make_fair_rag_chain
from fairrag_langchain.fakes import FakeCitingChatModel

pytestmark = pytest.mark.integration

RUNS = 200


async def test_one_valid_linked_record_per_concurrent_run(trec_store, subset_topics, tmp_path):
    path = tmp_path / "fairness.jsonl"
    handler = FairnessCallbackHandler(group_key="gender", protected="female", path=path)
    retriever = FairRetriever(group_key="gender", vectorstore=trec_store, protected="female")
    chain = make_fair_rag_chain(retriever, FakeCitingChatModel(shuffle=True, max_citations=4))
    questions = [scenario_question(s, t) for t in subset_topics for s in range(1, 5)]
    run_ids = [uuid.uuid4() for _ in range(RUNS)]

    async def run(i: int):
        inputs = {"question": questions[i % len(questions)], "seed": i}
        config = {"callbacks": [handler], "run_id": run_ids[i]}
        return await chain.ainvoke(inputs, config=config)

    outputs = await asyncio.gather(*(run(i) for i in range(RUNS)))

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == RUNS
    records = [json.loads(line) for line in lines]  # every line is valid JSON
    assert len(handler.records) == RUNS
    by_run = {record["run_id"]: record for record in records}
    assert set(by_run) == {str(r) for r in run_ids}  # one record per run, none lost
    retriever_runs = {record["framework"]["retriever_run_id"] for record in records}
    assert len(retriever_runs) == RUNS

    for run_id, output in zip(run_ids, outputs, strict=True):
        record = by_run[str(run_id)]
        # Linked to its own retrieval: the documents, the question and the answer of this run.
        assert record["query"] == output["question"]
        assert record["titles"] == [d.metadata["title"] for d in output["context"]]
        assert record["groups"] == [d.metadata["gender"] for d in output["context"]]
        assert record["answer"] == output["answer"]
        assert record["n_citations"] == record["n_valid_citations"] == 4
        assert {c["title"] for c in record["citations"]} <= set(record["titles"])
        for name in ("exposure_share", "generation_parity", "fairness_gap", "groundedness"):
            assert record[name] == pytest.approx(output["metrics"][name], nan_ok=True)

    summary = handler.summary()
    assert summary["representative_stochastic"]["runs"] == RUNS
    assert abs(summary["representative_stochastic"]["exposure_share"]["mean"] - 0.5) < 0.1
    assert handler._roots == {}  # no state left behind
