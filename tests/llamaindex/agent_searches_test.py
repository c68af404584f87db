"""A LlamaIndex agent that searches twice (docs/SPEC.md "Records" → LlamaIndex Workflows): the real
``ReActAgent`` (``llama_index.core.agent.workflow``) calling a ``QueryEngineTool`` over a query
engine with the fair postprocessor, or a ``RetrieverTool`` with it, with a fake ReAct LLM named
as such. The record is of the final answer against both searches' documents, each search's list
in ``framework.searches``, as LangChain's agents' are. Failed before this change: the record
held the last search's list only, so half of the answer's citations counted invalid."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from llama_index.core.agent.workflow import ReActAgent
from llama_index.core.base.llms.types import LLMMetadata
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore
from llama_index.core.tools import QueryEngineTool, RetrieverTool

from fairrag_llamaindex import FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.llamaindex.pools import PoolRetriever, make_pool
from tests.llamaindex.replying_llm import ReplyingMockLLM

QUERIES = ("pioneers of medicine", "women in medicine")
_BULLET = re.compile(r"- [^\n]*? \(DocTitle: ([^\n]+?)\)")
"""A citation bullet, wherever its line starts (ReAct writes ``Observation: - ...``)."""
_SHOWN = re.compile(r"\(DocTitle: ([^\n]+?)\)|(?<!Doc)Title: ([^\n]+)")
"""A title an observation shows: cited by the query engine's answer, or a node's own line."""


class FakeReActLLM(ReplyingMockLLM):
    """A test double of a ReAct model: one ``people`` tool call per entry of ``QUERIES``,
    then an answer citing every title its observations showed, in the paper's format."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="fake-react")

    def reply(self, prompt: str) -> str:
        conversation = prompt.split("## Current Conversation")[-1]
        done = conversation.count("Observation:")
        if done < len(QUERIES):
            return (
                "Thought: I need to search.\nAction: people\n"
                f'Action Input: {{"input": "{QUERIES[done]}"}}'
            )
        seen = conversation.split("Observation:", 1)[1]
        titles = dict.fromkeys(m.group(1) or m.group(2) for m in _SHOWN.finditer(seen))
        bullets = [f"- {title} (DocTitle: {title})" for title in titles]
        return "Thought: I can answer without using any more tools.\nAnswer: " + "\n".join(bullets)


def _fair_and_two_pools() -> tuple[FairRerankPostprocessor, PoolRetriever]:
    """The fair postprocessor (top 3) and a retriever with one pool per entry of ``QUERIES``
    (a RetrieverTool searches for "input is <query>": each search's pool by its query)."""
    fair = FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0, top_n=3
    )
    pools = {q: make_pool(30, prefix=f"s{i}") for i, q in enumerate(QUERIES)}
    retriever = PoolRetriever(
        make_pool(30), pool_for=lambda q: pools[next(k for k in QUERIES if k in q)]
    )
    return fair, retriever


async def _asked(
    tool: Any, llm: Any, fair: FairRerankPostprocessor
) -> tuple[Any, FairnessEventHandler]:
    """A real ``ReActAgent`` with ``tool`` and ``llm`` (a test double) asked once, recorded by
    a handler following ``fair``: its output and the handler."""
    agent = ReActAgent(tools=[tool], llm=llm, streaming=False)
    recorder = FairnessEventHandler.from_postprocessor(fair)
    with recorder:
        output = await agent.run(user_msg="Who are role models in medicine?")
    return output, recorder


@pytest.mark.parametrize("kind", ["QueryEngineTool", "RetrieverTool"])
async def test_an_agent_that_searches_twice_is_recorded_against_both_searches(kind):
    fair, retriever = _fair_and_two_pools()
    if kind == "QueryEngineTool":
        engine = RetrieverQueryEngine.from_args(
            retriever, llm=CitingMockLLM(), node_postprocessors=[fair]
        )
        tool: Any = QueryEngineTool.from_defaults(engine, name="people", description="People.")
    else:
        tool = RetrieverTool.from_defaults(
            retriever, name="people", description="People.", node_postprocessors=[fair]
        )
    output, recorder = await _asked(tool, FakeReActLLM(), fair)
    searched = [
        [n.node.metadata["title"] for n in getattr(raw, "source_nodes", raw)]
        for raw in (call.tool_output.raw_output for call in output.tool_calls)
    ]
    assert len(searched) == 2 and not set(searched[0]) & set(searched[1])
    (record,) = recorder.records
    assert record["titles"] == searched[0] + searched[1]
    cited = _BULLET.findall(str(output.response.content))
    assert sorted(cited) == sorted(record["titles"])
    assert record["n_valid_citations"] == len(cited) == 6 and record["groundedness"] == 1.0
    female = sum(g == "female" for g in record["groups"])
    assert record["generation_parity"] == female / 6
    assert record["merged_rankings"] == 2 and record["ranker"] == "representative_stochastic"
    searches = record["framework"]["searches"]
    assert all(q in s["query"] for q, s in zip(QUERIES, searches, strict=True))
    assert [s["titles"] for s in searches] == searched


_LABELLED = re.compile(r"\[(\d+)\]\s*Title: ([^\n]+)")
"""An entry of an observation: its ``[n]`` label (each search numbered from 1) and title."""


class FakeNumberCitingReActLLM(FakeReActLLM):
    """A test double of a ReAct model that cites as a model reading the observations does:
    ``- <title> [n]``, ``n`` the label the entry had in its own search's observation, then one
    line naming no one (``- A pioneer of medicine [1]``)."""

    def reply(self, prompt: str) -> str:
        conversation = prompt.split("## Current Conversation")[-1]
        if conversation.count("Observation:") < len(QUERIES):
            return super().reply(prompt)
        seen = conversation.split("Observation:", 1)[1]
        bullets = [f"- {title} [{n}]" for n, title in _LABELLED.findall(seen)]
        bullets.append("- A pioneer of medicine [1]")
        return "Thought: I can answer without using any more tools.\nAnswer: " + "\n".join(bullets)


async def test_an_agents_entry_numbers_cite_the_search_whose_entry_the_line_names():
    """Each search's entries are numbered from ``[1]`` (the postprocessor's context header):
    ``[1]`` after two searches names two documents. A line naming one of them cites it; a line
    naming neither cites no one (a reader cannot tell which search it means). Before, ``[1]``
    was read as the first search's first document: the second search's three lines counted
    mis-citations and the nameless line was credited to a document it may not mean."""
    fair, retriever = _fair_and_two_pools()
    tool = RetrieverTool.from_defaults(
        retriever, name="people", description="People.", node_postprocessors=[fair]
    )
    output, recorder = await _asked(tool, FakeNumberCitingReActLLM(), fair)
    answer = str(output.response.content)
    assert answer.count("[1]") == 3  # the first entry of each search, and the nameless line
    (record,) = recorder.records
    assert len(record["titles"]) == 6
    sources = record["attributed_sources"]
    assert sorted(s["title"] for s in sources) == sorted(record["titles"])
    assert {(s["style"], s["provenance"]) for s in sources} == {("numbered", "explicit")}
    assert record["miscitations"] == []
    assert record["attributed_citation_precision"] == 1.0
    # six of seven lines attributed, each explicitly; the nameless one is not
    assert record["attributed_groundedness"] == pytest.approx(6 / 7)
    assert record["attributed_groundedness_explicit"] == pytest.approx(6 / 7)
    female = sum(g == "female" for g in record["groups"])
    assert record["attributed_generation_parity"] == pytest.approx(female / 6)


def _overlapping_searches() -> tuple[FairRerankPostprocessor, RetrieverTool, list[NodeWithScore]]:
    """The fair postprocessor (top 3), a ``RetrieverTool`` whose two searches (one per entry of
    ``QUERIES``) show three nodes each, the second finding the first's top node again below
    two of its own (labelled ``[1]`` in the first search, ``[3]`` in the second), and the
    first search's pool."""
    fair = FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0, top_n=3
    )
    first = make_pool(3, prefix="s0")
    second = [*make_pool(3, prefix="s1")[:2], NodeWithScore(node=first[0].node, score=0.1)]
    pools = dict(zip(QUERIES, (first, second), strict=True))
    retriever = PoolRetriever(first, pool_for=lambda q: pools[next(k for k in QUERIES if k in q)])
    tool = RetrieverTool.from_defaults(
        retriever, name="people", description="People.", node_postprocessors=[fair]
    )
    return fair, tool, first


async def test_a_node_both_searches_showed_is_cited_by_either_label():
    """A node the second search found too is kept once, at its first place, but the model saw
    it under each search's own ``[n]``: a line naming it cites it by either. Before, it kept its
    first label only, so the line citing it by the second search's label counted a mis-citation
    of the first search's entry under that number (a review's finding)."""
    fair, tool, first = _overlapping_searches()
    output, recorder = await _asked(tool, FakeNumberCitingReActLLM(), fair)
    shown = [
        {n.node.metadata["title"]: n.node.metadata["context_header"][:3] for n in raw}
        for raw in (call.tool_output.raw_output for call in output.tool_calls)
    ]
    again = first[0].node.metadata["title"]
    assert again in shown[0] and again in shown[1]
    labels = (shown[0][again], shown[1][again])
    assert labels == ("[1]", "[3]")
    answer = str(output.response.content)
    assert all(f"- {again} {label}" in answer for label in labels)
    (record,) = recorder.records
    assert len(record["titles"]) == 5 and record["titles"].count(again) == 1
    assert record["miscitations"] == []
    by_line = {s["line_number"]: s["title"] for s in record["attributed_sources"]}
    lines = answer.splitlines()
    assert {lines[n - 1] for n, title in by_line.items() if title == again} == {
        f"- {again} [1]",
        f"- {again} [3]",
    }
    assert {s["style"] for s in record["attributed_sources"]} == {"numbered"}
    assert set(by_line.values()) == set(record["titles"])
    assert record["attributed_citation_precision"] == 1.0
    # [1] and [3] are each carried by two documents: the nameless "[1]" line cites no one
    assert len(by_line) == 6 and len(lines) not in by_line
    assert record["attributed_groundedness"] == pytest.approx(6 / 7)


class FakeJsonCitingReActLLM(FakeReActLLM):
    """A test double of a ReAct model answering in JSON, as LangChain's citation how-to
    writes: one citation per entry of each observation, its ``source_id`` the label the entry
    had there and its ``person`` the entry's title, then one citation with an id alone."""

    def reply(self, prompt: str) -> str:
        conversation = prompt.split("## Current Conversation")[-1]
        if conversation.count("Observation:") < len(QUERIES):
            return super().reply(prompt)
        seen = conversation.split("Observation:", 1)[1]
        citations = [{"source_id": int(n), "person": t} for n, t in _LABELLED.findall(seen)]
        citations.append({"source_id": 1})
        answer = json.dumps({"answer": "Role models in medicine.", "citations": citations})
        return "Thought: I can answer without using any more tools.\nAnswer: " + answer


async def test_a_structured_answers_source_id_two_documents_carry_is_read_by_its_person():
    """Source ids read the labels the model saw, as ``[n]`` in text does: an id two shown
    documents carry (each search numbered from ``[1]``, a node both searches showed under
    each) cites the one its citation's person names; an id with no person cites no one.
    Before, an id was always its first carrier: the second search's citations counted
    mis-citations and the id alone was credited to the first search's first document."""
    fair, tool, _ = _overlapping_searches()
    _, recorder = await _asked(tool, FakeJsonCitingReActLLM(), fair)
    (record,) = recorder.records
    assert record["framework"]["answer_format"] == "json"
    assert len(record["titles"]) == 5 and record["miscitations"] == []
    credited = [s["title"] for s in record["attributed_sources"]]
    # six citations, each of the person it names (s0 Person 0 twice: [1] and [3]); the id alone
    # is carried by two documents and cites no one
    assert sorted(credited) == sorted([*record["titles"], "s0 Person 0"])
    assert record["attributed_citation_precision"] == 1.0
    assert record["n_citations"] == 7 and record["n_valid_citations"] == 6
