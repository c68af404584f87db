"""Fairness and utility metrics of one ranking or one answer (SPEC.md, "Metrics"), one family per
module; studies report their mean over trials."""

from .amortized import amortized_disparity, amortized_exposure_shares
from .attributed import (
    attributed_citation_precision,
    attributed_generation_parity,
    attributed_groundedness,
)
from .awrf import awrf, trec_discount, trec_fair_score, trec_ndcg
from .expected_exposure import (
    ExpectedExposure,
    document_expected_exposure,
    expected_exposure,
    expected_exposure_of,
)
from .exposure import exposure_disparity, exposure_share, exposure_shares
from .fairness_gap import fairness_gap, fairness_gap_magnitude
from .generation import generation_parity, grounded_generation_parity
from .groundedness import groundedness
from .relevance import ndcg_at_k, precision_at_k

__all__ = [
    "ExpectedExposure",
    "amortized_disparity",
    "amortized_exposure_shares",
    "attributed_citation_precision",
    "attributed_generation_parity",
    "attributed_groundedness",
    "awrf",
    "document_expected_exposure",
    "expected_exposure",
    "expected_exposure_of",
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
    "trec_discount",
    "trec_fair_score",
    "trec_ndcg",
]
