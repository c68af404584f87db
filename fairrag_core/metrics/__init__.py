"""Fairness and utility metrics of one ranking or one answer (SPEC.md, "Metrics"), one family per
module; studies report their mean over trials."""

from .exposure import exposure_disparity, exposure_share, exposure_shares
from .fairness_gap import fairness_gap, fairness_gap_magnitude
from .generation import generation_parity, grounded_generation_parity
from .groundedness import groundedness
from .relevance import ndcg_at_k, precision_at_k

__all__ = [
    "exposure_disparity",
    "exposure_share",
    "exposure_shares",
    "fairness_gap",
    "fairness_gap_magnitude",
    "generation_parity",
    "grounded_generation_parity",
    "groundedness",
    "ndcg_at_k",
    "precision_at_k",
]
