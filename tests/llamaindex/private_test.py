"""Every LlamaIndex private attribute the adapter reads (``fairrag_llamaindex/_private.py``, the
only module that reads one) is where it expects, on real objects of the supported versions."""

from __future__ import annotations

import uuid
from importlib import metadata

import chromadb
from llama_index.core import VectorStoreIndex
from llama_index.core.chat_engine import CondensePlusContextChatEngine, CondenseQuestionChatEngine
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.vector_stores.chroma import ChromaVectorStore

from fairrag_llamaindex import FairRerankPostprocessor
from fairrag_llamaindex import _private as private
from tests.llamaindex.pools import PoolRetriever, make_pool


def test_the_installed_llamaindex_is_a_supported_version():
    minor = ".".join(metadata.version("llama-index-core").split(".")[:2])
    assert minor in private.SUPPORTED, f"re-check fairrag_llamaindex/_private.py for {minor}"


def test_an_engines_retriever_postprocessors_and_llm_are_read():
    retriever = PoolRetriever(make_pool(10))
    post = FairRerankPostprocessor(group_key="gender", protected="female", relevance="similarity")
    llm = MockLLM()
    engine = RetrieverQueryEngine.from_args(retriever, llm=llm, node_postprocessors=[post])
    assert private.engine_retriever(engine) is retriever
    assert list(private.node_postprocessors(engine)) == [post]
    assert private.engine_llm(engine) is llm
    chat = CondensePlusContextChatEngine.from_defaults(
        retriever=retriever, llm=llm, node_postprocessors=[post]
    )
    assert list(private.node_postprocessors(chat)) == [post]
    assert private.engine_llm(chat) is llm
    condense = CondenseQuestionChatEngine.from_defaults(query_engine=engine, llm=llm)
    assert private.query_engine_of(condense) is engine
    assert private.engine_retriever(post) is None and private.query_engine_of(engine) is None


def test_a_retrievers_store_fusion_members_and_chromas_collection_are_read():
    client = chromadb.EphemeralClient()
    collection = client.create_collection(f"private-{uuid.uuid4().hex}")
    store = ChromaVectorStore(chroma_collection=collection)
    index = VectorStoreIndex.from_vector_store(store, embed_model=MockEmbedding(embed_dim=8))
    retriever = index.as_retriever()
    assert private.vector_store(retriever) is store
    assert private.chroma_collection(store) is collection
    members = [retriever, PoolRetriever(make_pool(5))]
    fusion = QueryFusionRetriever(members, llm=MockLLM(), mode="simple", num_queries=1)
    assert list(private.fusion_members(fusion)) == members
    assert private.fusion_members(retriever) is None
