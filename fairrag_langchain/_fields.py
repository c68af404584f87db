"""The ranking configuration shared by :class:`FairRetriever` and :class:`FairReranker`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from pydantic import Field

from fairrag_core.kit.component import Count, FairComponent

from ._documents import placed_copies

__all__ = ["FairRankingFields"]


class FairRankingFields(FairComponent):
    """The component contract (:class:`fairrag_core.kit.component.FairComponent`: the fields
    every fair component shares, validated on construction and assignment, and the core ranker
    they describe) with LangChain's size field ``k`` and the documents' placement.

    Bad configuration fails when the object is built or the field is assigned, with the core's
    message, and an assignment that fails is undone; unknown arguments are refused.
    """

    k: Count = Field(default=5, description="How many documents to return.")
    """How many documents to return (an int >= 1)."""

    def _placed_ranking(
        self,
        documents: list[Document],
        scores: Any,
        k: int,
        *,
        seed: Any = None,
        given: Sequence[Any] | None = None,
        scored: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> list[Document]:
        """Rank ``documents`` (one query, its own query seed) and return their placed copies."""
        placed = self.place(
            [document.metadata for document in documents],
            scores,
            k,
            ids=[document.id for document in documents],
            given=given,
            scored=scored,
            seed=seed,
            extra=extra,
        )
        return placed_copies(documents, placed)
