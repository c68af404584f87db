"""The kit's main step (fairrag_core.kit.place): the core's ranking, the placement keys and the
document's own metadata, one rule for every adapter."""

from __future__ import annotations

import numpy as np
import pytest

from fairrag_core import make_ranker, rerank
from fairrag_core.kit import (
    RankerConfig,
    RankerState,
    placements_metadata,
    pool_relevance,
    shown_documents,
)
from fairrag_core.kit import place as kit_place


def state(ranker: str = "representative_stochastic") -> RankerState:
    return RankerState(RankerConfig(ranker, protected="female"), owner=0)


METADATAS = [
    {"title": f"P{i}", "gender": "female" if i % 3 == 2 else "male", "ledger_state": "old"}
    for i in range(9)
]


def test_place_is_the_cores_ranking_with_the_kits_placement_keys():
    scores = np.linspace(0.9, 0.1, 9)
    ids = [f"d{i}" for i in range(9)]
    ids[4] = "d1"  # a repeat: left out, the pool is one smaller
    placed = kit_place(
        state(),
        METADATAS,
        scores,
        4,
        group_key="gender",
        ids=ids,
        given=list(scores),
        seed=5,
        extra={"score_source": "test"},
    )
    expected = rerank(
        make_ranker("representative_stochastic", protected="female"),
        scores,
        [m["gender"] for m in METADATAS],
        4,
        rng=np.random.default_rng(5),
        ids=ids,
    )
    assert placed.indices == list(expected.indices) and placed.query_seed == 5
    assert placed.pool_size == 8
    keys = placements_metadata(expected, 5, list(scores), pool_size=8)
    for metadata, placement, index in zip(placed.metadatas, keys, placed.indices, strict=True):
        own = {k: v for k, v in METADATAS[index].items() if k != "ledger_state"}
        assert metadata == {**own, **placement, "score_source": "test"}
    assert all(m["ledger_state"] == "old" for m in METADATAS)  # the caller's dicts untouched


def test_pool_relevance_converts_checks_order_or_ranks_by_incoming_order():
    relevance, scored = pool_relevance([0.1, 0.2, 0.3], "cosine_distance")
    assert scored and relevance.tolist() == pytest.approx([0.9, 0.8, 0.7])
    relevance, scored = pool_relevance([None, None, None])
    assert not scored and relevance[0] > relevance[1] > relevance[2]
    with pytest.raises(ValueError, match=r"positions \[1\]"):
        pool_relevance([0.5, None])
    with pytest.raises(ValueError, match="Use relevance="):  # similarities read as distances
        pool_relevance([0.9, 0.5, 0.1], "cosine_distance", store="TheStore")


def test_shown_documents_follow_the_title_rule_and_unknown_groups():
    shown = shown_documents(
        [7, None], [{"gender": "female"}, {}], ["Title: Ada\nAda.", "No title"], "gender"
    )
    assert [(d.doc_id, d.title, d.group) for d in shown] == [
        ("7", "Ada", "female"),
        (None, None, None),
    ]
