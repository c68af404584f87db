"""FairRetriever with a fitted exposure model (docs/SPEC.md, "Exposure model" → Fitted):
``exposure="fitted:<file>"`` ranks and audits with the file's weights."""

from __future__ import annotations

import pytest

from fairrag_core.exposure import ExposureModel, FittedCurve, save_fitted_curve
from fairrag_langchain import FairRetriever, make_fair_rag_chain
from fairrag_langchain.fakes import FakeCitingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool

CURVE = FittedCurve((0.5, 0.25, 0.12, 0.08, 0.05), provenance={"model": "fake"})


@pytest.mark.parametrize("how", ["file", "object"])
def test_the_retriever_ranks_and_the_chain_audits_with_the_fitted_weights(tmp_path, how):
    path = save_fitted_curve(CURVE, tmp_path / "curve.json")
    exposure = f"fitted:{path}" if how == "file" else ExposureModel.fitted(CURVE)
    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()),
        group_key="gender",
        protected="female",
        seed=0,
        exposure=exposure,
    )
    assert retriever.fairness_exposure.curve == CURVE
    docs = retriever.invoke("q")
    assert [d.metadata["exposure_weight"] for d in docs] == pytest.approx(list(CURVE.weights))
    output = make_fair_rag_chain(retriever, FakeCitingChatModel()).invoke("q")
    metrics = output["metrics"]
    assert metrics["exposure_model"] == "fitted(0.5,0.25,0.12,0.08,0.05)"
    female = sum(w for w, g in zip(CURVE.weights, metrics["groups"], strict=True) if g == "female")
    assert metrics["exposure_share"] == pytest.approx(female)


def test_a_k_beyond_the_fitted_positions_is_refused(tmp_path):
    path = save_fitted_curve(CURVE, tmp_path / "curve.json")
    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()),
        group_key="gender",
        protected="female",
        exposure=f"fitted:{path}",
        k=6,
    )
    with pytest.raises(ValueError, match=r"ranks 1\.\.5 only"):
        retriever.invoke("q")
