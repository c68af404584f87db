"""FairReranker: the fair re-ranking of :class:`FairRetriever` for documents from any retriever,
as a LangChain document compressor (e.g. inside a ``ContextualCompressionRetriever``)."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document

from fairrag_core import group_labels, pool_scores, rerank

from ._documents import placed_copies
from ._fields import FairRankingFields

__all__ = ["FairReranker"]

INCOMING_ORDER = "incoming_order"
"""``score_source`` of documents ranked by their incoming order (no scores given)."""


class FairReranker(FairRankingFields, BaseDocumentCompressor):
    """Re-rank documents from any retriever into a fair top-``k``.

    Instantiate:
        .. code-block:: python

            from fairrag_langchain import FairReranker

            reranker = FairReranker(ranker="forced_exposure", protected="female", k=5)
            pool = store.as_retriever(search_kwargs={"k": 50}).invoke(question)
            context = reranker.compress_documents(pool, question)

        It also plugs into ``ContextualCompressionRetriever(base_compressor=reranker,
        base_retriever=...)`` from ``langchain-classic``.

    Which scores: each document's ``metadata[score_key]`` (default ``"relevance_score"``) when
    every document has one (not None); when none has one, the incoming order is the ranking, by
    the core's :func:`~fairrag_core.scores_from_order` (the first document is the most
    relevant). A list where only some documents carry the score is a ``ValueError`` naming the
    positions without it: mixing the two would rank unscored documents arbitrarily. The rule is
    the core's (:func:`~fairrag_core.pool_scores`); scores must be finite numbers.

    Groups, unknown groups, a wrong ``group_key`` and documents repeating an earlier one's
    ``Document.id`` (left out, the first kept) behave as in :class:`FairRetriever`.
    Returned documents are copies with ``fair_rank``, ``pool_rank`` (rank by score, or incoming
    position), ``exposure_weight``, ``ranker`` and ``score_source`` (``"metadata:<score_key>"``
    or ``"incoming_order"``) added to their metadata; existing keys, ``relevance_score``
    included, are kept. Each call draws from the ranker's own generator (``seed``); LangChain's
    compressor interface has no per-call arguments.
    """

    score_key: str = "relevance_score"
    """The metadata field holding each document's relevance score."""

    def compress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """The fair top-``k`` of ``documents`` (``query`` is not needed: scores are given)."""
        documents = list(documents)
        scores, source = self._scores(documents)
        groups = group_labels([document.metadata for document in documents], self.group_key)
        ids = [document.id for document in documents]
        reranking = rerank(self._ranker, scores, groups, self.k, ids=ids)
        return placed_copies(documents, reranking, {"score_source": source}, with_score=False)

    async def acompress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """Same as :meth:`compress_documents`: pure computation, run on the event loop."""
        return self.compress_documents(documents, query, callbacks)

    def _scores(self, documents: list[Document]) -> tuple[object, str]:
        """The core's :func:`~fairrag_core.pool_scores` over ``metadata[score_key]``."""
        try:
            scores, from_order = pool_scores([d.metadata.get(self.score_key) for d in documents])
        except ValueError as exc:
            raise ValueError(f"score_key {self.score_key!r}: {exc}") from None
        return scores, INCOMING_ORDER if from_order else f"metadata:{self.score_key}"
