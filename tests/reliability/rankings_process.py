"""The fair rankings of a fixed set of (query, seed) pairs through both adapters, against a
Chroma server: run in a process of its own (``python -m tests.reliability.rankings_process
CONFIG.json``) to print them as JSON, or imported to compute them in the calling process.

``CONFIG.json``: ``{"host", "port", "collection", "query_vectors": {query: vector},
"rankers": [...], "seeds": [...]}``. Queries are embedded by the caller, so this process loads
no model: what it computes depends only on the server's index, the vectors and the seeds.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SEQUENCE_DRAWS = 3
"""Successive draws of one seeded ranker (its generator's sequence, not only its first draw)."""


def rankings(config: dict[str, Any]) -> dict[str, Any]:
    from langchain_chroma import Chroma
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import QueryBundle
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from fairrag_langchain import FairRetriever
    from fairrag_llamaindex import FairRerankPostprocessor, query_seed
    from fairrag_study.index import connect_chroma_server
    from tests.reliability.vectors import LookupEmbedding, LookupEmbeddings

    client = connect_chroma_server(config["host"], config["port"])
    vectors = config["query_vectors"]
    store = Chroma(
        client=client,
        collection_name=config["collection"],
        embedding_function=LookupEmbeddings(vectors),
    )
    index = VectorStoreIndex.from_vector_store(
        ChromaVectorStore(chroma_collection=client.get_collection(config["collection"])),
        embed_model=LookupEmbedding(vectors=vectors),
    )
    fairness = {"group_key": "gender", "protected": "female"}
    out: dict[str, Any] = {"langchain": {}, "llamaindex": {}, "sequence": {}}
    for ranker in config["rankers"]:
        retriever = FairRetriever(vectorstore=store, ranker=ranker, **fairness)
        out["langchain"][ranker] = [
            [d.id for d in retriever.invoke(query, seed=seed)]
            for query in vectors
            for seed in config["seeds"]
        ]
        per_query = []
        for query in vectors:
            pool = index.as_retriever(similarity_top_k=50).retrieve(query)
            for seed in config["seeds"]:
                post = FairRerankPostprocessor(ranker=ranker, relevance="chroma_cosine", **fairness)
                with query_seed(seed):  # the per-query seed, as LangChain's invoke(seed=...)
                    nodes = post.postprocess_nodes(pool, QueryBundle(query))
                per_query.append([n.node.node_id for n in nodes])
        out["llamaindex"][ranker] = per_query
        # One retriever built with a seed: the sequence of its rankings is reproducible too.
        seeded = FairRetriever(
            vectorstore=store, ranker=ranker, seed=config["seeds"][0], **fairness
        )
        query = next(iter(vectors))
        out["sequence"][ranker] = [
            [d.id for d in seeded.invoke(query)] for _ in range(SEQUENCE_DRAWS)
        ]
    return out


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    json.dump(rankings(config), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
