"""``FairRerankPostprocessor.for_index`` reads the store's distance metric (docs/SPEC.md,
"Adapters" → Relevance): a real FAISS ``IndexFlatL2`` (LlamaIndex's own FAISS example) and a
Qdrant collection with ``Distance.EUCLID`` (local mode) report distances, so the five shown are
the store's best five, never its worst; a metric it cannot read is refused."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import QueryBundle, TextNode

from fairrag_llamaindex import FairRerankPostprocessor

faiss = pytest.importorskip("faiss")

DIM = 8
N = 50


def vectors() -> tuple[list[TextNode], list[float]]:
    """``N`` nodes with fixed embeddings (every 5th female) and a query embedding."""
    rng = np.random.default_rng(3)
    embeddings = rng.normal(size=(N, DIM)).astype("float32")
    nodes = [
        TextNode(
            id_=str(uuid.UUID(int=i + 1)),  # Qdrant takes UUIDs or ints
            text=f"Person {i} is a scientist.",
            metadata={"title": f"Person {i}", "gender": "female" if i % 5 == 4 else "male"},
            excluded_embed_metadata_keys=["title", "gender"],
            excluded_llm_metadata_keys=["title", "gender"],
            embedding=embeddings[i].tolist(),
        )
        for i in range(N)
    ]
    return nodes, rng.normal(size=DIM).astype("float32").tolist()


def index_over(store) -> tuple[VectorStoreIndex, QueryBundle, list[str]]:
    """The index over ``store``, the query, and the node ids by true L2 distance, nearest first."""
    nodes, query = vectors()
    index = VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=MockEmbedding(embed_dim=DIM),
    )
    distance = [float(np.sum((np.asarray(n.embedding) - query) ** 2)) for n in nodes]
    nearest = [nodes[i].node_id for i in np.argsort(distance)]
    return index, QueryBundle("who", embedding=query), nearest


def shown_by(index, bundle) -> tuple[list[str], list[int]]:
    fair = FairRerankPostprocessor.for_index(
        index, group_key="gender", protected="female", ranker="standard"
    )
    pool = index.as_retriever(similarity_top_k=N).retrieve(bundle)
    shown = fair.postprocess_nodes(pool, bundle)
    return [n.node.node_id for n in shown], [n.node.metadata["pool_rank"] for n in shown]


def test_for_index_reads_faiss_l2_and_shows_the_nearest():
    from llama_index.vector_stores.faiss import FaissVectorStore

    from fairrag_llamaindex import _private as private

    flat = faiss.IndexFlatL2(DIM)
    store = FaissVectorStore(faiss_index=flat)
    assert private.faiss_index(store) is flat  # the one private read, on a real store
    index, bundle, nearest = index_over(store)
    fair = FairRerankPostprocessor.for_index(index, group_key="gender", protected="female")
    assert fair.relevance == "l2_distance"  # today's main: "similarity", the worst five shown
    ids, ranks = shown_by(index, bundle)
    assert ids == nearest[:5] and ranks == [1, 2, 3, 4, 5]


def test_for_index_reads_faiss_inner_product_as_a_similarity():
    from llama_index.vector_stores.faiss import FaissVectorStore

    store = FaissVectorStore(faiss_index=faiss.IndexFlatIP(DIM))
    index, _, _ = index_over(store)
    assert (
        FairRerankPostprocessor.for_index(index, group_key="gender", protected="female").relevance
        == "similarity"
    )


def test_for_index_refuses_a_faiss_metric_it_cannot_read():
    from llama_index.vector_stores.faiss import FaissVectorStore

    store = FaissVectorStore(faiss_index=faiss.IndexFlat(DIM, faiss.METRIC_L1))
    index, _, _ = index_over(store)
    with pytest.raises(ValueError, match=r"FaissVectorStore.*metric_type 2"):
        FairRerankPostprocessor.for_index(index, group_key="gender", protected="female")


def test_auto_in_a_query_engine_reads_faiss_l2_too():
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.vector_stores.faiss import FaissVectorStore

    from tests.llamaindex.fake_llms import FakeRecordingLLM

    store = FaissVectorStore(faiss_index=faiss.IndexFlatL2(DIM))
    index, bundle, nearest = index_over(store)
    fair = FairRerankPostprocessor(group_key="gender", protected="female", ranker="standard")
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=N), node_postprocessors=[fair], llm=FakeRecordingLLM()
    )
    response = engine.query(bundle)  # main: refused by the direction check
    assert [n.node.node_id for n in response.source_nodes] == nearest[:5]


@pytest.mark.parametrize(
    ("distance", "relevance"), [("EUCLID", "l2_distance"), ("COSINE", "similarity")]
)
def test_for_index_reads_a_qdrant_collections_distance(distance, relevance):
    qdrant_client = pytest.importorskip("qdrant_client")
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client.models import Distance, VectorParams

    client = qdrant_client.QdrantClient(location=":memory:")
    client.create_collection(
        "people", vectors_config=VectorParams(size=DIM, distance=getattr(Distance, distance))
    )
    index, bundle, nearest = index_over(QdrantVectorStore(client=client, collection_name="people"))
    assert (
        FairRerankPostprocessor.for_index(index, group_key="gender", protected="female").relevance
        == relevance
    )
    if distance == "EUCLID":
        ids, ranks = shown_by(index, bundle)
        assert ids == nearest[:5] and ranks == [1, 2, 3, 4, 5]


def _qdrant_index(distance: str = "EUCLID"):
    qdrant_client = pytest.importorskip("qdrant_client")
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client.models import Distance, VectorParams

    client = qdrant_client.QdrantClient(location=":memory:")
    client.create_collection(
        "people", vectors_config=VectorParams(size=DIM, distance=getattr(Distance, distance))
    )
    store = QdrantVectorStore(client=client, collection_name="people")
    return (client, *index_over(store))


def test_auto_reads_a_qdrant_collections_distance_once_over_many_queries(monkeypatch):
    from llama_index.core.query_engine import RetrieverQueryEngine

    from tests.llamaindex.fake_llms import FakeRecordingLLM

    client, index, bundle, nearest = _qdrant_index()
    calls = []
    real = client.get_collection
    monkeypatch.setattr(client, "get_collection", lambda *a, **k: calls.append(a) or real(*a, **k))
    fair = FairRerankPostprocessor(group_key="gender", protected="female", ranker="standard")
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=N), node_postprocessors=[fair], llm=FakeRecordingLLM()
    )
    for _ in range(4):
        response = engine.query(bundle)
        assert [n.node.node_id for n in response.source_nodes] == nearest[:5]
    assert len(calls) == 1  # before: 4, one server call per query


def test_auto_refuses_an_async_only_qdrant_store_by_name():
    qdrant_client = pytest.importorskip("qdrant_client")
    from llama_index.vector_stores.qdrant import QdrantVectorStore

    store = QdrantVectorStore(
        aclient=qdrant_client.AsyncQdrantClient(location=":memory:"), collection_name="people"
    )
    assert store.client is None
    index = VectorStoreIndex.from_vector_store(store, embed_model=MockEmbedding(embed_dim=DIM))
    with pytest.raises(ValueError, match=r"only an async client.*relevance='similarity'"):
        FairRerankPostprocessor.for_index(index, group_key="gender", protected="female")
