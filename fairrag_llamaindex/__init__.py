"""FairRAG for LlamaIndex: a fair re-ranking node postprocessor, per-query seeds and a fairness
event handler, all built from the core's adapter kit (docs/SPEC.md, "Adapters")."""

from .event_handler import FairnessEventHandler
from .postprocessor import FairRerankPostprocessor, query_seed
from .prompts import PAPER_QA_TEMPLATE

__all__ = ["PAPER_QA_TEMPLATE", "FairRerankPostprocessor", "FairnessEventHandler", "query_seed"]
