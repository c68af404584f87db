"""The ranker interface every fairness-aware ranker implements, and its detailed result."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, NamedTuple

import numpy as np

from .exposure import ExposureModel, make_exposure_model
from .target import Target, make_target
from .validation import as_rng, check_groups, check_k, check_n_samples, check_scores

__all__ = ["CandidatePool", "Ranker", "RankingResult"]

_EMPTY = np.empty(0, dtype=np.intp)
_EMPTY.setflags(write=False)


class CandidatePool(NamedTuple):
    """A validated, non-empty pool as the rankers' ``_rank`` receive it."""

    scores: np.ndarray
    """Relevance scores, finite, one per candidate."""
    low: float
    """``min(scores)``."""
    high: float
    """``max(scores)``."""
    codes: np.ndarray | None
    """Target bucket of each candidate (index into ``target.groups``); None if groups unused."""


@dataclass(frozen=True)
class RankingResult:
    """A ranking with what the ranker has to say about it."""

    indices: np.ndarray
    """Pool indices, best first; ``min(k, n)`` distinct values."""
    quota_shortfall: Mapping[Hashable, int] = field(default_factory=dict)
    """Slots a group was owed but could not fill for lack of candidates (given back to others)."""


class Ranker(ABC):
    """Re-ranks a candidate pool into a top-k list of pool indices (docs/SPEC.md, "Inputs").

    Every ranker takes ``scores`` (higher = more relevant), one group label per candidate and
    ``k``, and returns ``min(k, n)`` distinct pool indices, best first; an empty pool gives an
    empty ranking. Stochastic rankers draw from the ``rng`` given to :meth:`rank` (a Generator or
    an int seed); without one they draw from the ranker's own Generator, built once from
    ``seed``, so a ranker built with the same seed yields the same sequence of rankings in any
    process.

    Fairness configuration: ``protected`` (+ ``target_share``, default 0.5) for the binary case,
    or ``target`` ``{group: share}`` for several groups; see :func:`fairrag_core.make_target`.
    """

    name: ClassVar[str]
    deterministic: ClassVar[bool] = False
    """Whether a pool always gets the same ranking (then :meth:`sample` repeats one ranking)."""
    uses_groups: ClassVar[bool] = True
    """Whether the ranking depends on the groups (False: they are only length-checked)."""
    requires_target: ClassVar[bool] = True
    """Whether a fairness target must be given (False: it is optional, kept for the metrics)."""
    binary_target: ClassVar[bool] = False
    """Whether only a binary target is accepted (one protected group against the rest)."""
    stateful: ClassVar[bool] = False
    """Whether each ranking changes the next (a ledger): then a sweep runs it as one stream."""
    targets_exposure: ClassVar[bool] = False
    """Whether it aims the groups' exposure shares at the target under its exposure model
    (:meth:`~fairrag_core.exposure.ExposureModel.effective_shares`: a per-group fitted
    model's factors then set its target shares, docs/SPEC.md "Exposure model")."""
    in_default_study: ClassVar[bool] = False
    """Whether ``fairrag study`` runs it by default (a new ranker is run when named)."""
    sweep_grid: ClassVar[Mapping[str, tuple[float, ...]]] = MappingProxyType({})
    """The default grid of ``fairrag sweep`` (docs/SPEC.md, "Sweep"): values per knob."""
    knobs: ClassVar[tuple[str, ...]] = ()
    """The keyword parameters a sweep grid may set (their defaults: the signature's)."""
    binary_knobs: ClassVar[tuple[str, ...]] = ()
    """Knobs that set the protected group's share: only for a binary target."""

    def __init__(
        self,
        *,
        protected: Hashable | None = None,
        target_share: float | None = None,
        target: Mapping[Hashable, float] | Target | None = None,
        seed: int | None = None,
        exposure: str | ExposureModel | None = None,
    ) -> None:
        if self.requires_target or protected is not None or target is not None:
            self.target: Target | None = make_target(
                protected=protected, target_share=target_share, target=target
            )
        elif target_share is not None:
            raise ValueError("target_share needs protected=<group> to say whose share it is")
        else:
            self.target = None
        self.exposure = make_exposure_model(exposure)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        if seed is not None and seed < 0:
            raise ValueError(f"seed must be an int >= 0 or None, got {seed!r}")
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def rank(
        self,
        scores: Sequence[float] | np.ndarray,
        groups: Sequence[Hashable] | None = None,
        k: int = 5,
        *,
        rng: np.random.Generator | int | None = None,
    ) -> np.ndarray:
        """Pool indices of the top-``k``, best first (an int array of length ``min(k, n)``)."""
        pool, k, generator = self._prepare(scores, groups, k, rng)
        return _EMPTY if pool is None else self._rank(pool, k, generator)

    def rank_detailed(
        self,
        scores: Sequence[float] | np.ndarray,
        groups: Sequence[Hashable] | None = None,
        k: int = 5,
        *,
        rng: np.random.Generator | int | None = None,
    ) -> RankingResult:
        """Like :meth:`rank`, with the ranker's notes (e.g. quota shortfalls)."""
        pool, k, generator = self._prepare(scores, groups, k, rng)
        return RankingResult(_EMPTY) if pool is None else self._rank_detailed(pool, k, generator)

    def sample(
        self,
        scores: Sequence[float] | np.ndarray,
        groups: Sequence[Hashable] | None = None,
        k: int = 5,
        n_samples: int = 100,
        *,
        rng: np.random.Generator | int | None = None,
    ) -> np.ndarray:
        """``n_samples`` independent rankings of one pool: an int array (n_samples, min(k, n)).

        Each row is a valid ranking, distributed as one :meth:`rank` call; the input is
        validated exactly as there, and ``rng`` is honoured the same way (with the same seed,
        the same batch). A deterministic ranker gives its one ranking ``n_samples`` times; the
        stochastic rankers draw all rows at once, vectorised across draws (what expected
        exposure needs: docs/SPEC.md, "Metrics over many rankings").
        """
        n_samples = check_n_samples(n_samples)
        pool, k, generator = self._prepare(scores, groups, k, rng)
        if pool is None:
            return np.empty((n_samples, 0), dtype=np.intp)
        return self._sample(pool, k, n_samples, generator)

    def _prepare(
        self,
        scores: object,
        groups: Sequence[Hashable] | None,
        k: object,
        rng: np.random.Generator | int | None,
    ) -> tuple[CandidatePool | None, int, np.random.Generator]:
        scores, low, high = check_scores(scores)
        k = check_k(k)
        n = scores.shape[0]
        given = groups is not None
        groups = check_groups(groups, n)
        if given and self.exposure.per_group:  # before the draw: a ledger counts what it ranks
            self.exposure.check_labels(groups)
        generator = self._rng if rng is None else as_rng(rng)
        if n == 0:
            return None, 0, generator
        codes = None
        if self.uses_groups:
            assert self.target is not None  # a ranker that uses groups requires a target
            codes = self.target.encode(groups)
        return CandidatePool(scores, low, high, codes), min(k, n), generator

    @abstractmethod
    def _rank(self, pool: CandidatePool, k: int, rng: np.random.Generator) -> np.ndarray:
        """Rank a validated, non-empty pool; ``1 <= k <= n``."""

    def _rank_detailed(
        self, pool: CandidatePool, k: int, rng: np.random.Generator
    ) -> RankingResult:
        return RankingResult(self._rank(pool, k, rng))

    def _sample(
        self, pool: CandidatePool, k: int, n_samples: int, rng: np.random.Generator
    ) -> np.ndarray:
        """``n_samples`` rankings of a validated, non-empty pool, shape (n_samples, k).

        By default: one ranking repeated when :attr:`deterministic`, else successive
        :meth:`_rank` calls. Stochastic rankers override it with a draw vectorised across rows.
        """
        if self.deterministic:
            return np.tile(self._rank(pool, k, rng), (n_samples, 1))
        out = np.empty((n_samples, k), dtype=np.intp)
        for row in out:
            row[:] = self._rank(pool, k, rng)
        return out

    def __repr__(self) -> str:
        target = None if self.target is None else self.target.as_dict()
        return f"{type(self).__name__}(target={target}, seed={self.seed!r})"
