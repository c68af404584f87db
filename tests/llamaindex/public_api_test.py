"""The public surface of fairrag_llamaindex: names, LlamaIndex conventions, packaging."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.instrumentation.event_handlers.base import BaseEventHandler
from llama_index.core.postprocessor.types import BaseNodePostprocessor

import fairrag_llamaindex
from fairrag_llamaindex import FairnessEventHandler, FairRerankPostprocessor


def test_all_lists_exactly_the_public_names():
    assert sorted(fairrag_llamaindex.__all__) == [
        "FairRerankPostprocessor",
        "FairnessEventHandler",
        "PAPER_QA_TEMPLATE",
        "query_seed",
    ]
    for name in fairrag_llamaindex.__all__:
        assert getattr(fairrag_llamaindex, name) is not None


def test_package_is_typed():
    assert (Path(fairrag_llamaindex.__file__).parent / "py.typed").is_file()


def test_framework_base_classes_and_class_names():
    assert issubclass(FairRerankPostprocessor, BaseNodePostprocessor)
    assert issubclass(FairnessEventHandler, BaseEventHandler)
    assert FairRerankPostprocessor.class_name() == "FairRerankPostprocessor"
    assert FairnessEventHandler.class_name() == "FairnessEventHandler"


@pytest.mark.parametrize("cls", [FairRerankPostprocessor, FairnessEventHandler])
def test_every_own_field_has_a_description(cls):
    # LlamaIndex's own base class (the component contract's fields count as own fields)
    base = next(c for c in cls.__mro__[1:] if c.__module__.startswith("llama_index"))
    inherited = set(base.model_fields)
    own = {name: f for name, f in cls.model_fields.items() if name not in inherited}
    assert own, "no fields found"
    missing = [name for name, f in own.items() if not (f.description or "").strip()]
    assert missing == []


def test_postprocessor_fields_of_the_issue():
    fields = FairRerankPostprocessor.model_fields
    for name in ("ranker", "group_key", "protected", "target_share", "target", "top_n", "seed"):
        assert name in fields
    assert "ranker_params" in fields
    assert fields["top_n"].default == 5


def test_postprocessor_serialises_through_llamaindex():
    postprocessor = FairRerankPostprocessor(
        ranker="stochastic", group_key="gender", seed=3, ranker_params={"alpha": 2.0}
    )
    data = postprocessor.to_dict()
    assert data["class_name"] == "FairRerankPostprocessor"
    assert data["ranker"] == "stochastic"
    rebuilt = FairRerankPostprocessor.from_dict(data)
    assert rebuilt.core_ranker.alpha == 2.0
    assert rebuilt.seed == 3
