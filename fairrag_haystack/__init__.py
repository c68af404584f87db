"""FairRAG for Haystack: a component that re-ranks a retriever's Documents into a fair top-k and
records its fairness record, built from the core's adapter kit (docs/SPEC.md, "Adapters"),
:func:`context_text` (and :class:`ContextText`, the same as a pipeline step), what an LLM
(an Agent's tool result) is shown of its Documents, and
:class:`FairAnswerRecorder`, the record of the LLM's answer to them (the generation metrics).

Needs ``haystack-ai`` only (``pip install 'fairrag[haystack]'``).
"""

from __future__ import annotations

from .answers import FairAnswerRecorder
from .context import ContextText, context_text
from .ranker import FairDocumentRanker

__all__ = ["ContextText", "FairAnswerRecorder", "FairDocumentRanker", "context_text"]
