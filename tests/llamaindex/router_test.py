"""A ``RouterQueryEngine`` over engines with the fair postprocessor, with LlamaIndex's real
selectors: the record names the LLM that answered (not the router's selector, which starts
first) and lists a document once when several selected engines showed it (their responses'
source nodes are concatenated)."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.query_engine import RetrieverQueryEngine, RouterQueryEngine
from llama_index.core.selectors import LLMMultiSelector, LLMSingleSelector
from llama_index.core.tools import QueryEngineTool

from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.llamaindex.pools import PoolRetriever, make_pool


class Selector(CustomLLM):
    """Picks engines (the first, or both) and sums up their answers (a test double)."""

    both: bool = False

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="router-selector")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if "choice" in prompt.lower():
            first = '{"choice": 1, "reason": "a"}'
            picked = f'[{first}, {{"choice": 2, "reason": "b"}}]' if self.both else f"[{first}]"
            return CompletionResponse(text=picked)
        cited = [line for line in prompt.splitlines() if "DocTitle" in line]
        return CompletionResponse(text="\n".join(cited))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        raise NotImplementedError


def _router(both: bool) -> tuple[RouterQueryEngine, FairRerankPostprocessor]:
    fair = FairRerankPostprocessor(
        relevance="similarity", group_key="gender", protected="female", top_n=4, seed=3
    )
    pool = make_pool(20, seed=5)
    tools = [
        QueryEngineTool.from_defaults(
            RetrieverQueryEngine.from_args(
                PoolRetriever(pool),
                llm=CitingMockLLM(),
                node_postprocessors=[fair],
                text_qa_template=PAPER_QA_TEMPLATE,
            ),
            name=name,
            description=f"biographies {name}",
        )
        for name in ("a", "b")
    ]
    selector = Selector(both=both)
    kind = LLMMultiSelector if both else LLMSingleSelector
    router = RouterQueryEngine(
        selector=kind.from_defaults(llm=selector), query_engine_tools=tools, llm=selector
    )
    return router, fair


def test_the_record_names_the_llm_that_answered_not_the_routers_selector():
    router, fair = _router(both=False)
    with FairnessEventHandler.from_postprocessor(fair) as handler:
        router.query("Who were pioneers?")
    (record,) = handler.records
    assert record["model"] == "citing-mock"  # was "router-selector", the first LLM to start
    assert record["k"] == 4 and len(record["doc_ids"]) == 4


def test_a_document_several_selected_engines_showed_is_listed_once():
    router, fair = _router(both=True)
    with FairnessEventHandler.from_postprocessor(fair) as handler:
        response = router.query("Who were pioneers?")
    (record,) = handler.records
    assert len(response.source_nodes) == 8  # LlamaIndex concatenates the two engines' nodes
    assert len(record["doc_ids"]) == len(set(record["doc_ids"])) == 4  # was 8, each twice
    assert len(record["framework"]["searches"]) == 2


def test_an_evaluator_after_the_answer_is_not_the_answers_model():
    """A ``RetryQueryEngine`` runs its evaluator's LLM (a judge) after the answering one: the
    last LLM to start was recorded as the model."""
    from llama_index.core.evaluation import RelevancyEvaluator
    from llama_index.core.query_engine import RetryQueryEngine

    class Judge(Selector):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="judge")

        @llm_completion_callback()
        def complete(
            self, prompt: str, formatted: bool = False, **kwargs: Any
        ) -> CompletionResponse:
            return CompletionResponse(text="YES")

    fair = FairRerankPostprocessor(
        relevance="similarity", group_key="gender", protected="female", top_n=4, seed=3
    )
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(20, seed=5)),
        llm=CitingMockLLM(),
        node_postprocessors=[fair],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    with FairnessEventHandler.from_postprocessor(fair) as handler:
        RetryQueryEngine(engine, RelevancyEvaluator(llm=Judge())).query("Who were pioneers?")
    (record,) = handler.records
    assert record["model"] == "citing-mock"
