"""The LlamaIndex test doubles now ship with the package (``fairrag_llamaindex.fakes``)."""

from fairrag_llamaindex.fakes import CitingMockLLM, cite_context
from fairrag_llamaindex.prompts import PAPER_QA_TEMPLATE

__all__ = ["PAPER_QA_TEMPLATE", "CitingMockLLM", "cite_context"]
