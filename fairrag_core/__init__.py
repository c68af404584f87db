"""FairRAG core: framework-free fair rankers, exposure models, metrics, citations and statistics.

Imports numpy (and scipy in :mod:`fairrag_core.stats`) only; the LangChain and LlamaIndex
adapters translate their objects into (scores, groups) and call this package.
"""

from .exposure import ExposureModel, make_exposure_model, position_weights
from .rankers import (
    RANKERS,
    ForcedExposureRanker,
    RepresentativeStochasticRanker,
    StandardRanker,
    StochasticRanker,
    available_rankers,
    make_ranker,
)
from .ranking import Ranker, RankingResult
from .rerank import Placement, Reranking, group_labels, rerank, scores_from_order
from .target import OTHERS, Target, make_target

__all__ = [
    "OTHERS",
    "RANKERS",
    "ExposureModel",
    "ForcedExposureRanker",
    "Placement",
    "Ranker",
    "RankingResult",
    "RepresentativeStochasticRanker",
    "Reranking",
    "StandardRanker",
    "StochasticRanker",
    "Target",
    "available_rankers",
    "group_labels",
    "make_exposure_model",
    "make_ranker",
    "make_target",
    "position_weights",
    "rerank",
    "scores_from_order",
]
