"""FairRAG for LlamaIndex: a fair re-ranking node postprocessor, per-query seeds and a fairness
event handler, all built from the core's adapter kit (docs/SPEC.md, "Adapters").

Needs ``llama-index-core`` only (``pip install 'fairrag[llamaindex]'``). The names below are
imported on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairrag_core.lazy import lazy_exports

if TYPE_CHECKING:
    from .event_handler import FairnessEventHandler
    from .postprocessor import FairRerankPostprocessor, query_seed
    from .prompts import PAPER_QA_TEMPLATE

__all__ = ["PAPER_QA_TEMPLATE", "FairRerankPostprocessor", "FairnessEventHandler", "query_seed"]

_HOME = {
    "FairnessEventHandler": "event_handler",
    "FairRerankPostprocessor": "postprocessor",
    "query_seed": "postprocessor",
    "PAPER_QA_TEMPLATE": "prompts",
}


__getattr__, __dir__ = lazy_exports(__name__, _HOME, __all__)
