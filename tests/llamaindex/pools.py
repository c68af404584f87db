"""Small synthetic pools for the fast tests: scored nodes with a group and a title, and a
retriever that serves them (a pool per query when asked), so query engines run without an index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import numpy as np
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

PERSON_FIELDS = ["doc_id", "title", "gender"]


def make_pool(
    n: int = 50,
    *,
    female_every: int = 5,
    seed: int = 0,
    prefix: str = "p",
    scored: bool = True,
) -> list[NodeWithScore]:
    """``n`` nodes with distinct scores in (0, 1), every ``female_every``-th one female.

    Female nodes sit low in the score order (as in the imbalanced corpus), so fair re-ranking
    has something to change. Node ids are ``f"{prefix}-{i}"``; titles are ``f"{prefix} Person
    {i}"`` and the text starts with the study's ``Title:`` line.
    """
    rng = np.random.default_rng(seed)
    scores = np.sort(rng.uniform(0.2, 0.9, size=n))[::-1]
    nodes = []
    for i in range(n):
        gender = "female" if i % female_every == female_every - 1 else "male"
        title = f"{prefix} Person {i}"
        node = TextNode(
            id_=f"{prefix}-{i}",
            text=f"Title: {title}\n{title} is a {gender} person of this pool.",
            metadata={"doc_id": f"{prefix}-{i}", "title": title, "gender": gender},
            excluded_embed_metadata_keys=PERSON_FIELDS,
            excluded_llm_metadata_keys=PERSON_FIELDS,
        )
        nodes.append(NodeWithScore(node=node, score=float(scores[i]) if scored else None))
    return nodes


class PoolRetriever(BaseRetriever):
    """Serves a fixed pool, or ``pool_for(query_str)`` when given one.

    ``delays``: seconds each successive async retrieval sleeps (cycled), so that concurrent
    queries reach their re-ranking in another order than they started.
    """

    def __init__(
        self,
        pool: Sequence[NodeWithScore] = (),
        pool_for: Callable[[str], Sequence[NodeWithScore]] | None = None,
        delays: Sequence[float] = (),
    ) -> None:
        super().__init__()
        self._pool = list(pool)
        self._pool_for = pool_for
        self._delays = list(delays)
        self._calls = 0

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self._delays:
            delay = self._delays[self._calls % len(self._delays)]
            self._calls += 1
            await asyncio.sleep(delay)
        return self._retrieve(query_bundle)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self._pool_for is not None:
            return list(self._pool_for(query_bundle.query_str))
        return list(self._pool)
