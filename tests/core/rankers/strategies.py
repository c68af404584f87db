"""Hypothesis strategies for ranker tests: random pools, groups, k and targets."""

from __future__ import annotations

from hypothesis import strategies as st

LABELS = ("female", "male", "nonbinary", None)

finite_scores = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
# Few distinct values too, so ties are common.
tied_scores = st.sampled_from([0.0, 0.25, 0.5, 1.0])


@st.composite
def pools(draw, min_size: int = 0, max_size: int = 60):
    """(scores, groups) of one candidate pool."""
    n = draw(st.integers(min_size, max_size))
    element = st.one_of(finite_scores, tied_scores)
    scores = draw(st.lists(element, min_size=n, max_size=n))
    groups = draw(st.lists(st.sampled_from(LABELS), min_size=n, max_size=n))
    return scores, groups


@st.composite
def fairness_configs(draw):
    """Constructor kwargs: the binary form or a several-group target."""
    if draw(st.booleans()):
        share = draw(st.sampled_from([0.0, 0.2, 0.3, 0.5, 0.7, 1.0]))
        return {"protected": "female", "target_share": share}
    a = draw(st.integers(0, 10))
    b = draw(st.integers(0, 10 - a))
    shares = {"female": a / 10, "male": b / 10, "nonbinary": (10 - a - b) / 10}
    return {"target": shares}
