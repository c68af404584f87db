"""The ranking configuration shared by :class:`FairRetriever` and :class:`FairReranker`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.runnables import RunnableBinding
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_serializer, field_validator

from fairrag_core import ExposureModel, FairnessAuditor, Ranker, Target, group_labels
from fairrag_core.kit import (
    RankerState,
    describe_ranker,
    ledger_location,
    refuse_bools,
)

from ._documents import placed_copies

__all__ = ["FairRankingFields", "fair_component_of"]


def fair_component_of(retriever: Any) -> FairRankingFields | None:
    """The FairRetriever or FairReranker that ranks a retriever's documents, if one is visible:
    the retriever itself, under ``with_config``/``bind`` (``RunnableBinding.bound``, nested any
    depth), or a compression retriever's ``base_compressor``."""
    seen = 0
    while isinstance(retriever, RunnableBinding) and seen < 64:  # bindings of bindings
        retriever, seen = retriever.bound, seen + 1
    component = getattr(retriever, "base_compressor", retriever)
    return component if isinstance(component, FairRankingFields) else None


class FairRankingFields(BaseModel):
    """Which core ranker re-ranks the pool, against which target, and how many it shows.

    The core ranker is built from these fields by the core's adapter kit
    (:class:`fairrag_core.kit.RankerState`, docs/SPEC.md "Adapters" → Ranker configuration) and
    rebuilt whenever a field changes, by assignment, in place or through
    ``model_copy(update=...)``; a copy never shares the original's random generator. Bad
    configuration fails when the object is built (and when a changed field is next used), with
    the core's message; unknown arguments are refused.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    ranker: str | Ranker = "representative_stochastic"
    """A core ranker name (``fairrag_core.available_rankers()``) or a built core ``Ranker``."""
    group_key: str
    """The metadata field holding each document's group, e.g. ``"gender"`` (required)."""
    protected: Any = None
    """The protected group of the binary target, e.g. ``"female"``."""
    target_share: float | None = None
    """The protected group's target exposure share (core default 0.5, parity)."""
    target: dict[Any, float] | Target | None = None
    """A full target ``{group: share}`` instead of ``protected``/``target_share``."""
    k: int = Field(default=5, ge=1)
    """How many documents to return."""
    seed: int | None = None
    """Seed of the generator the per-query seeds are drawn from (stochastic rankers)."""
    ranker_params: dict[str, Any] = Field(default_factory=dict)
    """Ranker-specific parameters, e.g. ``{"alpha": 4.0, "gain": 2.0}``."""
    ledger: Any = None
    """The amortized ranker's exposure ledger (a ledger, a SQLite path or a redis:// URL)."""
    ledger_key: str | None = None
    """The amortized ranker's stream in the ledger (a tenant, a topic; default "default")."""

    _state: RankerState | None = PrivateAttr(default=None)

    @field_validator("k", "target_share", "seed", "target", mode="before")
    @classmethod
    def _no_bools(cls, value: Any, info: Any) -> Any:
        return refuse_bools(value, info.field_name)

    @field_validator("group_key")
    @classmethod
    def _group_key_named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(
                "group_key must name the metadata field holding each document's group, "
                "e.g. 'gender'; got an empty string"
            )
        return value

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._state = RankerState.current(None, self)

    @field_serializer("ranker")
    def _serialize_ranker(self, ranker: str | Ranker) -> Any:
        return ranker if isinstance(ranker, str) else describe_ranker(ranker)

    @field_serializer("ledger")
    def _serialize_ledger(self, ledger: Any) -> Any:
        # a ledger object by its location (a path or URL, never a password)
        return ledger if ledger is None or isinstance(ledger, str) else ledger_location(ledger)

    @property
    def ranker_state(self) -> RankerState:
        """The core ranker of the current fields (rebuilt when they changed) and its seeds."""
        state = RankerState.current(self._state, self)
        self._state = state
        return state

    @property
    def core_ranker(self) -> Ranker:
        """The fairrag_core ranker doing the work, as the fields describe it now."""
        return self.ranker_state.ranker

    @property
    def ranker_name(self) -> str:
        """The name of the core ranker in use (what the ``ranker`` metadata says)."""
        return self.core_ranker.name

    @property
    def fairness_target(self) -> Target | None:
        """The core ranker's fairness target (None for a ranker built without one)."""
        return self.core_ranker.target

    @property
    def fairness_exposure(self) -> ExposureModel:
        """The core ranker's exposure model (the position weights its placements carry)."""
        return self.core_ranker.exposure

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
        groups = group_labels([document.metadata for document in documents], self.group_key)
        ids = [document.id for document in documents]
        reranking, query_seed = self.ranker_state.rerank(scores, groups, k, ids=ids, seed=seed)
        return placed_copies(
            documents,
            reranking,
            query_seed,
            pool_size=len(documents) - len(reranking.duplicates),
            retrieval_scores=given,
            scored=scored,
            extra=extra,
        )

    @property
    def auditor(self) -> FairnessAuditor | None:
        """An auditor with the ranker's own target and exposure model (None without a target)."""
        ranker = self.core_ranker
        return None if ranker.target is None else FairnessAuditor(ranker.target, ranker.exposure)
