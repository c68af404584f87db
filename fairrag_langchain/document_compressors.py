"""FairReranker: the fair re-ranking of :class:`FairRetriever` for documents from any retriever,
as a LangChain document compressor (e.g. inside a ``ContextualCompressionRetriever``)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from pydantic import AliasChoices, ConfigDict, Field, PrivateAttr, model_validator

from fairrag_core import pool_scores
from fairrag_core.kit.component import Count

from ._documents import checked_documents, checked_query
from ._fields import FairRankingFields, atell_empty_ranking, tell_empty_ranking

__all__ = ["FairReranker"]

INCOMING_ORDER = "incoming_order"
"""``score_source`` of documents ranked by their incoming order (no scores given)."""
EMBEDDINGS = "embeddings"
"""``score_source`` of documents scored by the reranker's embeddings (cosine similarity)."""


class FairReranker(FairRankingFields, BaseDocumentCompressor):
    """Re-rank documents from any retriever into a fair top-``k`` (``top_n``).

    Instantiate:
        .. code-block:: python

            from fairrag_langchain import FairReranker

            reranker = FairReranker(
                ranker="forced_exposure", group_key="gender", protected="female", top_n=5,
                embeddings=embeddings,  # scores documents that come without a score
            )
            pool = store.as_retriever(search_kwargs={"k": 50}).invoke(question)
            context = reranker.compress_documents(pool, question)

        It also plugs into ``ContextualCompressionRetriever(base_compressor=reranker,
        base_retriever=...)`` from ``langchain-classic``. ``top_n`` (the name every LangChain
        reranker uses) and ``k`` are the same field.

    Which scores, in this order:

    1. each document's ``metadata[score_key]`` (default ``"relevance_score"``) when every
       document has one; a list where only some do is a ``ValueError`` naming the positions
       without it (the core's :func:`~fairrag_core.pool_scores`);
    2. else, with ``embeddings``, the cosine similarity of the query and each document's
       ``page_content`` (a store's plain retriever puts no scores in metadata: ranking its
       answer by incoming order would throw the relevance away);
    3. else the incoming order (the first document the most relevant), with a warning.

    Groups, unknown groups, a wrong ``group_key`` and documents repeating an earlier one's
    ``Document.id`` (left out, the first kept) behave as in :class:`FairRetriever`. Returned
    documents are copies with the kit's placement metadata (``relevance_score`` is the
    relevance ranked on, ``retrieval_score`` the incoming ``metadata[score_key]``) and
    ``score_source`` (``"metadata:<score_key>"``, ``"embeddings"`` or ``"incoming_order"``).
    Each call ranks with its own query seed, drawn from the generator of ``seed`` and written in
    ``query_seed`` (LangChain's compressor interface has no per-call arguments).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    k: Count = Field(default=5, validation_alias=AliasChoices("k", "top_n"))
    """How many documents to return (``top_n`` is accepted as its name too)."""
    score_key: str = "relevance_score"
    """The metadata field holding each document's relevance score."""
    embeddings: Embeddings | None = None
    """Scores documents that come without ``score_key`` (cosine similarity to the query)."""

    _warned_order: bool = PrivateAttr(default=False)

    @model_validator(mode="before")
    @classmethod
    def _one_count(cls, data: Any) -> Any:
        if isinstance(data, dict) and "k" in data and "top_n" in data:
            raise ValueError(
                f"give k or top_n (two names of one field), not both: got k={data['k']!r} and "
                f"top_n={data['top_n']!r}"
            )
        return data

    def _shown(self) -> tuple[int, str]:
        return self.k, "k (top_n)"  # checked when built and set

    @property
    def top_n(self) -> int:
        """How many documents are returned (the same as ``k``)."""
        return self.k

    def compress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """The fair top-``k`` of ``documents``."""
        documents = checked_documents(documents, type(self).__name__)
        query = checked_query(query, type(self).__name__)
        given = [d.metadata.get(self.score_key) for d in documents]
        scores, source = self._scores(documents, given, query)
        empty: list[dict[str, Any]] = []  # the ranking's keys when it places nothing
        placed = self._placed(documents, scores, given, source, empty)
        tell_empty_ranking(empty, callbacks)
        return placed

    async def acompress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """As :meth:`compress_documents`; embeds through the embeddings' async methods, and
        ranks off the event loop when the ranker waits on a SQLite or Redis ledger
        (docs/SPEC.md "Adapters" → Async)."""
        from fairrag_core.ledger import run_off_loop, waits_on_ledger  # this method's own

        documents = checked_documents(documents, type(self).__name__)
        query = checked_query(query, type(self).__name__)
        given = [d.metadata.get(self.score_key) for d in documents]
        if self.embeddings is not None and documents and all(v is None for v in given):
            query_vector = await self.embeddings.aembed_query(query)
            vectors = await self.embeddings.aembed_documents([d.page_content for d in documents])
            scores, source = _cosine(query_vector, vectors), EMBEDDINGS
        else:
            scores, source = self._scores(documents, given, query)
        empty: list[dict[str, Any]] = []  # the ranking's keys when it places nothing
        if waits_on_ledger(self.core_ranker):  # a SQLite or Redis ledger: off the loop
            placed = await run_off_loop(self._placed, documents, scores, given, source, empty)
        else:
            placed = self._placed(documents, scores, given, source, empty)  # microseconds
        await atell_empty_ranking(empty, callbacks)
        return placed

    def _scores(
        self, documents: list[Document], given: list[Any], query: str
    ) -> tuple[np.ndarray, str]:
        """Relevance of each document and where it came from (the rules above)."""
        try:
            scores, from_order = pool_scores(given)
        except ValueError as exc:
            raise ValueError(f"score_key {self.score_key!r}: {exc}") from None
        if not from_order:
            return scores, f"metadata:{self.score_key}"
        if self.embeddings is not None and documents:
            query_vector = self.embeddings.embed_query(query)
            vectors = self.embeddings.embed_documents([d.page_content for d in documents])
            return _cosine(query_vector, vectors), EMBEDDINGS
        if documents and not self._warned_order:
            self._warned_order = True
            warnings.warn(
                f"FairReranker: no document has metadata[{self.score_key!r}] and no embeddings "
                "were given, so the incoming order is the relevance; pass embeddings= to rank "
                "on relevance",
                UserWarning,
                stacklevel=3,
            )
        return scores, INCOMING_ORDER

    def _placed(
        self,
        documents: list[Document],
        scores: np.ndarray,
        given: list[Any],
        source: str,
        empty: list[dict[str, Any]],
    ) -> list[Document]:
        return self._placed_ranking(
            documents,
            scores,
            self.k,
            given=given,
            scored=source != INCOMING_ORDER,
            extra={"score_source": source},
            empty=empty,
        )


def _cosine(query_vector: Sequence[float], vectors: Sequence[Sequence[float]]) -> np.ndarray:
    """Cosine similarity of the query to each document vector."""
    matrix = np.asarray(vectors, dtype=float)
    query = np.asarray(query_vector, dtype=float)
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query)
    return matrix @ query / np.where(norms == 0, 1.0, norms)
