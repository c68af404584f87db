"""``fairrag_core.kit.placements_metadata``: the placement keys of a whole ranking, built once
per call by both adapters (docs/SPEC.md, "Adapters" → Placement metadata), must be exactly what
``placement_metadata`` gives each placement, with no dict or list shared between documents."""

from __future__ import annotations

import numpy as np
import pytest

from fairrag_core import make_ranker, rerank
from fairrag_core.kit import placement_metadata, placements_metadata

SCORES = np.linspace(0.9, 0.4, 12)
GROUPS = ["female", "male", "male", "female", "male", "male"] * 2


def _ranking(name: str, **params: object):
    ranker = make_ranker(name, **params)
    ids = [f"d{i}" for i in range(len(SCORES) - 1)] + ["d0"]  # one repeated id: left out
    return rerank(ranker, SCORES, GROUPS, 5, rng=np.random.default_rng(3), ids=ids)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("standard", {}),
        ("representative_stochastic", {"protected": "female"}),
        ("fair", {"protected": "female"}),
        ("amortized", {"protected": "female"}),
        ("representative_stochastic", {"target": {"female": 0.3, "male": 0.5, "x": 0.2}}),
    ],
)
@pytest.mark.parametrize("scored", [True, False])
def test_same_keys_as_one_placement_at_a_time(name: str, params: dict, scored: bool) -> None:
    ranking = _ranking(name, **params)
    given = [float(s) for s in SCORES]
    pool_size = len(SCORES) - len(ranking.duplicates)
    whole = placements_metadata(ranking, 17, given, pool_size=pool_size, scored=scored)
    one_by_one = [
        placement_metadata(
            p,
            ranking.ranker,
            17,
            given[p.pool_index],
            pool_size=pool_size,
            fair_k=len(ranking.placements),
            scored=scored,
            ledger_state=ranking.ledger_state,
            target=ranking.target,
        )
        for p in ranking.placements
    ]
    assert whole == one_by_one
    assert [list(m) for m in whole] == [list(m) for m in one_by_one]  # the same key order
    if name == "amortized":
        assert all("ledger_state" in m for m in whole)


def test_no_scores_given_and_nothing_shared() -> None:
    ranking = _ranking("representative_stochastic", protected="female")
    whole = placements_metadata(ranking, None, None, pool_size=11)
    assert [m["retrieval_score"] for m in whole] == [None] * 5
    assert len({id(m) for m in whole}) == 5
    targets = [m["fair_target"] for m in whole]
    assert len({id(t) for t in targets}) == 5
    assert len({id(pair) for t in targets for pair in t}) == 5 * len(targets[0])
    targets[0][0][1] = -1.0  # a change to one document's metadata stays in that document
    assert all(t[0][1] != -1.0 for t in targets[1:])
