"""Client/server: the fair retriever, the postprocessor and the study against a real Chroma
server (``chroma run`` started by the fixtures) behave exactly as they do embedded."""

from __future__ import annotations

import asyncio
import json
import math

import chromadb
import pytest
from langchain_chroma import Chroma

from fairrag_core import VectorStoreUnavailableError, available_rankers
from fairrag_langchain import FairnessCallbackHandler, FairRetriever
from fairrag_study.index import collection_name, connect_chroma_server, open_collection
from tests.reliability.chroma_server import free_port
from tests.reliability.conftest import COLLECTION, index_documents
from tests.reliability.vectors import QUESTIONS, LookupEmbedding, LookupEmbeddings

pytestmark = pytest.mark.integration

QUERIES = QUESTIONS[::4]  # scenario 1 of each topic
SEEDS = (0, 2026)
PLACEMENT = ("fair_rank", "pool_rank", "ranker", "relevance_function")

# The amortized ranker's ranking depends on its ledger, the history of the stream it served:
# two components agree only with equal ledgers (tests/core/rankers/amortized_test.py and the
# ledger tests), not when one has served more queries than the other, as here.
STATELESS_RANKERS = [name for name in available_rankers() if name != "amortized"]


def retriever(client, query_vectors, ranker="representative_stochastic", **fields):
    store = Chroma(
        client=client,
        collection_name=COLLECTION,
        embedding_function=LookupEmbeddings(query_vectors),
    )
    return FairRetriever(
        vectorstore=store, ranker=ranker, group_key="gender", protected="female", **fields
    )


@pytest.fixture(scope="module")
def embedded_client(tmp_path_factory, server_documents, document_vectors):
    """The same documents and vectors in an embedded, persistent Chroma."""
    client = chromadb.PersistentClient(path=str(tmp_path_factory.mktemp("embedded")))
    index_documents(open_collection(client, COLLECTION), server_documents, document_vectors)
    return client


def placed(documents):
    return [
        (d.id, *(d.metadata[key] for key in PLACEMENT), d.metadata["relevance_score"])
        for d in documents
    ]


def assert_same_placements(got, expected):
    assert [row[:-1] for row in got] == [row[:-1] for row in expected]
    assert [row[-1] for row in got] == pytest.approx([row[-1] for row in expected], abs=1e-6)


@pytest.mark.parametrize("ranker", STATELESS_RANKERS)
def test_retriever_on_the_server_ranks_exactly_as_embedded(
    ranker, server_client, server_collection, embedded_client, query_vectors
):
    on_server = retriever(server_client, query_vectors, ranker)
    embedded = retriever(embedded_client, query_vectors, ranker)
    assert on_server.vectorstore._collection.count() == embedded.vectorstore._collection.count()
    for query in QUERIES:
        for seed in SEEDS:
            got = placed(on_server.invoke(query, seed=seed))
            assert len(got) == 5
            assert_same_placements(got, placed(embedded.invoke(query, seed=seed)))
    # The cosine relevance 1 - d comes from the store, on the server as embedded.
    assert got[0][PLACEMENT.index("relevance_function") + 1] == "store: cosine_relevance_score_fn"


async def test_concurrent_async_retrievals_on_the_server_match_sync_ones(
    server_client, server_collection, query_vectors, tmp_path
):
    fair = retriever(server_client, query_vectors)
    handler = FairnessCallbackHandler(
        group_key="gender", protected="female", path=tmp_path / "runs.jsonl"
    )
    calls = [(query, seed) for query in QUESTIONS for seed in range(4)]
    expected = [placed(fair.invoke(query, seed=seed)) for query, seed in calls]
    results = await asyncio.wait_for(
        asyncio.gather(*(fair.ainvoke(q, {"callbacks": [handler]}, seed=s) for q, s in calls)),
        timeout=120,
    )
    for got, want in zip(results, expected, strict=True):
        assert_same_placements(placed(got), want)
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert len(lines) == len(handler.records) == len(calls)
    assert sorted(json.loads(line)["run_id"] for line in lines) == sorted(
        r["run_id"] for r in handler.records
    )


@pytest.mark.parametrize("ranker", STATELESS_RANKERS)
def test_postprocessor_on_the_server_ranks_as_the_retriever(
    ranker, server_client, server_collection, query_vectors
):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import QueryBundle
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from fairrag_llamaindex import FairRerankPostprocessor, query_seed

    index = VectorStoreIndex.from_vector_store(
        ChromaVectorStore(chroma_collection=server_client.get_collection(COLLECTION)),
        embed_model=LookupEmbedding(vectors=query_vectors),
    )
    fair = retriever(server_client, query_vectors, ranker)
    for query in QUERIES:
        pool = index.as_retriever(similarity_top_k=50).retrieve(query)
        assert len(pool) == 50
        for seed in SEEDS:
            post = FairRerankPostprocessor(
                ranker=ranker, group_key="gender", protected="female", relevance="chroma_cosine"
            )
            with query_seed(seed):  # the per-query seed, as the retriever's invoke(seed=...)
                nodes = post.postprocess_nodes(pool, QueryBundle(query))
            documents = fair.invoke(query, seed=seed)
            assert [n.node.node_id for n in nodes] == [d.id for d in documents]
            for node, document in zip(nodes, documents, strict=True):
                for key in ("fair_rank", "pool_rank", "exposure_weight", "ranker"):
                    assert node.node.metadata[key] == document.metadata[key], key
                # Both ranked on 1 - d; LlamaIndex's own score, exp(-d), is kept beside it.
                relevance = node.node.metadata["relevance_score"]
                assert relevance == pytest.approx(document.metadata["relevance_score"], abs=1e-6)
                retrieval = node.node.metadata["retrieval_score"]
                assert 1 + math.log(retrieval) == pytest.approx(relevance, abs=1e-6)


def test_query_engine_on_the_server_records_every_query(
    server_client, server_collection, query_vectors, tmp_path
):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from fairrag_core.jsonl import to_json_line
    from fairrag_llamaindex import FairnessEventHandler, FairRerankPostprocessor

    index = VectorStoreIndex.from_vector_store(
        ChromaVectorStore(chroma_collection=server_client.get_collection(COLLECTION)),
        embed_model=LookupEmbedding(vectors=query_vectors),
    )
    post = FairRerankPostprocessor(
        group_key="gender", protected="female", seed=3, relevance="chroma_cosine"
    )
    engine = index.as_query_engine(similarity_top_k=50, node_postprocessors=[post], llm=MockLLM())
    log = tmp_path / "events.jsonl"
    with FairnessEventHandler.from_postprocessor(post, log_path=str(log)) as handler:
        for query in QUERIES:
            engine.query(query)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    # the log writes NaN (a prose answer's generation parity) as null
    assert records == [json.loads(to_json_line(r)) for r in handler.records]
    assert [r["query"] for r in records] == list(QUERIES)
    for record in records:
        assert record["ranker"] == "representative_stochastic"
        assert len(record["groups"]) == 5
        assert 0.0 <= record["exposure_share"] <= 1.0


def _study_args(data, out, *extra):
    return [
        "study", "--data", str(data), "--topics", "Tennis", "--per-group", "6", "--trials", "4",
        "--llm", "fake", "--out", str(out), "--no-progress", *extra,
    ]  # fmt: skip


def _records(out):
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return {
        (r["ranker"], r["trial"]): (r["titles"], r["groups"], r["n_valid_citations"]) for r in rows
    }


def test_study_on_the_server_matches_the_embedded_study(chroma_server, tmp_path, capsys):
    from fairrag_study.cli import main
    from fairrag_study.data import build_corpus, load_documents
    from fairrag_study.embedding import DEFAULT_MODEL
    from fairrag_study.index import corpus_fingerprint
    from tests.chroma_pool import data_path_or_skip

    data = data_path_or_skip()
    server = ("--chroma-host", chroma_server.host, "--chroma-port", str(chroma_server.port))
    assert main(_study_args(data, tmp_path / "server", *server)) == 0
    assert "(12 embedded now)" in capsys.readouterr().out
    assert main(_study_args(data, tmp_path / "again", *server, "--chroma-timeout", "10")) == 0
    assert "(0 embedded now)" in capsys.readouterr().out  # the server kept the index
    cache = ("--cache-dir", str(tmp_path / "cache"))
    assert main(_study_args(data, tmp_path / "embedded", *cache)) == 0

    on_server = _records(tmp_path / "server")
    assert len(on_server) == len(available_rankers()) * 4  # every ranker, the default
    assert on_server == _records(tmp_path / "embedded") == _records(tmp_path / "again")
    # One collection per corpus and model on the server, so other runs never mix in.
    corpus = build_corpus(load_documents(data), "balanced", topics=("Tennis",), per_group=6)
    name = collection_name("balanced", DEFAULT_MODEL, corpus_fingerprint(corpus, DEFAULT_MODEL))
    client = connect_chroma_server(chroma_server.host, chroma_server.port)
    assert client.get_collection(name).count() == len(corpus) == 12


def test_study_without_a_server_fails_at_once_naming_it(tmp_path, capsys):
    from fairrag_study.cli import main
    from tests.chroma_pool import data_path_or_skip

    port = free_port()  # nothing listens there
    args = _study_args(data_path_or_skip(), tmp_path / "out")
    assert main([*args, "--chroma-host", "127.0.0.1", "--chroma-port", str(port)]) == 2
    error = capsys.readouterr().err
    assert f"no Chroma server answers at http://127.0.0.1:{port}" in error
    assert "chroma run --path" in error
    assert not (tmp_path / "out").exists()  # failed before any work


def test_connect_raises_the_typed_error_with_its_cause():
    import httpx

    port = free_port()
    with pytest.raises(VectorStoreUnavailableError, match=f"127.0.0.1:{port}") as caught:
        connect_chroma_server("127.0.0.1", port, timeout=2)
    assert isinstance(caught.value, ConnectionError)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
