"""Runnables with schemas (issue: LangServe and schema-driven tools): the chain's input and
output JSON schemas are complete, and a real input and output validate against them as LangServe
reads them (``input_schema``/``output_schema``); the record's typed schema
(:class:`fairrag_core.kit.record_schema.FairnessRecord`) names exactly docs/SPEC.md's fields."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

from fairrag_core.kit.record_schema import FairnessRecord
from fairrag_langchain import FairRetriever, make_fair_rag_chain
from fairrag_langchain.fakes import FakeCitingChatModel
from tests.llamaindex.pools import make_pool

SPEC = Path(__file__).resolve().parents[1] / "docs" / "SPEC.md"


@pytest.fixture(scope="module")
def chain():
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    nodes = make_pool(20, seed=1)
    store.add_texts(
        [n.node.get_content() for n in nodes],
        metadatas=[dict(n.node.metadata) for n in nodes],
        ids=[n.node.node_id for n in nodes],
    )
    retriever = FairRetriever(vectorstore=store, group_key="gender", protected="female", k=4)
    return make_fair_rag_chain(retriever, FakeCitingChatModel())


def _resolve(schema: dict, node: dict) -> dict:
    ref = node.get("$ref")
    return schema["$defs"][ref.rsplit("/", 1)[1]] if ref else node


def test_the_input_schema_names_the_question(chain):
    schema = chain.get_input_jsonschema()
    question = next(_resolve(schema, option) for option in schema["anyOf"] if "$ref" in option)
    assert question["required"] == ["question"]
    assert {"question", "k", "seed"} <= set(question["properties"])
    assert {"type": "string"} in schema["anyOf"]  # a plain question is an input too
    chain.input_schema.model_validate({"question": "Who?", "k": 3, "seed": 2})
    chain.input_schema.model_validate("Who?")


def test_the_output_schema_types_documents_and_metrics(chain):
    schema = chain.get_output_jsonschema()  # raised PydanticUserError (Document not defined)
    assert set(schema["required"]) >= {"question", "context", "answer", "citations", "metrics"}
    context = schema["properties"]["context"]
    assert _resolve(schema, context["items"])["properties"]["page_content"]["type"] == "string"
    metrics = _resolve(schema, schema["properties"]["metrics"])
    assert {"exposure_share", "exposure_disparity", "groups", "ranker", "query_seed"} <= set(
        metrics["properties"]
    )
    json.dumps(schema)  # what LangServe serves at /output_schema


def test_a_real_output_validates_against_the_output_schema(chain):
    result = chain.invoke({"question": "Who are influential people in this pool?", "seed": 5})
    validated = chain.output_schema.model_validate(result)
    dumped = validated.model_dump(mode="json", by_alias=True)
    assert dumped["metrics"]["exposure_share"] == result["metrics"]["exposure_share"]
    assert dumped["metrics"]["schema"] == 2
    assert len(dumped["context"]) == 4


def _spec_record_fields() -> set[str]:
    text = SPEC.read_text()
    table = text[text.index("| `schema` | record version") :]
    table = table[: table.index("\n\n")]
    fields: set[str] = set()
    for row in table.splitlines():
        first = row.split("|")[1]
        fields |= set(re.findall(r"`([a-z_]+)`", first))
    return fields


def test_the_typed_record_names_exactly_the_specs_fields(chain):
    declared = {f.alias or name for name, f in FairnessRecord.model_fields.items()}
    assert declared == _spec_record_fields()
    result = chain.invoke("Who are influential people in this pool?")
    assert set(result["metrics"]) <= declared  # no field a record writes is undocumented


def test_llamaindex_records_write_no_undocumented_field():
    from llama_index.core.query_engine import RetrieverQueryEngine

    from fairrag_llamaindex import (
        PAPER_QA_TEMPLATE,
        FairnessEventHandler,
        FairRerankPostprocessor,
    )
    from fairrag_llamaindex.fakes import CitingMockLLM
    from tests.llamaindex.pools import PoolRetriever

    postprocessor = FairRerankPostprocessor(
        group_key="gender", protected="female", relevance="similarity", top_n=4
    )
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(make_pool(20, seed=1)),
        llm=CitingMockLLM(),
        node_postprocessors=[postprocessor],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    with FairnessEventHandler.from_postprocessor(postprocessor) as handler:
        engine.query("Who are influential people in this pool?")
    (record,) = handler.records
    declared = {f.alias or name for name, f in FairnessRecord.model_fields.items()}
    assert set(record) <= declared
    FairnessRecord.model_validate(record)
