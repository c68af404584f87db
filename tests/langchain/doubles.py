"""Test doubles for the LangChain tests: a vector store that returns a fixed pool, a retriever
that serves a fixed list, and LangChain's view of the LlamaIndex test pools."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore


def person_documents(genders: Sequence[str | None], *, topic: str = "Computing") -> list[Document]:
    """One biography per entry; ``None`` leaves the ``gender`` field out (an unknown group)."""
    documents = []
    for i, gender in enumerate(genders):
        title = f"Person {i:02d}"
        metadata: dict[str, Any] = {"doc_id": str(1000 + i), "title": title, "topics": topic}
        if gender is not None:
            metadata["gender"] = gender
        documents.append(
            Document(
                id=str(1000 + i),
                page_content=f"Title: {title}\n{title} is a pioneer of {topic}.",
                metadata=metadata,
            )
        )
    return documents


class FixedPoolStore(VectorStore):
    """Returns the same ``Document`` objects, best first, with cosine distances, for any query.

    States no relevance function (LangChain's default raises NotImplementedError), so the
    FairRetriever falls back to SPEC.md's ``1 - distance``. Records every search call.
    """

    def __init__(self, documents: Sequence[Document], distances: Sequence[float]) -> None:
        self.pool = list(zip(documents, distances, strict=True))
        self.calls: list[tuple[str, str, int, dict[str, Any]]] = []

    def _search(self, mode: str, query: str, k: int, kwargs: dict[str, Any]):
        self.calls.append((mode, query, k, dict(kwargs)))
        wanted = kwargs.get("filter") or {}
        pool = [
            (doc, distance)
            for doc, distance in self.pool
            if all(doc.metadata.get(key) == value for key, value in wanted.items())
        ]
        return pool[:k]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        return self._search("sync", query, k, kwargs)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        return self._search("async", query, k, kwargs)

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return [doc for doc, _ in self._search("sync", query, k, kwargs)]

    def add_texts(self, texts: Iterable[str], metadatas=None, **kwargs: Any) -> list[str]:
        raise NotImplementedError("FixedPoolStore is read-only")

    @classmethod
    def from_texts(cls, texts, embedding: Embeddings, metadatas=None, **kwargs: Any):
        raise NotImplementedError("FixedPoolStore is built from documents")


class CosineFixedPoolStore(FixedPoolStore):
    """The same store, stating the cosine relevance function (as Chroma does)."""

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return self._cosine_relevance_score_fn


def imbalanced_pool(n: int = 40, female_every: int = 5) -> tuple[list[Document], list[float]]:
    """``n`` documents, one female in ``female_every``, the female ones ranked lowest.

    Distances rise with the index among each group; every female document is farther than
    every male one, so the standard ranker shows no female document in its top 5.
    """
    genders = ["female" if i % female_every == 0 else "male" for i in range(n)]
    documents = person_documents(genders)
    males = [d for d in documents if d.metadata["gender"] == "male"]
    females = [d for d in documents if d.metadata["gender"] == "female"]
    ordered = males + females
    distances = [0.1 + 0.01 * i for i in range(n)]
    return ordered, distances


class ListRetriever(BaseRetriever):
    """A retriever serving a fixed list of documents (the base of a compression retriever)."""

    documents: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return list(self.documents)


def documents_of_pool(pool: Sequence[Any]) -> list[Document]:
    """LangChain's view of a LlamaIndex test pool (``tests/llamaindex/pools.py``): the same ids,
    texts and metadata, each node's score as ``relevance_score`` (what FairReranker reads)."""
    return [
        Document(
            id=node.node.node_id,
            page_content=node.node.get_content(),
            metadata={**node.node.metadata, "relevance_score": node.score},
        )
        for node in pool
    ]


def amortized_retriever(ledger: Any, key: str | None = "tenant-a") -> Any:
    """A FairRetriever of the amortized ranker over :func:`imbalanced_pool`, its exposure kept
    in ``ledger`` (a ledger, a SQLite path or a Redis URL) under ``key`` (None: the default
    stream): k 4, seed 0."""
    from fairrag_langchain import FairRetriever

    documents, distances = imbalanced_pool()
    return FairRetriever(
        vectorstore=FixedPoolStore(documents, distances),
        group_key="gender",
        protected="female",
        ranker="amortized",
        ledger=ledger,
        ledger_key=key,
        seed=0,
        k=4,
    )
