"""FairRAG for LlamaIndex: a fair re-ranking node postprocessor and a fairness event handler."""

from .event_handler import FairnessEventHandler
from .postprocessor import FairRerankPostprocessor

__all__ = ["FairRerankPostprocessor", "FairnessEventHandler"]
