"""SubQuestionQueryEngine's synthetic "Sub question / Response" nodes are no documents
(docs/SPEC.md, "Records" → sub-questions): kept out of exposure, each sub-question's fair list
recorded under ``framework["sub_questions"]``, linked to the final answer's record."""

from __future__ import annotations

import json
from typing import Any

import pytest
from llama_index.core.base.llms.types import CompletionResponse
from llama_index.core.query_engine import RetrieverQueryEngine, SubQuestionQueryEngine
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.tools import QueryEngineTool, ToolMetadata
from pydantic import Field

from fairrag_core import FairnessAuditor
from fairrag_core.kit import SEARCH_FIELDS
from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex import query_seed as seeded
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.llamaindex.pools import PoolRetriever, make_pool

SUB_QUESTIONS = ["Who are pioneers of medicine?", "Who are pioneers of surgery?"]


class PlanningLLM(CitingMockLLM):
    """Plans two sub-questions when asked to (the question generator's prompt), else cites."""

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if "sub_question" in prompt and "tool_name" in prompt:
            items = [{"sub_question": q, "tool_name": "people"} for q in SUB_QUESTIONS]
            return CompletionResponse(text=f"```json\n{json.dumps(items)}\n```")
        return super().complete(prompt, formatted, **kwargs)

    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        return self.complete(prompt, formatted, **kwargs)


def sub_question_engine(
    llm: PlanningLLM, fair: FairRerankPostprocessor, retriever: PoolRetriever, use_async: bool
) -> SubQuestionQueryEngine:
    """A SubQuestionQueryEngine over one ``people`` tool: a RetrieverQueryEngine over
    ``retriever`` with ``fair`` after it, the paper's prompt."""
    people = RetrieverQueryEngine.from_args(
        retriever, llm=llm, node_postprocessors=[fair], text_qa_template=PAPER_QA_TEMPLATE
    )
    tool = QueryEngineTool(people, ToolMetadata(name="people", description="biographies"))
    return SubQuestionQueryEngine.from_defaults(
        query_engine_tools=[tool],
        question_gen=LLMQuestionGenerator.from_defaults(llm=llm),
        llm=llm,
        use_async=use_async,
    )


def test_synthetic_nodes_stay_out_and_each_sub_questions_list_is_recorded():
    llm = PlanningLLM()
    fair = FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0, top_n=6
    )
    retriever = PoolRetriever(pool_for=lambda q: make_pool(50, prefix=q[-8:-1]))
    engine = sub_question_engine(llm, fair, retriever, use_async=False)
    handler = FairnessEventHandler(group_key="gender", protected="female")
    with handler, seeded(5):
        response = engine.query("Who are the pioneers of medicine and surgery?")
    (record,) = handler.records
    synthetic = [n for n in response.source_nodes if not n.node.metadata]
    assert len(synthetic) == 2  # the engine's "Sub question / Response" nodes
    # today's main: the two synthetic nodes are shown documents at ranks 1-2, unknown group
    assert len(record["doc_ids"]) == 12 and None not in record["groups"]
    assert record["answer"] == response.response
    lists = record["framework"]["sub_questions"]
    assert [entry["query"] for entry in lists] == SUB_QUESTIONS
    auditor = FairnessAuditor.create(protected="female")
    for entry in lists:
        # one list's own exposure has one schema in both adapters (LangChain's searches)
        # before: 5 keys, no ranker, k or titles; ``held``: the answer's list holds it
        assert list(entry) == [*SEARCH_FIELDS, "held"] and entry["held"] is True
        assert len(entry["doc_ids"]) == 6 and entry["k"] == 6 and entry["pool_size"] == 50
        assert entry["ranker"] == record["ranker"] and len(entry["titles"]) == 6
        assert entry["exposure_share"] == auditor.retrieval(entry["groups"])["exposure_share"]
    assert record["doc_ids"] == [i for entry in lists for i in entry["doc_ids"]]


async def test_sub_questions_answered_concurrently_are_recorded_in_sub_question_order():
    """``use_async=True`` answers the sub-questions concurrently; the first one's search is the
    slower here, so its ranking ends last. ``framework.sub_questions`` lists them as the
    response does (the sub-questions' order), not as they finished. Found by a user trial;
    failed before the fix: the surgery list came first."""
    llm = PlanningLLM()
    fair = FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0, top_n=3
    )
    retriever = PoolRetriever(
        delays=[0.2, 0.0],  # the first sub-question's search ends last
        pool_for=lambda q: make_pool(20, prefix="med" if "medicine" in q else "sur"),
    )
    engine = sub_question_engine(llm, fair, retriever, use_async=True)
    recorder = FairnessEventHandler.from_postprocessor(fair)
    with recorder:
        response = await engine.aquery("Who are the pioneers of medicine and surgery?")
    (record,) = recorder.records
    lists = record["framework"]["sub_questions"]
    assert [entry["query"] for entry in lists] == SUB_QUESTIONS  # before: surgery first
    shown = [n.node.node_id for n in response.source_nodes if n.node.metadata]
    assert record["doc_ids"] == shown == [i for entry in lists for i in entry["doc_ids"]]


class PlannedLLM(PlanningLLM):
    """Plans the sub-questions ``plan`` holds (``(question, tool)`` pairs), else cites."""

    plan: list[tuple[str, str]] = Field(default_factory=list)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if "sub_question" in prompt and "tool_name" in prompt:
            items = [{"sub_question": q, "tool_name": tool} for q, tool in self.plan]
            return CompletionResponse(text=f"```json\n{json.dumps(items)}\n```")
        return CitingMockLLM.complete(self, prompt, formatted, **kwargs)


@pytest.mark.parametrize(
    ("plan", "delays"),
    [
        ([("Who are the pioneers?", "aa"), ("Who are the pioneers?", "bb")], {"aa": [0.2]}),
        ([("Q one?", "aa"), ("Q two?", "bb"), ("Q one?", "bb")], {"aa": [0.2], "bb": [0.1, 0]}),
    ],
    ids=["one-question-two-tools", "a-question-asked-twice"],
)
async def test_sub_questions_sharing_a_text_keep_the_responses_order(plan, delays):
    """A question asked of two tools (a "compare A and B" plan), or asked twice: the rankings
    of one text keep the response's order, told apart by their documents' places (the text
    alone sent both to its first place: finishing order). Found by a review."""
    llm = PlannedLLM(plan=plan)
    fair = FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0, top_n=3
    )
    tools = []
    for name in ("aa", "bb"):
        retriever = PoolRetriever(
            pool_for=lambda q, name=name: make_pool(20, prefix=name + q[:1]),
            delays=delays.get(name, [0.0]),
        )
        engine = RetrieverQueryEngine.from_args(
            retriever, llm=llm, node_postprocessors=[fair], text_qa_template=PAPER_QA_TEMPLATE
        )
        tools.append(QueryEngineTool(engine, ToolMetadata(name=name, description=name)))
    engine = SubQuestionQueryEngine.from_defaults(
        query_engine_tools=tools,
        question_gen=LLMQuestionGenerator.from_defaults(llm=llm),
        llm=llm,
        use_async=True,
    )
    recorder = FairnessEventHandler.from_postprocessor(fair)
    with recorder:
        response = await engine.aquery("Compare the pioneers in A and B")
    (record,) = recorder.records
    lists = record["framework"]["sub_questions"]
    assert [entry["query"] for entry in lists] == [q for q, _ in plan]
    shown = [n.node.node_id for n in response.source_nodes if n.node.metadata]
    assert shown == [i for entry in lists for i in entry["doc_ids"]]
