"""FairRAG for Haystack: a component that re-ranks a retriever's Documents into a fair top-k and
records its fairness record, built from the core's adapter kit (docs/SPEC.md, "Adapters").

Needs ``haystack-ai`` only (``pip install 'fairrag[haystack]'``).
"""

from __future__ import annotations

from .ranker import FairDocumentRanker

__all__ = ["FairDocumentRanker"]
