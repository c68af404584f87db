"""FairReranker: scores from metadata or from the incoming order, copies, errors."""

from __future__ import annotations

import copy

import pytest

from fairrag_langchain import FairReranker
from tests.langchain.doubles import imbalanced_pool, person_documents


def scored(documents, scores):
    return [
        d.model_copy(update={"metadata": {**d.metadata, "relevance_score": s}})
        for d, s in zip(documents, scores, strict=True)
    ]


def titles(documents) -> list[str]:
    return [d.metadata["title"] for d in documents]


@pytest.fixture
def pool():
    documents, distances = imbalanced_pool()
    return scored(documents, [1.0 - d for d in distances])


def test_scores_from_metadata(pool):
    # Reversed input order: the standard ranker must follow the scores, not the order.
    shown = FairReranker(group_key="gender", ranker="standard", k=3).compress_documents(
        pool[::-1], "q"
    )
    assert titles(shown) == titles(pool[:3])
    assert [d.metadata["pool_rank"] for d in shown] == [1, 2, 3]
    assert all(d.metadata["score_source"] == "metadata:relevance_score" for d in shown)
    assert shown[0].metadata["relevance_score"] == pool[0].metadata["relevance_score"]


def test_scores_from_incoming_order_when_no_document_has_one():
    documents = person_documents(["male"] * 6 + ["female"] * 4)
    shown = FairReranker(group_key="gender", ranker="standard", k=4).compress_documents(
        documents, "q"
    )
    assert titles(shown) == titles(documents[:4])
    assert all(d.metadata["score_source"] == "incoming_order" for d in shown)
    assert shown[0].metadata["relevance_score"] is None  # no score is invented
    fair = FairReranker(group_key="gender", ranker="forced_exposure", protected="female", k=4)
    groups = [d.metadata["gender"] for d in fair.compress_documents(documents, "q")]
    assert groups.count("female") == 2


def test_a_custom_score_key(pool):
    documents = [
        d.model_copy(update={"metadata": {**d.metadata, "rerank": -i}})
        for i, d in enumerate(pool[::-1])
    ]
    shown = FairReranker(
        group_key="gender", ranker="standard", k=2, score_key="rerank"
    ).compress_documents(documents, "q")
    assert titles(shown) == titles(documents[:2])
    assert shown[0].metadata["score_source"] == "metadata:rerank"


def test_scores_on_some_documents_only_is_an_error_naming_positions(pool):
    mixed = list(pool[:6])
    for i in (2, 4):
        meta = dict(mixed[i].metadata)
        del meta["relevance_score"]
        mixed[i] = mixed[i].model_copy(update={"metadata": meta})
    with pytest.raises(ValueError, match=r"'relevance_score'.*positions \[2, 4\]"):
        FairReranker(group_key="gender", ranker="standard").compress_documents(mixed, "q")


def test_non_finite_scores_are_the_cores_error(pool):
    bad = scored(pool[:3], [0.5, float("nan"), 0.2])
    with pytest.raises(ValueError, match="finite"):
        FairReranker(group_key="gender", ranker="standard").compress_documents(bad, "q")


def test_inputs_are_never_changed(pool):
    before = copy.deepcopy(pool)
    shown = FairReranker(group_key="gender", protected="female", seed=3).compress_documents(
        pool, "q"
    )
    assert pool == before
    assert not {id(d) for d in shown} & {id(d) for d in pool}


def test_moves_protected_exposure_toward_target(pool):
    reranker = FairReranker(group_key="gender", protected="female", seed=0)
    shares = []
    for _ in range(200):
        groups = [d.metadata["gender"] for d in reranker.compress_documents(pool, "q")]
        shares.append(groups.count("female") / len(groups))
    assert 0.35 < sum(shares) / len(shares) < 0.65


def test_wrong_group_key_and_empty_input(pool):
    with pytest.raises(KeyError, match="sex"):
        FairReranker(protected="female", group_key="sex").compress_documents(pool, "q")
    assert FairReranker(group_key="gender", protected="female").compress_documents([], "q") == []


async def test_async_compress_matches_sync(pool):
    a = FairReranker(group_key="gender", protected="female", seed=11)
    b = FairReranker(group_key="gender", protected="female", seed=11)
    assert titles(await a.acompress_documents(pool, "q")) == titles(b.compress_documents(pool, "q"))
