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


def test_a_k_beyond_the_fitted_positions_is_refused_when_built(tmp_path):
    """A user trial: every adapter built a component showing more entries than the curve has
    positions, and refused it at the first ranking, naming ``k`` (not ``top_n``/``top_k``)."""
    from haystack import Document

    from fairrag_haystack import FairDocumentRanker
    from fairrag_langchain import FairReranker
    from fairrag_llamaindex import FairRerankPostprocessor

    path = save_fitted_curve(CURVE, tmp_path / "curve.json")
    fields = {"group_key": "gender", "protected": "female", "exposure": f"fitted:{path}"}
    built = {
        "k": lambda: FairRetriever(vectorstore=FixedPoolStore(*imbalanced_pool()), **fields, k=6),
        r"k \(top_n\)": lambda: FairReranker(**fields, top_n=6),
        "top_n": lambda: FairRerankPostprocessor(**fields, top_n=6),
        "top_k": lambda: FairDocumentRanker(**fields, top_k=6),
    }
    for name, build in built.items():
        with pytest.raises(
            ValueError,
            match=rf"{name}=6 shows more entries than the fitted exposure model's 5 positions",
        ):
            build()
    FairReranker(**fields, top_n=5)  # within the curve
    retriever = FairRetriever(vectorstore=FixedPoolStore(*imbalanced_pool()), **fields)
    with pytest.raises(ValueError, match=r"ranks 1\.\.5 only"):  # a k given per call
        retriever.invoke("q", k=6)
    # set after it was built: the curve on a component showing 6, or a k past the curve, is
    # refused naming the argument, and the old value stays (a user trial: accepted, refused
    # at the first ranking naming k)
    short = {**fields, "exposure": "dcg"}
    for name, component, count in (
        ("k", FairRetriever(vectorstore=FixedPoolStore(*imbalanced_pool()), **short, k=6), "k"),
        (r"k \(top_n\)", FairReranker(**short, top_n=6), "k"),
        ("top_n", FairRerankPostprocessor(**short, top_n=6), "top_n"),
    ):
        with pytest.raises(ValueError, match=rf"{name}=6 shows more entries"):
            component.exposure = f"fitted:{path}"
        assert component.exposure == "dcg" and component.fairness_exposure.curve is None
        component.__setattr__(count, 5)
        component.exposure = f"fitted:{path}"
        with pytest.raises(ValueError, match=rf"{name}=6 shows more entries"):
            component.__setattr__(count, 6)
        assert getattr(component, count) == 5
    ranker = FairDocumentRanker(**short, top_k=6)
    ranker.fair.exposure = f"fitted:{path}"  # the contract does not know top_k: at each run
    pool = [
        Document(content=f"Title: P{i}", meta={"gender": g}, score=1 - i / 10)
        for i, g in enumerate(["female", "male"] * 4)
    ]
    with pytest.raises(ValueError, match=r"top_k=6 shows more entries"):
        ranker.run(documents=pool)
    with pytest.raises(ValueError, match=r"top_k=6 shows more entries"):
        FairDocumentRanker(**fields, top_k=5).run(documents=pool, top_k=6)


OTHER = FittedCurve((0.3, 0.25, 0.2, 0.15, 0.1), provenance={"model": "refit"})


@pytest.mark.parametrize("field", ["exposure", "ranker_params"])
def test_every_copy_ranks_with_the_curve_read_when_the_component_was_built(tmp_path, field):
    """A user trial: the component kept the file's path, so LangChain's per-call copy
    (``configurable_fields``), a pickle, ``deepcopy`` and ``model_copy`` read the file again,
    ranking with a rewritten curve (the next ``fairrag audit --fit-exposure``) while the
    handler recorded the old one, and failed once the file was gone. The file is now read
    once, when the component is built; copies carry the curve, and so do records. A review
    found ``ranker_params={"exposure": ...}`` (``fairrag study --exposure``'s form) still read
    again by every copy."""
    import copy
    import pickle

    from langchain_core.runnables import ConfigurableField

    from fairrag_langchain import FairnessCallbackHandler

    path = save_fitted_curve(CURVE, tmp_path / "curve.json")
    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()),
        group_key="gender",
        protected="female",
        seed=0,
        **(
            {"exposure": f"fitted:{path}"}
            if field == "exposure"
            else {"ranker_params": {"exposure": f"fitted:{path}"}}
        ),
    )
    configurable = retriever.configurable_fields(seed=ConfigurableField(id="seed"))
    handler = FairnessCallbackHandler.from_retriever(configurable)
    save_fitted_curve(OTHER, path)  # the file rewritten
    copies = [
        pickle.loads(pickle.dumps(retriever)),
        copy.deepcopy(retriever),
        retriever.model_copy(),
    ]
    path.unlink()  # and then gone
    docs = configurable.invoke("q", config={"callbacks": [handler], "configurable": {"seed": 3}})
    assert [d.metadata["exposure_weight"] for d in docs] == pytest.approx(list(CURVE.weights))
    assert handler.records[-1]["exposure_model"] == "fitted(0.5,0.25,0.12,0.08,0.05)"
    for made in copies:
        assert made.fairness_exposure.curve == CURVE
        weights = [d.metadata["exposure_weight"] for d in made.invoke("q")]
        assert weights == pytest.approx(list(CURVE.weights))
    kept = retriever.exposure if field == "exposure" else retriever.ranker_params["exposure"]
    assert kept == ExposureModel.fitted(CURVE)  # the curve, not the path
    dumped = retriever.model_dump()
    written = dumped["exposure"] if field == "exposure" else dumped["ranker_params"]["exposure"]
    assert written == "fitted(0.5,0.25,0.12,0.08,0.05)"


def test_a_fitted_model_and_what_holds_it_pickle_and_deep_copy():
    """A user trial: ``TypeError: cannot pickle 'mappingproxy' object`` for a FittedCurve (its
    provenance), so for every component and handler holding a fitted model in Python form."""
    import copy
    import pickle

    from fairrag_core import make_ranker
    from fairrag_langchain import FairnessCallbackHandler, FairReranker

    model = ExposureModel.fitted(CURVE)
    ranker = make_ranker("representative_stochastic", protected="female", exposure=model)
    for value in (CURVE, model, ranker):
        for made in (pickle.loads(pickle.dumps(value)), copy.deepcopy(value)):
            assert made == value or made.exposure == model
    restored = pickle.loads(pickle.dumps(CURVE))
    assert restored.provenance == {"model": "fake"} and restored.lower == CURVE.lower
    reranker = FairReranker(group_key="gender", protected="female", exposure=model)
    handler = FairnessCallbackHandler.from_retriever(reranker)
    assert pickle.loads(pickle.dumps(handler)).auditor.exposure == model
    assert copy.deepcopy(reranker).fairness_exposure == model


def test_a_curve_that_is_no_fitted_curve_is_refused_when_the_model_is_built():
    """A user trial: ``ExposureModel("fitted", curve=<the file's dict>)`` was built and failed
    later, in the ranker, with ``'dict' object has no attribute 'weights'``."""
    for curve in ({"weights": [0.5, 0.5]}, [0.5, 0.5], "curve.json"):
        with pytest.raises(TypeError, match=r"curve must be a FittedCurve .* got "):
            ExposureModel("fitted", curve=curve)  # type: ignore[arg-type]


def test_a_handler_following_a_component_audits_under_the_exposure_it_is_given():
    """A user trial: ``from_retriever(retriever, exposure=...)`` was accepted and ignored (the
    records named the component's model); LlamaIndex's ``from_postprocessor`` honours it. The
    records follow the component's target under the model given."""
    from fairrag_langchain import FairnessCallbackHandler

    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()), group_key="gender", protected="female"
    )
    handler = FairnessCallbackHandler.from_retriever(
        retriever, exposure=ExposureModel.fitted(CURVE)
    )
    docs = retriever.invoke("q", config={"callbacks": [handler]})
    (record,) = handler.records
    assert record["exposure_model"] == "fitted(0.5,0.25,0.12,0.08,0.05)"
    female = [d.metadata["gender"] == "female" for d in docs]
    assert record["exposure_share"] == pytest.approx(
        sum(w for w, f in zip(CURVE.weights, female, strict=True) if f)
    )
    assert record["target"] == {"female": 0.5, "OTHERS": 0.5}
    plain = FairnessCallbackHandler.from_retriever(retriever)
    retriever.invoke("q", config={"callbacks": [plain]})
    assert plain.records[0]["exposure_model"] == "dcg"
