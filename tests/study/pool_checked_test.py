"""PoolCheckedCollection: a query whose rows repeat a document (as a reopened persistent Chroma
index returns, chroma-core/chroma#3638's family) is asked again for more candidates and each
row keeps the first occurrence of each id, so a pool holds ``n_results`` distinct documents;
repeats that do not go away, and short pools, are a damaged index."""

from __future__ import annotations

from typing import Any

import pytest

from fairrag_study.errors import IndexDamagedError
from fairrag_study.phases.index import PoolCheckedCollection


class FakeRepeatingCollection:
    """A test double of a Chroma collection over ``documents`` (ids in distance order) whose
    query answers repeat ``repeated`` right after itself in every row (when it is among the
    first ``n_results``), the way the reopened index did."""

    def __init__(self, documents: list[str], repeated: str | None, rows: int = 2) -> None:
        self.documents, self.repeated, self.rows = documents, repeated, rows
        self.asked: list[int] = []
        self.name = "fake"

    def query(self, **kwargs: Any) -> dict[str, Any]:
        n = kwargs["n_results"]
        self.asked.append(n)
        ids: list[str] = []
        for doc_id in self.documents:
            ids.append(doc_id)
            if doc_id == self.repeated:
                ids.append(doc_id)
        ids = ids[:n]
        return {
            "ids": [list(ids) for _ in range(self.rows)],
            "distances": [[0.1 * self.documents.index(i) for i in ids] for _ in range(self.rows)],
            "metadatas": [[{"title": i} for i in ids] for _ in range(self.rows)],
            "documents": None,
            "included": ["distances", "metadatas"],
        }


DOCUMENTS = [f"d{i}" for i in range(10)]


def test_a_repeated_document_is_replaced_by_the_next_candidate():
    fake = FakeRepeatingCollection(DOCUMENTS, repeated="d2")
    result = PoolCheckedCollection(fake, 10, "here").query(query_embeddings=[[0.0]], n_results=5)
    assert fake.asked == [5, 6]
    assert result["ids"] == [["d0", "d1", "d2", "d3", "d4"]] * 2
    assert result["distances"][0] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert result["metadatas"][1][4] == {"title": "d4"}
    assert result["documents"] is None and result["included"] == ["distances", "metadatas"]
    assert PoolCheckedCollection(fake, 10, "here").name == "fake"
    fickle = FakeRepeatingCollection(DOCUMENTS, repeated="d2")
    first = fickle.query
    fickle.query = lambda **kwargs: (  # type: ignore[method-assign]
        first(**kwargs)
        if kwargs["n_results"] == 5
        else FakeRepeatingCollection(DOCUMENTS, None).query(**kwargs)
    )
    result = PoolCheckedCollection(fickle, 10, "here").query(query_embeddings=[[0.0]], n_results=5)
    assert result["ids"][0] == DOCUMENTS[:5]  # asked again, no repeat then: cut to the 5 asked


def test_a_pool_without_repeats_is_asked_for_once_and_returned_as_it_came():
    fake = FakeRepeatingCollection(DOCUMENTS, repeated=None)
    result = PoolCheckedCollection(fake, 10, "here").query(query_embeddings=[[0.0]], n_results=5)
    assert fake.asked == [5] and result["ids"][0] == DOCUMENTS[:5]


def test_repeats_the_store_cannot_fill_and_short_pools_are_a_damaged_index():
    fake = FakeRepeatingCollection(DOCUMENTS[:4], repeated="d2")  # 4 documents, one repeated
    with pytest.raises(IndexDamagedError, match="returned 4 distinct candidates for a pool of 5"):
        PoolCheckedCollection(fake, 5, "here").query(query_embeddings=[[0.0]], n_results=5)
    assert fake.asked == [5, 6]  # the store had no more to give: no further top-up
    stubborn = FakeRepeatingCollection(DOCUMENTS, repeated="d0")
    stubborn.query = lambda **kwargs: {"ids": [["d0"] * kwargs["n_results"]]}  # type: ignore
    with pytest.raises(IndexDamagedError, match="returned 1 distinct candidates for a pool of 5"):
        PoolCheckedCollection(stubborn, 10, "here").query(query_embeddings=[[0.0]], n_results=5)
    short = FakeRepeatingCollection(DOCUMENTS[:3], repeated=None)
    with pytest.raises(IndexDamagedError, match="returned 3 distinct candidates for a pool of 5"):
        PoolCheckedCollection(short, 10, "here").query(query_embeddings=[[0.0]], n_results=5)
    filtered = PoolCheckedCollection(short, 10, "here").query(
        query_embeddings=[[0.0]], n_results=5, where={"gender": "female"}
    )
    assert filtered["ids"][0] == DOCUMENTS[:3]  # a filtered pool may be short
