"""CitationQueryEngine's "Source n" chunks are taken back to the documents the fair re-ranking
placed (docs/SPEC.md, "Records" → chunks): exposure and attribution count documents, ``k`` is
the number of documents shown, and a ``[n]`` citing a chunk cites its document."""

from __future__ import annotations

import re
from typing import Any

from llama_index.core.base.llms.types import CompletionResponse
from llama_index.core.query_engine import CitationQueryEngine, RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore

from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex import query_seed as seeded
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.llamaindex.pools import PoolRetriever, make_pool


def long_pool() -> list[NodeWithScore]:
    """The test pool with texts long enough to be split into one to several chunks."""
    pool = []
    for i, item in enumerate(make_pool(50)):
        words = " ".join(f"fact{j}" for j in range(20 + 60 * (i % 3)))
        node = item.node.model_copy(update={"text": f"{item.node.text} {words}"})
        pool.append(NodeWithScore(node=node, score=item.score))
    return pool


class ChunkCitingLLM(CitingMockLLM):
    """Cites every "Source n" of its context by number, as CitationQueryEngine asks."""

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        sources = re.findall(r"^Source (\d+):", prompt, flags=re.M)
        return CompletionResponse(text="\n".join(f"- A fact [{n}]" for n in sources))


def fair() -> FairRerankPostprocessor:
    return FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", seed=0
    )


def record_of(engine) -> tuple[dict, Any]:
    handler = FairnessEventHandler(group_key="gender", protected="female")
    with handler, seeded(3):
        response = engine.query("influential people")
    (record,) = handler.records
    return record, response


def citation_engine(llm) -> CitationQueryEngine:
    return CitationQueryEngine(
        retriever=PoolRetriever(long_pool()),
        llm=llm,
        node_postprocessors=[fair()],
        citation_chunk_size=40,
        citation_chunk_overlap=0,
    )


def test_chunks_count_as_the_documents_they_come_from():
    record, response = record_of(citation_engine(CitingMockLLM()))
    plain, _ = record_of(
        RetrieverQueryEngine.from_args(
            PoolRetriever(long_pool()),
            llm=CitingMockLLM(),
            node_postprocessors=[fair()],
            text_qa_template=PAPER_QA_TEMPLATE,
        )
    )
    assert len(response.source_nodes) > 5  # the engine split the five documents
    # today's main: k 5 over 22 entries, one biography in 8 places, exposure 0.588
    assert record["k"] == 5 and len(record["doc_ids"]) == 5
    assert record["doc_ids"] == plain["doc_ids"] and record["titles"] == plain["titles"]
    assert record["exposure_share"] == plain["exposure_share"]
    assert record["dropped_after_ranking"] == 0 and not record["reordered_after_ranking"]


def test_a_chunk_number_cites_its_document():
    record, response = record_of(citation_engine(ChunkCitingLLM()))
    assert record["answer"] == response.response  # the answer as the engine gave it
    bullets = response.response.count("\n") + 1
    assert record["n_attributed_bullets"] == bullets  # every [n] names a shown document
    assert record["k"] == 5 and len(record["doc_ids"]) == 5


class LabelledChunkCitingLLM(CitingMockLLM):
    """Cites each "Source n" as ``[Source n]`` and the first two together as ``[1-2]``, then
    a number of 5,000 digits (``int`` of it raises past 4,300 digits)."""

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        sources = re.findall(r"^Source (\d+):", prompt, flags=re.M)
        lines = [f"- A fact [Source {n}]" for n in sources]
        lines += ["- Two facts [1-2]", "- A fact [" + "9" * 5000 + "]"]
        return CompletionResponse(text="\n".join(lines))


def test_every_cited_form_of_a_chunk_cites_its_document():
    record, response = record_of(citation_engine(LabelledChunkCitingLLM()))
    assert record["answer"] == response.response
    assert "error" not in record  # before: int() of the 5,000 digits raised: no record
    bullets = response.response.count("\n") + 1
    # every [Source n] and the [1-2] name shown documents; the huge number names none
    assert record["n_attributed_bullets"] == bullets - 1
    assert record["k"] == 5 and len(record["doc_ids"]) == 5
