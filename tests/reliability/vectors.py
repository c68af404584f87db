"""Query embeddings computed once, served to LangChain and LlamaIndex by lookup.

The model embeds ~12 texts/s here: the reliability tests run the same dozen questions hundreds
of times, in several processes, so each question is embedded once (with the real
all-MiniLM-L6-v2) and looked up afterwards. An unknown question is an error, never a silent
re-embedding: every vector a test uses comes from the real model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.embeddings import Embeddings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field

from fairrag_core.prompts import scenario_question

TOPICS = ("Computer science", "Medicine", "Tennis")
QUESTIONS = tuple(scenario_question(s, topic) for topic in TOPICS for s in range(1, 5))
"""The study's 4 scenario questions for each of the subset's 3 topics."""


def embed(model, texts: Sequence[str]) -> list[list[float]]:
    """L2-normalised embeddings, as the index holds them (cosine distance = 1 - dot)."""
    return model.encode(list(texts), batch_size=16, normalize_embeddings=True).tolist()


class LookupEmbeddings(Embeddings):
    """LangChain embeddings answering known queries from ``vectors``."""

    def __init__(self, vectors: Mapping[str, Sequence[float]]) -> None:
        self.vectors = {query: list(vector) for query, vector in vectors.items()}

    def embed_query(self, text: str) -> list[float]:
        return list(self.vectors[text])

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("documents are indexed with their own vectors, not through here")


class LookupEmbedding(BaseEmbedding):
    """The same for LlamaIndex."""

    vectors: dict[str, list[float]] = Field(default_factory=dict)

    def _get_query_embedding(self, query: str) -> list[float]:
        return list(self.vectors[query])

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        raise AssertionError("documents are indexed with their own vectors, not through here")
