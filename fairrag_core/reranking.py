"""What both framework adapters share: pool -> (scores, groups) -> ranker -> placed results.

The adapters translate their objects into plain values, call :func:`rerank` and translate back;
every decision about groups, missing scores, duplicate documents and exposure lives here so both
behave the same.
"""

from __future__ import annotations

import difflib
import unicodedata
import warnings
import weakref
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .ledger.base import LedgerState
from .ranking import Ranker
from .target import OTHERS, Target, record_key
from .validation import as_score_array, check_groups, check_scores, missing_as_none

__all__ = [
    "Placement",
    "Reranking",
    "group_labels",
    "pool_scores",
    "rerank",
    "scores_from_order",
]


@dataclass(frozen=True)
class Placement:
    """One shown candidate: where it came from and where it went."""

    pool_index: int
    """Index into the pool as given."""
    fair_rank: int
    """1-based rank in the re-ranked list."""
    pool_rank: int
    """1-based rank by score in the pool (ties keep pool order; dropped duplicates not counted)."""
    score: float
    """The candidate's relevance score."""
    exposure_weight: float
    """Position weight ``v_{fair_rank}`` of the ranker's exposure model."""
    group: Hashable | None
    """The candidate's group label (None = unknown)."""


@dataclass(frozen=True)
class Reranking:
    """The re-ranked top-k of a pool."""

    placements: tuple[Placement, ...]
    ranker: str
    quota_shortfall: Mapping[Hashable, int] = field(default_factory=dict)
    duplicates: tuple[int, ...] = ()
    """Pool positions left out because an earlier candidate has the same document id."""
    ledger_state: LedgerState | None = None
    """The amortized ranker's stream as read before the draw (None for other rankers)."""
    target: Target | None = None
    """The target the ranker ranked for (None for a ranker built without one)."""

    @property
    def indices(self) -> list[int]:
        return [p.pool_index for p in self.placements]

    @property
    def groups(self) -> list[Hashable | None]:
        """Group labels in rank order (what the exposure metrics take)."""
        return [p.group for p in self.placements]


def group_labels(
    metadatas: Sequence[Mapping[str, object] | None],
    group_key: str,
    *,
    require_present: bool = True,
) -> list:
    """The ``group_key`` value of each candidate; a candidate without it is unknown (``None``).

    For a retrieved pool (``require_present=True``), a key that no candidate carries is an error,
    not a pool of unknowns: it names the key and the metadata fields that do exist, since it is
    almost always a misspelling; candidates that hold the key with the value None are of the
    unknown group, and a pool of only them is ranked. A short shown list (the top-k, a
    context) may legitimately hold only unknowns, so auditors pass ``require_present=False``.
    """
    if not isinstance(group_key, str) or not group_key:
        raise ValueError(f"group_key must be a non-empty metadata field name, got {group_key!r}")
    labels = list(missing_as_none([None if m is None else m.get(group_key) for m in metadatas]))
    if (
        require_present
        and metadatas
        and all(label is None for label in labels)
        and not any(m is not None and group_key in m for m in metadatas)
    ):  # a candidate holding the key with None is of the unknown group: a pool of them ranks
        fields = sorted({key for m in metadatas if m for key in m})
        raise KeyError(
            f"group_key {group_key!r} is on no candidate of the pool; "
            f"metadata fields present: {fields}"
        )
    return labels


def scores_from_order(n: int) -> np.ndarray:
    """Relevance for candidates that come without scores: ``n, n-1, ..., 1`` (incoming order).

    Only the order matters to the rankers (scores are min-max normalised), so linearly
    decreasing scores keep the incoming ranking and spread it evenly over [1, 2].
    """
    return np.arange(n, 0, -1, dtype=float)


def pool_scores(values: Sequence[float | None]) -> tuple[np.ndarray, bool]:
    """Relevance of each candidate from the scores it came with: ``(scores, from_order)``.

    Every candidate scored: the scores as given (``from_order`` False). None scored: the
    incoming order is the relevance, :func:`scores_from_order` (``from_order`` True). Only some
    scored: there is no sound place for the others among them, so that is a ``ValueError``
    naming their pool positions. Non-finite scores are left for the rankers to reject.
    """
    missing = [i for i, value in enumerate(values) if value is None]
    if not missing:
        return as_score_array(values), False  # True or "0.9" is an error, not 1.0 or 0.9
    if len(missing) == len(values):
        return scores_from_order(len(values)), True
    shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
    raise ValueError(
        f"candidates at pool positions [{shown}] have no score while "
        f"{len(values) - len(missing)} others do; give every candidate a score, or none "
        "(then the incoming order is the relevance)"
    )


def rerank(
    ranker: Ranker,
    scores: Sequence[float] | np.ndarray,
    groups: Sequence[Hashable | None],
    k: int,
    *,
    rng: np.random.Generator | int | None = None,
    ids: Sequence[Hashable | None] | None = None,
) -> Reranking:
    """Rank the pool with ``ranker`` and describe each shown candidate (:class:`Placement`).

    ``ids`` (one document id per candidate, ``None`` = no id) deduplicates the pool before
    ranking: of several candidates with the same id only the **first** in pool order is ranked,
    whatever the later ones' scores or groups, and the others are reported in
    :attr:`Reranking.duplicates` (docs/SPEC.md, after "The four rankers"): one document shown twice
    would count twice toward its group's exposure and fill two of the k slots with one
    source; stores return pools best first, so the first occurrence is the best-scored one,
    and a merged pool (several retrievers) keeps the order it was merged in. Candidates without
    an id are never treated as duplicates. Pool positions in errors and placements always
    refer to the pool as given.
    """
    pool, _, _ = check_scores(scores)  # validate the pool as given: errors name its positions
    groups = check_groups(groups, pool.shape[0])
    kept, duplicates = _first_occurrences(ids, pool.shape[0])
    if duplicates:
        pool = pool[kept]
        groups = [groups[i] for i in kept]
    result = ranker.rank_detailed(pool, groups, k, rng=rng)  # checks labels before the draw
    _warn_of_near_labels(ranker, groups)
    pool_rank = np.empty(pool.shape[0], dtype=np.intp)
    pool_rank[np.argsort(-pool, kind="stable")] = np.arange(1, pool.shape[0] + 1)
    weights = ranker.exposure.entry_weights([groups[i] for i in result.indices])
    placements = tuple(
        Placement(
            pool_index=int(kept[i]) if duplicates else int(i),
            fair_rank=position + 1,
            pool_rank=int(pool_rank[i]),
            score=float(pool[i]),
            exposure_weight=float(weights[position]),
            group=groups[i],
        )
        for position, i in enumerate(result.indices)
    )
    return Reranking(
        placements,
        ranker.name,
        result.quota_shortfall,
        tuple(duplicates),
        getattr(result, "ledger_state", None),
        ranker.target,
    )


_WARNED: weakref.WeakKeyDictionary[Ranker, set[Hashable]] = weakref.WeakKeyDictionary()


def _warn_of_near_labels(ranker: Ranker, groups: Sequence[Hashable | None]) -> None:
    """Warn (once per ranker and group) when a group the target names is on no candidate but a
    label close to it is (``"Female"`` or ``"femal"`` for ``"female"``): a misspelled
    ``protected=`` or ``target=`` would make a fair ranker ignore the group it is for."""
    target = ranker.target
    if target is None:
        return
    labels = set(groups)
    present = {label for label in labels if label is not None}
    named = [g for g in target.groups if g is not OTHERS]
    warned = _WARNED.setdefault(ranker, set())
    # 1 and "1", None (the unknown group) and "None": two groups to the ranker, one key in
    # records (distinct texts never are); any two such labels, named by the target or not (a
    # user trial found only a target's group warned of)
    if not all(type(label) is str for label in labels):
        by_key: dict[str, list[Hashable | None]] = {}
        for label in labels:
            by_key.setdefault(record_key(label), []).append(label)
        for key, alike in by_key.items():
            if len(alike) < 2 or ("alike", key) in warned:
                continue
            warned.add(("alike", key))
            # the target's group first (the one whose share an audit reads), then by text
            first, twin = sorted(alike, key=lambda x: (x not in named, repr(x)))[:2]
            warnings.warn(
                f"the pool holds the labels {first!r} and {twin!r}: two groups to the ranker, "
                f"but records key both as {key!r} (exposure_by_group sums their shares, "
                "which an audit reads as the group's); give each group one label",
                UserWarning,
                stacklevel=4,
            )
    missing = [g for g in named if g not in present]
    if not missing:
        return
    others = {str(label): label for label in present if label not in named}
    folded = {_folded_label(text): label for text, label in others.items()}
    for group in missing:
        if group in warned:
            continue
        near = folded.get(_folded_label(str(group)))
        if near is None:
            close = difflib.get_close_matches(str(group), list(others), n=1, cutoff=0.85)
            near = others[close[0]] if close else None
        if near is not None:
            warned.add(group)
            warnings.warn(
                f"the target names group {group!r}, which is on no candidate of this pool, but "
                f"the label {near!r} is: labels must match exactly, so the ranker gives "
                f"{near!r} no share of its own (check protected= / target=)",
                UserWarning,
                stacklevel=4,
            )


def _folded_label(text: str) -> str:
    """A label as the near-label warning compares it: compatibility-normalised (NFKC: a
    full-width ``ｆｅｍａｌｅ``, an NFD ``Zoë``), case-folded, stripped of white space and
    invisible format characters (a zero-width space)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in text if unicodedata.category(c) != "Cf").strip()


def _first_occurrences(
    ids: Sequence[Hashable | None] | None, n: int
) -> tuple[np.ndarray, list[int]]:
    """``(positions kept, positions dropped)``: the first candidate of each id is kept."""
    if ids is None:
        return np.arange(n), []
    if isinstance(ids, (str, bytes)) or len(ids) != n:
        raise ValueError(f"ids must hold one document id per candidate ({n}), got {ids!r:.100}")
    seen: set[Hashable] = set()
    kept: list[int] = []
    dropped: list[int] = []
    for position, doc_id in enumerate(ids):
        if doc_id is None:
            kept.append(position)
            continue
        try:
            duplicate = doc_id in seen
        except TypeError:
            raise TypeError(
                f"ids must be hashable document ids; pool position {position} holds {doc_id!r:.80}"
            ) from None
        if duplicate:
            dropped.append(position)
        else:
            seen.add(doc_id)
            kept.append(position)
    return np.asarray(kept, dtype=np.intp), dropped
