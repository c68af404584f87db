"""FairRAG for LlamaIndex: a fair re-ranking node postprocessor and a fairness event handler."""

from .event_handler import FairnessEventHandler
from .postprocessor import FairRerankPostprocessor
from .prompts import PAPER_QA_TEMPLATE

__all__ = ["PAPER_QA_TEMPLATE", "FairRerankPostprocessor", "FairnessEventHandler"]
