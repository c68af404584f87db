"""The ranking configuration shared by :class:`FairRetriever` and :class:`FairReranker`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager, Callbacks
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import (
    ensure_config,
    get_callback_manager_for_config,
    patch_config,
)
from pydantic import Field

from fairrag_core.kit.component import Count, FairComponent

from ._documents import placed_copies

__all__ = [
    "EMPTY_RANKING_EVENT",
    "NUMBERED_TOOL_KEY",
    "AnsweringModel",
    "EmptyRanking",
    "FairRankingFields",
    "ShownDocuments",
    "reported_model_name",
]

NUMBERED_TOOL_KEY = "fairrag_numbered_entries"
"""The tool metadata key (value ``True``) saying the tool shows each document it returns under
its 1-based place in that search, ``[n]`` (:func:`fairrag_langchain.tools.fair_retriever_tool`):
the handler reads entry numbers by those labels. Here, not in the tool's module, so the
handler reads it without importing LangChain's tools (about 80 ms)."""

EMPTY_RANKING_EVENT = "fairrag_empty_ranking"
"""The custom event a fair component dispatches to its run when its ranking placed no document
(an empty pool), with the ranking's keys (:attr:`fairrag_core.kit.Placed.ranking`) as data: no
document carries them, and the record names the ranking all the same (docs/SPEC.md, "Adapters"
→ Which list is audited)."""


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
        empty: list[dict[str, Any]] | None = None,
    ) -> list[Document]:
        """Rank ``documents`` (one query, its own query seed) and return their placed copies.
        ``empty``: gets the ranking's keys when it placed no document, for the caller to tell
        its run (:func:`tell_empty_ranking`, on the caller's own event loop when async)."""
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
        if not placed.metadatas and empty is not None:
            empty.append(placed.ranking)
        return placed_copies(documents, placed)


def _run_to_tell(empty: list[dict[str, Any]], callbacks: Callbacks) -> bool:
    """Whether a ranking placed nothing and ``callbacks`` belong to a run (a direct call of a
    component has none to tell)."""
    return (
        bool(empty)
        and isinstance(callbacks, BaseCallbackManager)
        and callbacks.parent_run_id is not None
    )


def tell_empty_ranking(empty: list[dict[str, Any]], callbacks: Callbacks) -> None:
    """Send :data:`EMPTY_RANKING_EVENT` with the ranking's keys to the run ``callbacks`` (its
    child callbacks) belong to, when the ranking placed nothing."""
    if _run_to_tell(empty, callbacks):
        dispatch_custom_event(EMPTY_RANKING_EVENT, empty[-1], config={"callbacks": callbacks})


async def atell_empty_ranking(empty: list[dict[str, Any]], callbacks: Callbacks) -> None:
    """:func:`tell_empty_ranking` from async code: async handlers hear it on the caller's
    event loop, as they hear the run's other events."""
    if _run_to_tell(empty, callbacks):
        await adispatch_custom_event(
            EMPTY_RANKING_EVENT, empty[-1], config={"callbacks": callbacks}
        )


class EmptyRanking(BaseCallbackHandler):
    """Hears :data:`EMPTY_RANKING_EVENT` in the runs it is handed to (:meth:`listening`):
    ``ranking`` holds the last such ranking's keys, None when none placed nothing."""

    def __init__(self) -> None:
        self.ranking: dict[str, Any] | None = None

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if name == EMPTY_RANKING_EVENT and isinstance(data, dict):
            self.ranking = dict(data)

    def listening(self, config: RunnableConfig | None) -> RunnableConfig:
        """``config`` with this handler among its callbacks (the others kept)."""
        manager = get_callback_manager_for_config(ensure_config(config))
        manager.add_handler(self, inherit=True)
        return patch_config(config, callbacks=manager)


def reported_model_name(
    serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any]
) -> str | None:
    """A model run's name as LangChain reports it when it starts (``ls_model_name``, its
    invocation parameters, its class): the model that ran, through fallbacks, retries and
    configurable fields."""
    metadata = kwargs.get("metadata") or {}
    params = kwargs.get("invocation_params") or {}
    for value in (
        metadata.get("ls_model_name"),
        params.get("model_name"),
        params.get("model"),
        (serialized or {}).get("name"),
    ):
        if isinstance(value, str) and value:
            return value
    return None


class AnsweringModel(BaseCallbackHandler):
    """Hears the model runs of one call of a step (:meth:`EmptyRanking.listening`'s way):
    ``name`` is the name of the last one that ended with an output (a fallback's, not the
    primary that failed), None before any did."""

    def __init__(self) -> None:
        self.name: str | None = None
        self._started: dict[UUID, str | None] = {}

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: Any, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self._started[run_id] = reported_model_name(serialized, kwargs)

    def on_llm_start(
        self, serialized: dict[str, Any], prompts: Any, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self._started[run_id] = reported_model_name(serialized, kwargs)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.name = self._started.pop(run_id, None) or self.name

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._started.pop(run_id, None)


class ShownDocuments(list[Document]):
    """A list of no documents that a fair ranking returned for an empty pool, with that
    ranking's keys (``ranking``, :attr:`fairrag_core.kit.Placed.ranking`) for the record."""

    def __init__(self, ranking: dict[str, Any]) -> None:
        super().__init__()
        self.ranking = ranking
