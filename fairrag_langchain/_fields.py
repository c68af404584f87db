"""The ranking configuration shared by :class:`FairRetriever` and :class:`FairReranker`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from fairrag_core import ExposureModel, Ranker, Target, configure_ranker

__all__ = ["FairRankingFields"]


class FairRankingFields(BaseModel):
    """Which core ranker re-ranks the pool, against which target, and how many it shows.

    The ranker is built once, when the model is created, by the core's
    :func:`~fairrag_core.configure_ranker` (only the arguments that are set are passed, so a
    ready :class:`~fairrag_core.Ranker` is used as is).
    Bad configuration fails there, with the core's message.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

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
    """Seed of the ranker's own random generator (stochastic rankers)."""
    ranker_params: dict[str, Any] = Field(default_factory=dict)
    """Ranker-specific parameters, e.g. ``{"alpha": 4.0, "gain": 2.0}``."""

    _ranker: Ranker = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._ranker = configure_ranker(
            self.ranker,
            protected=self.protected,
            target_share=self.target_share,
            target=self.target,
            seed=self.seed,
            params=self.ranker_params,
        )

    @property
    def ranker_name(self) -> str:
        """The name of the core ranker in use (what the ``ranker`` metadata says)."""
        return self._ranker.name

    @property
    def fairness_target(self) -> Target | None:
        """The core ranker's fairness target (None for a ranker built without one)."""
        return self._ranker.target

    @property
    def fairness_exposure(self) -> ExposureModel:
        """The core ranker's exposure model (the position weights its placements carry)."""
        return self._ranker.exposure
