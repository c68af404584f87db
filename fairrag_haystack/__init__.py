"""FairRAG for Haystack: a component that re-ranks a retriever's Documents into a fair top-k and
records its fairness record, built from the core's adapter kit (docs/SPEC.md, "Adapters"), and
:func:`context_text`, what an LLM (an Agent's tool result) is shown of its Documents.

Needs ``haystack-ai`` only (``pip install 'fairrag[haystack]'``).
"""

from __future__ import annotations

from .context import context_text
from .ranker import FairDocumentRanker

__all__ = ["FairDocumentRanker", "context_text"]
