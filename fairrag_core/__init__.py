"""FairRAG core: framework-free fair rankers, exposure models, metrics, citations and statistics.

Imports numpy only (scipy when a :mod:`fairrag_core.stats` function first needs it); the
LangChain and LlamaIndex adapters translate their objects into (scores, groups) and call this
package.
"""

from . import citations, ledger, metrics, prompts, stats
from .audit import FairnessAuditor, summarize_records
from .errors import LedgerUnavailableError, VectorStoreUnavailableError
from .exposure import ExposureModel, make_exposure_model, position_weights
from .jsonl import JsonLinesLog
from .rankers import (
    RANKERS,
    AmortizedRanker,
    FairRanker,
    ForcedExposureRanker,
    RepresentativeStochasticRanker,
    StandardRanker,
    StochasticRanker,
    available_rankers,
    configure_ranker,
    default_study_rankers,
    make_ranker,
    register_ranker,
)
from .ranking import Ranker, RankingResult
from .reranking import Placement, Reranking, group_labels, pool_scores, rerank, scores_from_order
from .target import OTHERS, Target, make_target

__all__ = [
    "OTHERS",
    "RANKERS",
    "AmortizedRanker",
    "ExposureModel",
    "FairRanker",
    "FairnessAuditor",
    "ForcedExposureRanker",
    "JsonLinesLog",
    "LedgerUnavailableError",
    "Placement",
    "Ranker",
    "RankingResult",
    "RepresentativeStochasticRanker",
    "Reranking",
    "StandardRanker",
    "StochasticRanker",
    "Target",
    "VectorStoreUnavailableError",
    "available_rankers",
    "citations",
    "configure_ranker",
    "default_study_rankers",
    "group_labels",
    "ledger",
    "make_exposure_model",
    "make_ranker",
    "make_target",
    "metrics",
    "pool_scores",
    "position_weights",
    "prompts",
    "register_ranker",
    "rerank",
    "scores_from_order",
    "stats",
    "summarize_records",
]
