"""The study's Chroma collections: cosine space and a search breadth that returns exact pools."""

from __future__ import annotations

import uuid

import chromadb
import numpy as np
import pytest

from fairrag_core.prompts import scenario_question
from fairrag_study.index import EF_SEARCH, open_collection


def test_new_and_previously_cached_collections_get_the_search_breadth():
    client = chromadb.EphemeralClient()
    fresh = open_collection(client, f"fresh-{uuid.uuid4().hex[:8]}")
    assert fresh.configuration["hnsw"]["space"] == "cosine"
    assert fresh.configuration["hnsw"]["ef_search"] == EF_SEARCH == 500
    # An index cached before EF_SEARCH existed has Chroma's default breadth (100).
    name = f"cached-{uuid.uuid4().hex[:8]}"
    old = client.create_collection(
        name, configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
    )
    assert old.configuration["hnsw"]["ef_search"] == 100
    assert open_collection(client, name).configuration["hnsw"]["ef_search"] == EF_SEARCH
    assert client.get_collection(name).configuration["hnsw"]["ef_search"] == EF_SEARCH


@pytest.mark.integration
def test_pools_are_the_exact_cosine_top_50(chroma_collection, sentence_model, subset_topics):
    stored = chroma_collection.get(include=["embeddings"])
    vectors = np.asarray(stored["embeddings"])
    questions = [scenario_question(s, topic) for topic in subset_topics for s in range(1, 5)]
    queries = sentence_model.encode(questions, normalize_embeddings=True)
    for question, query in zip(questions, queries, strict=True):
        pool = chroma_collection.query(query_embeddings=[query.tolist()], n_results=50)
        exact = {stored["ids"][i] for i in np.argsort(-(vectors @ query))[:50]}
        assert set(pool["ids"][0]) == exact, question
