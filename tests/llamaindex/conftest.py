"""Fixtures of the LlamaIndex adapter tests: a real VectorStoreIndex over embedded Chroma.

The index holds 150 real TREC documents (per topic: 10 female + 40 male, the subset's 20%),
embedded once per session with the real all-MiniLM-L6-v2 through
``llama-index-embeddings-huggingface`` pointed at the packaged model folder (nothing is
downloaded), in a cosine Chroma collection created without Chroma's embedding function.
"""

from __future__ import annotations

import os

# The model is a local folder: no library may reach the hub (set before transformers loads).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest

from fairrag_llamaindex import FairnessEventHandler

PER_TOPIC = {"female": 10, "male": 40}
COLLECTION = "llamaindex-trec-subset"


def _refuse_onnx(*args, **kwargs):
    raise AssertionError("Chroma's default ONNX embedding function must never run")


def guard_chroma_onnx(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make Chroma's default embedding function fail loudly instead of downloading a model."""
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    monkeypatch.setattr(ONNXMiniLM_L6_V2, "__call__", _refuse_onnx)


@pytest.fixture(autouse=True)
def _no_chroma_onnx(monkeypatch):
    guard_chroma_onnx(monkeypatch)


@pytest.fixture(scope="session")
def li_documents(subset_documents):
    """150 of the session's TREC documents: per topic, the first 10 female and 40 male."""
    from tests.chroma_pool import SUBSET_TOPICS

    taken: set[str] = set()
    chosen = []
    for topic in SUBSET_TOPICS:
        for gender, count in PER_TOPIC.items():
            block = [
                d
                for d in subset_documents
                if topic in d.topics and d.gender == gender and d.doc_id not in taken
            ][:count]
            chosen.extend(block)
            taken.update(d.doc_id for d in block)
    return chosen


@pytest.fixture(scope="session")
def li_embed_model():
    """all-MiniLM-L6-v2 through llama-index-embeddings-huggingface, from the packaged folder."""
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    from fairrag_study.embedding import resolve_model_path

    path = resolve_model_path()
    assert os.path.isdir(path), f"the packaged model folder is missing: {path}"
    return HuggingFaceEmbedding(model_name=path, device="cpu")


@pytest.fixture(scope="session")
def li_collection(chroma_client):
    from fairrag_study.index import open_collection

    return open_collection(chroma_client, COLLECTION)


@pytest.fixture(scope="session")
def li_index(li_collection, li_documents, li_embed_model):
    """A VectorStoreIndex over ChromaVectorStore holding ``li_documents`` (built once)."""
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.schema import TextNode
    from llama_index.vector_stores.chroma import ChromaVectorStore

    metadata_keys = list(li_documents[0].metadata())
    nodes = [
        TextNode(
            id_=doc.doc_id,
            text=doc.page_content,
            metadata=doc.metadata(),
            # Embed and show the study's text only ("Title: ...\n<first sentence>").
            excluded_embed_metadata_keys=metadata_keys,
            excluded_llm_metadata_keys=metadata_keys,
        )
        for doc in li_documents
    ]
    store = ChromaVectorStore(chroma_collection=li_collection)
    with pytest.MonkeyPatch.context() as patch:
        guard_chroma_onnx(patch)
        return VectorStoreIndex(
            nodes,
            storage_context=StorageContext.from_defaults(vector_store=store),
            embed_model=li_embed_model,
        )


@pytest.fixture
def fairness_handler(tmp_path):
    """A FairnessEventHandler attached to the root dispatcher for one test, logging to a file."""
    handler = FairnessEventHandler(
        group_key="gender", protected="female", log_path=str(tmp_path / "fairness.jsonl")
    )
    with handler.attach():
        yield handler
