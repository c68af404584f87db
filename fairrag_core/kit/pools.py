"""Pools of distinct candidates from a store that may return one document twice
(docs/SPEC.md, "Adapters" → Pools of distinct documents).

A reopened persistent Chroma index can answer a query for 50 with one document twice (3 of 20
queries on the study's 3,366 documents, Chroma 1.5.9), so the ranker gets 49 distinct
candidates where the user asked for 50. A search whose full answer repeats an id is asked
again for as many more candidates as it lacks (at most :data:`TOP_UPS` times); the pool keeps
the first occurrence of each id, up to the number wanted. Candidates without an id are never
repeats (the ranker cannot tell them apart either).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Sequence
from typing import Any, TypeVar

__all__ = ["TOP_UPS", "distinct_pool", "first_occurrences", "lacking", "searched"]

T = TypeVar("T")

TOP_UPS = 4
"""Most further searches for one pool."""


def lacking(ids: Sequence[Hashable | None], asked: int, wanted: int) -> int:
    """How many more candidates to ask for than ``asked``, when a search for ``asked``
    returned ``ids`` and the pool wants ``wanted`` distinct ones: 0 when the search returned
    fewer than asked (the store holds no more) or enough distinct ones."""
    if len(ids) < asked:
        return 0
    known = [doc_id for doc_id in ids if doc_id is not None]
    distinct = len(ids) - len(known) + len(set(known))
    return max(0, wanted - distinct)


def first_occurrences(ids: Sequence[Hashable | None], wanted: int) -> list[int]:
    """The positions of each id's first occurrence in ``ids`` (every position of a
    candidate without an id), in order, at most ``wanted`` of them."""
    seen: set[Hashable] = set()
    kept: list[int] = []
    for at, doc_id in enumerate(ids):
        if len(kept) == wanted:
            break
        if doc_id is None or doc_id not in seen:
            if doc_id is not None:
                seen.add(doc_id)
            kept.append(at)
    return kept


def distinct_pool(
    wanted: int, id_of: Callable[[T], Hashable | None]
) -> Generator[int, Sequence[T], list[T]]:
    """The searches of one pool of ``wanted`` distinct candidates, as a generator the caller
    drives with its own (sync or async) search: it yields how many candidates to ask for and
    is sent each search's answer; it returns the pool (the first occurrence of each id, at
    most ``wanted``, when it asked again; else the first answer as it came).

    .. code-block:: python

        asks = distinct_pool(50, lambda doc: doc.id)
        n = next(asks)
        try:
            while True:
                n = asks.send(store.search(query, k=n))
        except StopIteration as done:
            pool = done.value
    """
    asked = wanted
    pool = list((yield asked))
    for _ in range(TOP_UPS):
        more = lacking([id_of(item) for item in pool], asked, wanted)
        if not more:
            break
        asked += more
        pool = list((yield asked))
    if asked == wanted:
        return pool
    return [pool[at] for at in first_occurrences([id_of(item) for item in pool], wanted)]


def searched(asks: Generator[int, Sequence[T], list[T]], search: Callable[[int], Any]) -> list[T]:
    """Drive :func:`distinct_pool`'s ``asks`` with a synchronous ``search(n)``."""
    n = next(asks)
    try:
        while True:
            n = asks.send(search(n))
    except StopIteration as done:
        return done.value
