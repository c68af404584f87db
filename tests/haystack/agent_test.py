"""What a Haystack Agent's LLM is shown of the component's Documents (docs/SPEC.md, "Adapters" →
Context text): the guide's wiring, a retrieval pipeline with FairDocumentRanker as the Agent's
tool, with ``context_text`` as the tool's ``outputs_to_string`` handler. Real ``Agent``,
``ComponentTool``/``PipelineTool`` and ``SuperComponent``; the chat generator is Haystack's
``MockChatGenerator`` with a reply function that keeps every message list the "LLM" receives.

A user trial (2026): through ComponentTool's default string conversion the LLM read each
Document's whole ``meta`` as JSON, ``"gender": "female"``, ``fair_rank``, ``query_seed``...
"""

from __future__ import annotations

import pytest
from haystack import Document, Pipeline, SuperComponent
from haystack.components.agents import Agent
from haystack.components.generators.chat import MockChatGenerator
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.dataclasses import ChatMessage, ToolCall
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.tools import ComponentTool, PipelineTool

from fairrag_core.kit import LEDGER_PLACEMENT_KEYS, PLACEMENT_KEYS, context_entry
from fairrag_haystack import FairDocumentRanker, context_text
from fairrag_haystack.context import NO_DOCUMENTS
from tests.haystack.component_test import QUERY, biographies


def search_pipeline(**fields) -> Pipeline:
    store = InMemoryDocumentStore()
    store.write_documents(biographies())
    built = Pipeline()
    built.add_component("retriever", InMemoryBM25Retriever(store, top_k=30))
    fields = {"protected": "female", "top_k": 4, "seed": 11, **fields}
    built.add_component("fair", FairDocumentRanker(group_key="gender", **fields))
    built.connect("retriever.documents", "fair.documents")
    return built


def guide_tool(kind: str, built: Pipeline):
    """The guide's agent recipe: the search pipeline as a tool whose result is the context text."""
    mapping = {"input_mapping": {"query": ["retriever.query", "fair.query"]}}
    mapping["output_mapping"] = {"fair.documents": "documents"}
    shown = {"source": "documents", "handler": context_text}
    if kind == "component":
        return ComponentTool(
            component=SuperComponent(built, **mapping),
            name="search",
            description="Search biographies",
            outputs_to_string=shown,
        )
    return PipelineTool(
        built, name="search", description="Search biographies", outputs_to_string=shown, **mapping
    )


def run_agent(tool) -> tuple[list[list[ChatMessage]], dict]:
    """An Agent that searches once, then answers; every message list its LLM received."""
    seen: list[list[ChatMessage]] = []

    def reply(messages: list[ChatMessage]) -> ChatMessage:
        seen.append(list(messages))
        if not any(m.tool_call_result for m in messages):
            return ChatMessage.from_assistant(
                tool_calls=[ToolCall(tool_name="search", arguments={"query": QUERY})]
            )
        return ChatMessage.from_assistant("- Person 0 [1]")

    agent = Agent(chat_generator=MockChatGenerator(response_fn=reply), tools=[tool])
    out = agent.run(messages=[ChatMessage.from_user("Who pioneered computing?")])
    return seen, out


@pytest.mark.parametrize("kind", ["component", "pipeline"])
def test_an_agents_llm_reads_the_context_text_and_no_group_or_placement_field(kind):
    built = search_pipeline()
    seen, out = run_agent(guide_tool(kind, built))
    assert out["last_message"].text == "- Person 0 [1]"
    results = [m.tool_call_result.result for m in seen[-1] if m.tool_call_result]
    assert len(results) == 1
    shown_to_llm = results[0]
    fair = built.get_component("fair")
    (record,) = fair.records
    placed = [d for d in biographies() if d.id in record["doc_ids"]]
    placed.sort(key=lambda d: record["doc_ids"].index(d.id))
    expected = "\n\n".join(
        context_entry(rank, d.meta["title"], d.content) for rank, d in enumerate(placed, 1)
    )
    assert shown_to_llm == expected  # [1] / Title: Person i / text, in the fair order
    assert shown_to_llm.startswith(f"[1]\nTitle: {record['titles'][0]}\n")
    for hidden in ("gender", "female", "male", *PLACEMENT_KEYS, *LEDGER_PLACEMENT_KEYS):
        assert hidden not in shown_to_llm, hidden
    assert str(record["query_seed"]) not in shown_to_llm


def test_the_amortized_rankers_ledger_state_is_not_shown_either():
    seen, _ = run_agent(guide_tool("component", search_pipeline(ranker="amortized")))
    (shown_to_llm,) = [m.tool_call_result.result for m in seen[-1] if m.tool_call_result]
    assert shown_to_llm.startswith("[1]\nTitle: ")
    for hidden in ("gender", "female", *PLACEMENT_KEYS, *LEDGER_PLACEMENT_KEYS):
        assert hidden not in shown_to_llm, hidden


def test_the_tool_saves_and_loads_with_its_handler(monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "fairrag_haystack")
    tool = guide_tool("component", search_pipeline())
    saved = tool.to_dict()
    assert saved["data"]["outputs_to_string"]["handler"] == "fairrag_haystack.context.context_text"
    loaded = ComponentTool.from_dict(saved)
    assert loaded.outputs_to_string["handler"] is context_text


def test_context_text_takes_a_list_or_a_whole_output_and_shows_only_opted_in_fields():
    documents = [
        Document(id="a", content="Ada wrote the first program.", meta={"title": "Ada", "g": "f"}),
        Document(id="b", content="Title: Alan\nAlan built a machine.", meta={"g": "m"}),
        Document(id="c", content=None, meta={"g": "m"}),  # no text, no title
    ]
    text = context_text(documents)
    assert text == (
        "[1]\nTitle: Ada\nAda wrote the first program.\n\n"
        "[2]\nTitle: Alan\nAlan built a machine.\n\n"
        "[3]\n"
    )
    assert context_text({"documents": documents, "record": {"g": 1}}) == text
    assert context_text(documents[0]) == "[1]\nTitle: Ada\nAda wrote the first program."
    assert context_text(documents[:1], show_metadata_keys=["g"]) == (
        "[1]\nTitle: Ada\ng: f\nAda wrote the first program."
    )
    assert context_text([]) == NO_DOCUMENTS
    with pytest.raises(TypeError, match="'documents'"):
        context_text({"replies": ["x"]})
    with pytest.raises(TypeError, match="got a str among them"):
        context_text(["text"])


def test_parallel_tool_calls_draw_query_seeds_in_the_models_order_with_one_worker():
    """A user trial: an Agent's parallel tool calls (threads) drew the component's query seeds
    in whichever order they ranked, so a seeded run did not repeat; the guide's recipe,
    ``tool_concurrency_limit=1``, ranks them in the order the model asked. Retrieval takes a
    varying time here, as a real store's does."""
    import random
    import time

    queries = ["computing", "physics", "medicine", "music"]

    def reply(messages: list[ChatMessage]) -> ChatMessage:
        if not any(m.tool_call_result for m in messages):
            calls = [ToolCall(tool_name="search", arguments={"query": q}) for q in queries]
            return ChatMessage.from_assistant(tool_calls=calls)
        return ChatMessage.from_assistant("- Person 0 [1]")

    def conversation(jitter: random.Random) -> list[tuple[str, int]]:
        built = search_pipeline()
        fair = built.get_component("fair")
        ranked = fair.run

        def slow_run(*args, **kwargs):
            time.sleep(jitter.random() * 0.02)  # a store's latency, varying call to call
            return ranked(*args, **kwargs)

        fair.run = slow_run  # the component's own run, after a varying wait
        agent = Agent(
            chat_generator=MockChatGenerator(response_fn=reply),
            tools=[guide_tool("component", built)],
            tool_concurrency_limit=1,
        )
        agent.run(messages=[ChatMessage.from_user("Who are notable people?")])
        return [(r["query"], r["query_seed"]) for r in fair.records]

    first = conversation(random.Random(1))
    assert [query for query, _ in first] == queries  # ranked in the order asked
    assert all(conversation(random.Random(seed)) == first for seed in (2, 3))
