"""Haystack's view of the LlamaIndex test pools (``tests/llamaindex/pools.py``): the same ids,
texts, metadata and scores, so the three adapters rank one pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from haystack import Document


def documents_of_pool(pool: Sequence[Any]) -> list[Document]:
    """One Haystack ``Document`` per node: its id, text, metadata and score."""
    return [
        Document(
            id=node.node.node_id,
            content=node.node.get_content(),
            meta=dict(node.node.metadata),
            score=node.score,
        )
        for node in pool
    ]
