"""FairRerankPostprocessor with a fitted exposure model (docs/SPEC.md, "Exposure model" →
Fitted): ``exposure="fitted:<file>"`` ranks and places with the file's weights."""

from __future__ import annotations

import pytest
from llama_index.core.schema import QueryBundle

from fairrag_core.exposure import FittedCurve, save_fitted_curve
from fairrag_llamaindex import FairRerankPostprocessor
from tests.llamaindex.pools import make_pool

CURVE = FittedCurve((0.1, 0.3, 0.3, 0.2, 0.1), provenance={"model": "fake"})


def test_the_postprocessor_places_with_the_fitted_weights(tmp_path):
    path = save_fitted_curve(CURVE, tmp_path / "curve.json")
    postprocessor = FairRerankPostprocessor(
        group_key="gender",
        protected="female",
        relevance="similarity",
        seed=0,
        exposure=f"fitted:{path}",
    )
    assert postprocessor.fairness_exposure.curve == CURVE
    nodes = postprocessor.postprocess_nodes(make_pool(30), QueryBundle("q"))
    weights = [n.node.metadata["exposure_weight"] for n in nodes]
    assert weights == pytest.approx(list(CURVE.weights))
