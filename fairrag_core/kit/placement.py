"""The metadata every document shown after a fair re-ranking carries (docs/SPEC.md, "Adapters"
→ Placement metadata), the same keys in every framework."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ..audit import FairnessAuditor, json_label
from ..ledger.base import LedgerState
from ..reranking import Placement, Reranking
from ..target import Target, make_target

__all__ = [
    "LEDGER_PLACEMENT_KEYS",
    "PLACEMENT_KEYS",
    "drop_stale_placement",
    "is_placed",
    "placement_metadata",
    "placements_metadata",
    "ranked_for",
    "ranking_metadata",
    "shown_provenance",
    "target_pairs",
]

PLACEMENT_KEYS = (
    "relevance_score",
    "retrieval_score",
    "fair_rank",
    "pool_rank",
    "exposure_weight",
    "ranker",
    "query_seed",
    "pool_size",
    "fair_k",
    "fair_target",
)
"""Keys added to each shown document's metadata; never shown to the LLM nor embedded."""
LEDGER_PLACEMENT_KEYS = ("ledger_state",)
"""Added besides by the amortized ranker (the stream it drew from); hidden alike."""


def placement_metadata(
    placement: Placement,
    ranker: str,
    query_seed: int | None,
    retrieval_score: Any = None,
    *,
    pool_size: int,
    fair_k: int,
    scored: bool = True,
    ledger_state: LedgerState | None = None,
    target: Target | None = None,
) -> dict[str, Any]:
    """The placement keys of one shown document.

    ``relevance_score`` is the relevance ranked on (None when the pool had no scores and its
    incoming order was the relevance: ``scored=False``); ``retrieval_score`` the score the
    store or the previous step gave, as it came; ``pool_size`` the candidates ranked,
    ``fair_k`` the length of the fair list; ``fair_target`` the target the ranker ranked for
    (:func:`target_pairs`; None without one); ``ledger_state`` (the amortized ranker's stream
    as read before the draw, :attr:`~fairrag_core.Reranking.ledger_state`) adds that key, as
    :meth:`~fairrag_core.ledger.LedgerState.as_record` writes it.
    """
    extra = {} if ledger_state is None else {"ledger_state": ledger_state.as_record()}
    return {
        "relevance_score": placement.score if scored else None,
        "retrieval_score": retrieval_score,
        "fair_rank": placement.fair_rank,
        "pool_rank": placement.pool_rank,
        "exposure_weight": placement.exposure_weight,
        "ranker": ranker,
        "query_seed": query_seed,
        "pool_size": pool_size,
        "fair_k": fair_k,
        "fair_target": None if target is None else target_pairs(target),
        **extra,
    }


def placements_metadata(
    reranking: Reranking,
    query_seed: int | None,
    retrieval_scores: Sequence[Any] | None = None,
    *,
    pool_size: int,
    scored: bool = True,
) -> list[dict[str, Any]]:
    """:func:`placement_metadata` of every placement of ``reranking``, in fair-rank order
    (``retrieval_scores``: each pool candidate's score as it came, by pool index; None: none).

    The same dicts as calling :func:`placement_metadata` once per placement, each its own (no
    list or dict is shared between two documents), with what they share (the target's pairs,
    ``fair_k``) worked out once per ranking.
    """
    common = ranking_metadata(reranking, query_seed, pool_size=pool_size)
    pairs = common["fair_target"]
    ledger_state = reranking.ledger_state
    out = []
    for placement in reranking.placements:
        index = placement.pool_index
        metadata = {
            "relevance_score": placement.score if scored else None,
            "retrieval_score": None if retrieval_scores is None else retrieval_scores[index],
            "fair_rank": placement.fair_rank,
            "pool_rank": placement.pool_rank,
            "exposure_weight": placement.exposure_weight,
            **common,
            "fair_target": None if pairs is None else [list(pair) for pair in pairs],
        }
        if ledger_state is not None:
            metadata["ledger_state"] = ledger_state.as_record()
        out.append(metadata)
    return out


def ranking_metadata(
    reranking: Reranking, query_seed: int | None, *, pool_size: int
) -> dict[str, Any]:
    """The placement keys every document of one fair ranking shares: ``ranker``,
    ``query_seed``, ``pool_size``, ``fair_k`` (the fair list's length), ``fair_target`` (and
    an amortized ranking's ``ledger_state``). What an adapter hands a record of a ranking that
    placed no document, an empty pool (:func:`shown_provenance`'s ``ranking``; docs/SPEC.md,
    "Adapters" → Which list is audited), since no document carries them."""
    target = reranking.target
    metadata: dict[str, Any] = {
        "ranker": reranking.ranker,
        "query_seed": query_seed,
        "pool_size": pool_size,
        "fair_k": len(reranking.placements),
        "fair_target": None if target is None else target_pairs(target),
    }
    if reranking.ledger_state is not None:
        metadata["ledger_state"] = reranking.ledger_state.as_record()
    return metadata


def target_pairs(target: Target) -> list[list[Any]]:
    """A target as placement metadata holds it: ``[[label, share], ...]`` in the target's
    order, labels as JSON values (:func:`fairrag_core.audit.json_label`; the others bucket as
    ``"OTHERS"``), so that ``int`` labels stay ints through a JSON round trip."""
    return [[json_label(group), float(share)] for group, share in target.as_dict().items()]


def ranked_for(
    auditor: FairnessAuditor, metadatas: Sequence[Mapping[str, Any] | None]
) -> FairnessAuditor:
    """The auditor of a shown list, for a handler that follows a component: ``auditor`` with
    the target the list's fair ranking was drawn for when its placement metadata says it was
    another one (a per-call copy of the component: LangChain's ``configurable_fields``, a
    ``model_copy``), else ``auditor`` itself (docs/SPEC.md, "Records": ``target``)."""
    placed = _placed(metadatas)
    pairs = placed[0].get("fair_target") if placed else None
    if not pairs or any(m.get("fair_target") != pairs for m in placed):
        return auditor
    if pairs == target_pairs(auditor.target):
        return auditor
    try:
        shares = dict(pairs)  # its "OTHERS" key read by make_target
        protected = auditor.target.protected if auditor.target.protected in shares else None
        target = make_target(target=shares, protected=protected)
    except (TypeError, ValueError):  # not a target this kit wrote: the component's own stands
        return auditor
    return FairnessAuditor(target, auditor.exposure)


def drop_stale_placement(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata`` without the keys only some rankings add (:data:`LEDGER_PLACEMENT_KEYS`): a
    document placed again by another fair ranking must not keep an earlier one's. Without any
    of them, ``metadata`` itself (callers copy it into the placed document's new dict)."""
    if _LEDGER_KEYS.isdisjoint(metadata):
        return metadata
    return {key: value for key, value in metadata.items() if key not in _LEDGER_KEYS}


_LEDGER_KEYS = frozenset(LEDGER_PLACEMENT_KEYS)


def shown_provenance(
    metadatas: Sequence[Mapping[str, Any] | None],
    ranked: Sequence[Mapping[str, Any] | None] | None = None,
    ranking: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """How the list the LLM was shown relates to the fair ranking its documents came from.

    docs/SPEC.md, "Adapters" → Which list is audited. ``ranker`` names the fair ranker only
    when every shown document was placed by one and the same fair ranking (same ranker and
    ``query_seed``); then ``reordered_after_ranking`` says whether a later step changed their
    order and ``dropped_after_ranking`` how many of its ``fair_k`` documents a later step left
    out. A list mixing placed and other documents (a merge of several retrievers), or
    documents placed by several rankers or for several targets, has ranker None and
    ``mixed_after_ranking`` True; a list of documents that several rankings of one ranker for
    one target placed (a ``MultiQueryRetriever``'s union of its queries' lists) keeps
    ``ranker``, counts the rankings in ``merged_rankings`` and has no ``query_seed``,
    ``pool_size`` or ``k``; a list with no placed document describes itself (ranker None,
    nothing else).

    ``ranked``: the metadata of the list the run's last fair ranking returned, when the adapter
    saw it (a postprocessor or a retriever nested in the one whose list was shown). It matters
    only when no shown document was placed: an empty shown list then had every document of
    that ranking dropped (``ranker`` names it, ``dropped_after_ranking`` is its ``fair_k``), and
    a list of other documents only replaced it (``mixed_after_ranking``).

    ``ranking``: the keys of the run's last fair ranking (:func:`ranking_metadata`) when it
    placed no document (an empty pool), which no metadata carries: an empty shown list then
    names it (``ranker``, ``query_seed``, ``pool_size``, ``k`` 0), a list of other documents
    replaced it (``mixed_after_ranking``).
    """
    placed = _placed(metadatas)
    if not placed:
        return _without_placed_documents(len(metadatas), _placed(ranked or []), ranking)
    first = placed[0]
    same = _rankings_count(placed) == 1 and all(
        m.get("ranker") == first.get("ranker") and m.get("query_seed") == first.get("query_seed")
        for m in placed
    )
    if len(placed) == len(metadatas) and not same:
        merged = _merged_rankings(placed)
        if merged is not None:
            _warn_if_ledger_missed_it(placed, "was merged with other rankings")
            return merged
    if len(placed) != len(metadatas) or not same:
        _warn_if_ledger_missed_it(placed, "was mixed with other documents")
        return {**_NO_RANKING, "mixed_after_ranking": True}
    ranks = [m.get("fair_rank") for m in placed]
    fair_k = first.get("fair_k")
    provenance = {
        **_ranking_of(first),
        "reordered_after_ranking": ranks != sorted(ranks, key=lambda r: (r is None, r)),
        "dropped_after_ranking": max(0, fair_k - len(placed)) if isinstance(fair_k, int) else 0,
    }
    if provenance["reordered_after_ranking"] or provenance["dropped_after_ranking"]:
        _warn_if_ledger_missed_it(placed, "was reordered or cut")
    return provenance


_NO_RANKING = {"ranker": None, "query_seed": None, "pool_size": None, "k": None}


def _merged_rankings(placed: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Provenance of a list that merges several fair rankings by one ranker for one target
    (a ``MultiQueryRetriever``'s union of its queries' lists): ``ranker`` names it,
    ``merged_rankings`` counts the rankings (by query seed); no one ranking's ``query_seed``,
    ``pool_size`` or ``k``. None when the rankers or targets differ (a mixed list)."""
    first = placed[0]
    if any(
        m.get("ranker") != first.get("ranker") or m.get("fair_target") != first.get("fair_target")
        for m in placed
    ):
        return None
    count = _rankings_count(placed)
    return {**_NO_RANKING, "ranker": first.get("ranker"), "merged_rankings": count}


_RANKING_KEYS = ("query_seed", "pool_size", "fair_k", "ledger_state")
"""What one fair ranking's documents share."""


_PLACEMENT_OF = ("pool_rank", "retrieval_score")
"""What tells one ranking's placement from another's at the same fair rank: the candidate's
place in its pool and the store's score for it, which chunks or copies of a placed document
keep (a splitter adds its own keys, ``start_index``; a later reranker may rewrite
``relevance_score``)."""


def _rankings_count(placed: Sequence[Mapping[str, Any]]) -> int:
    """How many fair rankings placed these documents, at least: one per query seed (with its
    pool size, list length and ledger state), and within one, as many as different placements
    share a fair rank (rankings of several queries under one caller's seed, a ``query_seed``
    block, share the seed: two other candidates at rank 1 are two rankings). A placement is
    told by :data:`_PLACEMENT_OF`, which chunks or copies of a placed document share."""
    ranks: dict[str, dict[str, set[str]]] = {}
    for m in placed:
        at = ranks.setdefault(repr(tuple(m.get(f) for f in _RANKING_KEYS)), {})
        at.setdefault(repr(m.get("fair_rank")), set()).add(
            repr(tuple(m.get(f) for f in _PLACEMENT_OF))
        )
    return sum(max(len(p) for p in placements.values()) for placements in ranks.values())


def is_placed(metadata: Mapping[str, Any] | None) -> bool:
    """Whether a document's metadata says a fair ranking placed it."""
    return metadata is not None and "fair_rank" in metadata and metadata.get("ranker") is not None


def _placed(metadatas: Sequence[Mapping[str, Any] | None]) -> list[Mapping[str, Any]]:
    """The metadata of the documents a fair ranking placed."""
    return [m for m in metadatas if m is not None and is_placed(m)]


def _ranking_of(first: Mapping[str, Any]) -> dict[str, Any]:
    """The fair ranking a placed document's metadata names (with an amortized ranking's
    ``ledger_state``)."""
    ranking = {
        "ranker": first.get("ranker"),
        "query_seed": first.get("query_seed"),
        "pool_size": first.get("pool_size"),
        "k": first.get("fair_k"),
    }
    if "ledger_state" in first:
        ranking["ledger_state"] = first["ledger_state"]
    return ranking


def _without_placed_documents(
    shown: int, ranked: list[Mapping[str, Any]], ranking: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Provenance of a shown list without placed documents, given the run's last fair list
    (``ranking``: the keys of a last fair ranking that placed nothing)."""
    if not ranked and ranking is not None and ranking.get("ranker") is not None:
        if shown:  # other documents stood in for an empty fair list
            return {**_NO_RANKING, "mixed_after_ranking": True}
        return {
            **_ranking_of(ranking),
            "reordered_after_ranking": False,
            "dropped_after_ranking": 0,
        }
    if not ranked:
        return dict(_NO_RANKING)  # no fair ranking is known to have run: a plain list
    if shown:
        _warn_if_ledger_missed_it(ranked, "was replaced by other documents", 4)
        return {**_NO_RANKING, "mixed_after_ranking": True}
    _warn_if_ledger_missed_it(ranked, "had every document removed", 4)
    fair_k = ranked[0].get("fair_k")
    return {
        **_ranking_of(ranked[0]),
        "reordered_after_ranking": False,
        "dropped_after_ranking": fair_k if isinstance(fair_k, int) else len(ranked),
    }


def _warn_if_ledger_missed_it(
    placed: Sequence[Mapping[str, Any]], how: str, stacklevel: int = 3
) -> None:
    """Warn when a list an amortized ranker served was changed before the LLM saw it: its
    ledger counted the ranking as served (docs/SPEC.md item 6, "What counts as served")."""
    if any(m.get("ranker") == "amortized" for m in placed):
        warnings.warn(
            f"an amortized ranking {how} after it was ranked: its ledger counted the ranking "
            "as served, not the list the LLM saw, and steers the stream by it; put the "
            "amortized ranker last",
            UserWarning,
            stacklevel=stacklevel,
        )
