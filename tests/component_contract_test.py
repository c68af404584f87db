"""One component contract and one record for both frameworks (docs/SPEC.md, "Adapters" →
Component contract, and "Records").

The same table of good and bad configurations is walked through ``FairRetriever``,
``FairReranker`` and ``FairRerankPostprocessor``, at construction and by assignment; the same
question and ranking through LangChain's and LlamaIndex's handlers give records equal field by
field (ids, times, the model's name and the framework-only fields aside).
"""

from __future__ import annotations

import numpy as np
import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.query_engine import RetrieverQueryEngine
from pydantic import ValidationError

from fairrag_core import make_ranker
from fairrag_core.kit import render_context_prompt
from fairrag_core.kit.component import FairComponent
from fairrag_langchain import FairnessCallbackHandler, FairReranker, FairRetriever
from fairrag_langchain.fakes import FakeCitingChatModel
from fairrag_llamaindex import PAPER_QA_TEMPLATE, FairnessEventHandler, FairRerankPostprocessor
from fairrag_llamaindex.fakes import CitingMockLLM
from tests.langchain.doubles import ListRetriever, documents_of_pool
from tests.llamaindex.pools import PoolRetriever, make_pool

QUESTION = "Who are influential people in this pool?"


def _retriever(**fields):
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    return FairRetriever(vectorstore=store, **fields)


def _reranker(**fields):
    return FairReranker(**fields)


def _postprocessor(**fields):
    return FairRerankPostprocessor(relevance="similarity", **fields)


BUILDERS = {"FairRetriever": _retriever, "FairReranker": _reranker, "postprocessor": _postprocessor}
SIZE = {"FairRetriever": "k", "FairReranker": "k", "postprocessor": "top_n"}
BASE = {"group_key": "gender", "protected": "female"}

GOOD = [
    {},
    {"target_share": 0.3},
    {"protected": None, "target": {"female": 0.4, "male": 0.6}},
    {"protected": None, "target": make_ranker("forced_exposure", protected="female").target},
    {"seed": 0},
    {"seed": 2**64 - 1},
    {"exposure": "rbp(0.5)"},
    {"exposure": "uniform"},
    {"ranker": "fair"},
    {"ranker": "amortized", "ledger_key": "tenant-a"},
    {"ranker": "stochastic", "ranker_params": {"alpha": 2.0}},
    {"ranker": make_ranker("standard"), "protected": None},
    {"size": 3},
]

BAD = [  # (fields, the field the error names)
    ({"group_key": "  "}, "group_key"),
    ({"group_key": ""}, "group_key"),
    ({"target_share": True}, "target_share"),
    ({"target_share": 1.5}, "target_share"),
    ({"seed": -1}, "seed"),
    ({"seed": True}, "seed"),
    ({"seed": 2**64}, "seed"),
    ({"exposure": "triangle"}, "exposure"),
    ({"ranker": "nonsense"}, "nonsense"),
    ({"ranker": {"name": "standard"}}, "ranker"),
    ({"ranker": "stochastic", "ranker_params": {"gain": 2.0}}, "gain"),
    ({"ledger_key": ""}, "ledger_key"),
    ({"exposure": "dcg", "ranker_params": {"exposure": "dcg"}}, "exposure"),
    ({"size": 0}, "SIZE"),
    ({"size": "abc"}, "SIZE"),
    ({"size": True}, "SIZE"),
    ({"size": 2.7}, "SIZE"),
    ({"size": 2.0}, "SIZE"),
    ({"bogus": 1}, "bogus"),
    ({"target_share": "0.3"}, "target_share"),  # text: the core refuses it, pydantic read it
    ({"protected": None, "target": {"female": "0.3", "OTHERS": "0.7"}}, "target"),
    ({"protected": None, "target": [["female", 0.4, 1]]}, "target"),
]


def _fields(name: str, fields: dict) -> dict:
    fields = dict(fields)
    if "size" in fields:
        fields[SIZE[name]] = fields.pop("size")
    return {**BASE, **fields}


def test_every_component_inherits_the_one_declaration():
    for build in BUILDERS.values():
        component = build(**BASE)
        assert isinstance(component, FairComponent)
        assert type(component).model_config.get("validate_assignment") is True
    shared = set(FairComponent.model_fields)
    assert {"exposure", "ledger", "ledger_key", "group_key", "target"} <= shared


@pytest.mark.parametrize("name", BUILDERS)
@pytest.mark.parametrize("fields", GOOD, ids=repr)
def test_good_configurations_are_accepted_by_every_component(name, fields):
    component = BUILDERS[name](**_fields(name, fields))
    assert component.core_ranker is not None


@pytest.mark.parametrize("name", BUILDERS)
@pytest.mark.parametrize(("fields", "named"), BAD, ids=repr)
def test_bad_configurations_are_refused_at_construction_naming_the_field(name, fields, named):
    named = SIZE[name] if named == "SIZE" else named
    with pytest.raises((ValueError, TypeError)) as refused:
        BUILDERS[name](**_fields(name, fields))
    assert named in str(refused.value)


@pytest.mark.parametrize("name", BUILDERS)
@pytest.mark.parametrize(("fields", "named"), BAD, ids=repr)
def test_bad_assignments_are_refused_and_undone(name, fields, named):
    named = SIZE[name] if named == "SIZE" else named
    component = BUILDERS[name](**BASE)
    before = component.model_dump(exclude={"vectorstore", "callback_manager"})
    assignments = _fields(name, fields)
    with pytest.raises((ValueError, TypeError, AttributeError)) as refused:
        for field, value in assignments.items():
            if field not in BASE or BASE[field] != value:
                setattr(component, field, value)
    assert named in str(refused.value)
    # Every assignment before the refused one is a valid configuration of its own; the
    # refused one left nothing behind: the component still ranks with a whole configuration.
    after = component.model_dump(exclude={"vectorstore", "callback_manager"})
    refused_field = next(
        (field for field in assignments if field in after and after[field] == before[field]),
        None,
    )
    assert refused_field is not None or named == "bogus"
    assert component.core_ranker is not None


@pytest.mark.parametrize("name", BUILDERS)
def test_an_unknown_argument_names_itself_a_close_match_and_what_is_accepted(name):
    """A user trial: ``FairRerankPostprocessor(top_k=3)`` raised pydantic's bare "Extra inputs
    are not permitted", naming nothing accepted (docs/SPEC.md, "Adapters")."""
    wrong = "top_k" if SIZE[name] == "top_n" else "kk"
    with pytest.raises(
        ValueError,
        match=rf"unknown argument '{wrong}' \(did you mean '{SIZE[name]}'\?\); accepted: .*group",
    ):
        BUILDERS[name](**BASE, **{wrong: 3})


def test_the_llamaindex_handler_names_an_unknown_argument_and_a_wrong_postprocessor():
    from fairrag_llamaindex import FairnessEventHandler

    with pytest.raises(ValueError, match=r"unknown argument 'top_n'; accepted: group_key"):
        FairnessEventHandler(group_key="gender", protected="female", top_n=3)
    with pytest.raises(TypeError, match=r"needs the FairRerankPostprocessor .* got str"):
        FairnessEventHandler.from_postprocessor("not a postprocessor")


@pytest.mark.parametrize("name", BUILDERS)
def test_model_copy_validates_its_update_like_an_assignment(name):
    component = BUILDERS[name](**BASE)
    size = SIZE[name]
    assert getattr(component.model_copy(update={size: 3}), size) == 3
    for bad in (0, True, "abc"):
        with pytest.raises(ValidationError, match=size):
            component.model_copy(update={size: bad})
    with pytest.raises(ValueError, match=r"no (field|attribute)|unknown argument 'bogus'"):
        component.model_copy(update={"bogus": 1})
    copy = component.model_copy(update={"exposure": "uniform"})
    assert copy.core_ranker.exposure.name == "uniform"
    assert component.core_ranker.exposure.name == "dcg"


@pytest.mark.parametrize("name", BUILDERS)
def test_a_target_object_and_an_exposure_model_serialise_to_what_rebuilds_them(name):
    target = make_ranker("forced_exposure", protected="female", target_share=0.4).target
    component = BUILDERS[name](
        **{**BASE, "protected": None, "target": target, "exposure": "rbp(0.5)"}
    )
    dumped = component.model_dump(exclude={"vectorstore", "callback_manager"})
    assert dumped["target"] == {"female": 0.4, "OTHERS": 0.6}  # the others bucket, as records
    assert dumped["exposure"] == "rbp(0.5)" and dumped["protected"] == "female"
    rebuilt = BUILDERS[name](
        **{key: dumped[key] for key in ("group_key", "protected", "target", "exposure")}
    )
    assert rebuilt.fairness_target.as_dict() == component.fairness_target.as_dict()
    assert rebuilt.fairness_target.protected == "female"
    assert rebuilt.core_ranker.exposure == component.core_ranker.exposure


@pytest.mark.parametrize("name", BUILDERS)
@pytest.mark.parametrize(
    "fields",
    [
        {"protected": None, "target": {0: 0.5, 1: 0.5}},
        {"protected": 0, "target_share": 0.4},
        {"protected": None, "target": make_ranker("forced_exposure", protected=0).target},
        {"protected": None, "target": {None: 0.3, "a": 0.7}},
        {"ranker": make_ranker("forced_exposure", protected=0), "protected": None},
        {"protected": None, "target": {np.int64(0): 0.5, np.int64(1): 0.5}},
        {"protected": np.int64(1), "target_share": 0.4},
        {"protected": None, "target": {np.False_: 0.5, np.True_: 0.5}},
    ],
    ids=[
        "int mapping",
        "int protected",
        "int Target",
        "None label",
        "ready Ranker",
        "numpy ints",
        "numpy protected",
        "numpy bools",
    ],
)
def test_labels_other_than_text_survive_a_json_round_trip(name, fields):
    """A Haystack trial: a target over the labels 0 and 1 was saved as {"0": .5, "1": .5}: a
    loaded pipeline failed ("protected=0 is not a group") or ranked for the groups "0" and
    "1" that no document has, with only a warning. Such targets are saved as [[label, share]]
    pairs and come back with their labels."""
    import json

    component = BUILDERS[name](**{**BASE, **fields})
    dumped = component.model_dump(exclude={"vectorstore", "callback_manager"})
    again = json.loads(json.dumps({key: dumped[key] for key in dumped if key in _CONFIG}))
    rebuilt = BUILDERS[name](**again)
    assert rebuilt.fairness_target.as_dict() == component.fairness_target.as_dict()
    assert rebuilt.fairness_target.protected == component.fairness_target.protected


_CONFIG = ("group_key", "protected", "target_share", "target", "ranker", "ranker_params")


@pytest.mark.parametrize("name", BUILDERS)
def test_objects_and_numpy_numbers_in_ranker_params_serialise_as_the_fields_do(name, tmp_path):
    """A Haystack trial: an ExposureModel in ranker_params was saved as its dataclass fields
    (the loaded pipeline refused them), a ledger object failed to save, np.float64 broke YAML."""
    import json

    from fairrag_core.exposure import make_exposure_model
    from fairrag_core.ledger import make_ledger

    ledger = make_ledger(str(tmp_path / "l.sqlite"))
    params = {"exposure": make_exposure_model("rbp(0.7)"), "ledger": ledger, "ledger_key": "t"}
    component = BUILDERS[name](**BASE, ranker="amortized", ranker_params=params)
    dumped = component.model_dump(exclude={"vectorstore", "callback_manager"})
    assert dumped["ranker_params"] == {
        "exposure": "rbp(0.7)",
        "ledger": ledger.location,
        "ledger_key": "t",
    }
    again = json.loads(json.dumps({key: dumped[key] for key in _CONFIG}))
    assert BUILDERS[name](**again).core_ranker.exposure == component.core_ranker.exposure
    stochastic = BUILDERS[name](
        **BASE,
        ranker="stochastic",
        ranker_params={"alpha": np.float64(2.0)},
        target_share=np.float64(0.4),
    )
    dumped = stochastic.model_dump(exclude={"vectorstore", "callback_manager"})
    assert type(dumped["ranker_params"]["alpha"]) is float and type(dumped["target_share"]) is float
    ledger.close()


# -- one record -------------------------------------------------------------------------------


def _langchain_record(pool, **fields):
    documents = documents_of_pool(pool)
    reranker = FairReranker(**fields)
    retriever = ContextualCompressionRetriever(
        base_compressor=reranker, base_retriever=ListRetriever(documents=documents)
    )
    handler = FairnessCallbackHandler.from_retriever(retriever)

    def prompt(docs: list[Document]) -> str:
        return render_context_prompt(
            QUESTION, [(d.metadata["title"], d.page_content) for d in docs]
        )

    chain = retriever | RunnableLambda(prompt) | FakeCitingChatModel()
    answer = chain.invoke(QUESTION, config={"callbacks": [handler]})
    (record,) = handler.records
    return record, answer.content


def _llamaindex_record(pool, **fields):
    postprocessor = FairRerankPostprocessor(relevance="similarity", **fields)
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(pool),
        llm=CitingMockLLM(),
        node_postprocessors=[postprocessor],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    with FairnessEventHandler.from_postprocessor(postprocessor) as handler:
        response = engine.query(QUESTION)
    (record,) = handler.records
    return record, str(response)


FRAMEWORK_SPECIFIC = {"timestamp", "run_id", "source", "model", "framework", "tags", "metadata"}


@pytest.mark.parametrize("ranker", ["representative_stochastic", "amortized", "fair", "standard"])
def test_both_handlers_write_the_same_record_for_the_same_question_and_ranking(ranker):
    pool = make_pool(30, seed=4)
    fields = {
        "ranker": ranker,
        "group_key": "gender",
        "protected": "female",
        "seed": 11,
        "top_n": 4,
    }
    lc, lc_answer = _langchain_record(pool, **fields)
    li, li_answer = _llamaindex_record(pool, **fields)
    assert lc_answer.strip() == li_answer.strip()  # the same context gives the fake the same answer
    assert set(lc) == set(li), set(lc) ^ set(li)
    differ = {key for key in lc if key not in FRAMEWORK_SPECIFIC and lc[key] != li[key]}
    assert differ == set(), {key: (lc[key], li[key]) for key in differ}
    assert lc["source"] == "langchain" and li["source"] == "llamaindex"
    assert lc["k"] == li["k"] == 4 and lc["schema"] == li["schema"] == 2
    assert set(lc["framework"]) >= {"retriever_run_id", "llm_run_id", "retriever", "llm_runs"}
    assert set(li["framework"]) >= {"n_reranks"}


def test_a_plain_list_gives_k_the_number_shown_in_both():
    """No fair ranking made the list: ``k`` is the number of documents shown, in both."""
    pool = make_pool(6, seed=2)
    lc, _ = _langchain_record(pool, ranker="standard", group_key="gender", protected="female")
    assert lc["ranker"] == "standard"
    li_engine = RetrieverQueryEngine.from_args(
        PoolRetriever(pool[:4]), llm=CitingMockLLM(), text_qa_template=PAPER_QA_TEMPLATE
    )
    with FairnessEventHandler(group_key="gender", protected="female") as handler:
        li_engine.query(QUESTION)
    (li,) = handler.records
    assert li["ranker"] is None and li["k"] == 4 and li["pool_size"] is None


@pytest.mark.parametrize("limit", [None, 0, 2])
def test_one_retention_rule(limit, tmp_path):
    lc = FairnessCallbackHandler(group_key="gender", protected="female", max_records=limit)
    li = FairnessEventHandler(group_key="gender", protected="female", max_records=limit)
    assert lc._kept.max_records == li._kept.max_records == limit
    default_lc = FairnessCallbackHandler(group_key="g", protected="f", path=tmp_path / "a.jsonl")
    default_li = FairnessEventHandler(group_key="g", protected="f")
    assert default_lc._kept.max_records == default_li._kept.max_records == 1000
    for bad in (-1, True, 2.5):
        with pytest.raises(ValueError, match="max_records"):
            FairnessCallbackHandler(group_key="g", protected="f", max_records=bad)
        with pytest.raises(ValueError, match="max_records"):
            FairnessEventHandler(group_key="g", protected="f", max_records=bad)
    for bad_key in ("", "   "):
        with pytest.raises(ValueError, match="group_key"):
            FairnessCallbackHandler(group_key=bad_key, protected="f")
        with pytest.raises(ValueError, match="group_key"):
            FairnessEventHandler(group_key=bad_key, protected="f")


def test_the_direction_error_names_only_the_frameworks_own_arguments():
    rising = make_pool(10, seed=1)[::-1]  # worst first: relevance rises along the order
    engine = RetrieverQueryEngine.from_args(
        PoolRetriever(rising),
        llm=CitingMockLLM(),
        node_postprocessors=[_postprocessor(**BASE)],
        text_qa_template=PAPER_QA_TEMPLATE,
    )
    with pytest.raises(ValueError, match="relevance rises") as refused:
        engine.query(QUESTION)
    assert "relevance_score_fn" not in str(refused.value)  # a LangChain argument
    assert "Use relevance='cosine_distance'" in str(refused.value)  # the opposite's fix


# -- an empty pool ------------------------------------------------------------------------------

EMPTY_POOL = {"ranker": "representative_stochastic", "group_key": "gender", "protected": "female"}


def _nothing_matches(**fields) -> FairRetriever:
    """A FairRetriever over a real store whose filter matches none of its documents."""
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    store.add_texts(
        ["Title: Ada\nAda was a pioneer.", "Title: Alan\nAlan was a pioneer."],
        metadatas=[{"title": "Ada", "gender": "female"}, {"title": "Alan", "gender": "male"}],
    )
    return FairRetriever(
        vectorstore=store, search_kwargs={"filter": lambda document: False}, **fields
    )


def _named_ranking(record: dict, seed: int) -> None:
    assert record["ranker"] == "representative_stochastic"
    assert record["query_seed"] == seed and record["pool_size"] == 0 and record["k"] == 0
    assert record["dropped_after_ranking"] == 0 and record["reordered_after_ranking"] is False
    assert record["groups"] == [] and record["titles"] == []


def test_a_fair_ranking_of_an_empty_pool_is_recorded_under_its_ranking_in_every_adapter():
    """A store filter that matches nothing: the ranking ran (a query seed was drawn), no
    document carries its keys, and every adapter's record still names it (it was recorded
    with ranker and query_seed null)."""
    import asyncio

    from haystack import Pipeline
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from llama_index.core import Document as LlamaDocument
    from llama_index.core import MockEmbedding, VectorStoreIndex
    from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

    from fairrag_haystack import FairDocumentRanker
    from fairrag_langchain import make_fair_rag_chain

    seed = FairComponent(**EMPTY_POOL, seed=3).place([], [], 5).query_seed  # the first draw

    # LangChain: the handler's record and the chain's own, sync and async
    chain = make_fair_rag_chain(_nothing_matches(**EMPTY_POOL, seed=3), FakeCitingChatModel())
    handler = FairnessCallbackHandler(group_key="gender", protected="female")
    output = chain.invoke(QUESTION, config={"callbacks": [handler]})
    _named_ranking(output["metrics"], seed)
    (record,) = handler.records
    _named_ranking(record, seed)
    assert output["context"] == []
    chain = make_fair_rag_chain(_nothing_matches(**EMPTY_POOL, seed=3), FakeCitingChatModel())
    handler = FairnessCallbackHandler(group_key="gender", protected="female")
    output = asyncio.run(chain.ainvoke(QUESTION, config={"callbacks": [handler]}))
    _named_ranking(output["metrics"], seed)
    _named_ranking(handler.records[0], seed)

    # LangChain: the fair retriever nested in the one whose list is shown (a compression
    # retriever's base; the compressor is not called on an empty list)
    nested = ContextualCompressionRetriever(
        base_compressor=FairReranker(ranker="standard", group_key="gender"),
        base_retriever=_nothing_matches(**EMPTY_POOL, seed=3),
    )
    handler = FairnessCallbackHandler(group_key="gender", protected="female")
    (nested | RunnableLambda(lambda docs: "nothing")).invoke(
        QUESTION, config={"callbacks": [handler]}
    )
    _named_ranking(handler.records[0], seed)

    # LlamaIndex: a real index whose metadata filter matches nothing
    index = VectorStoreIndex.from_documents(
        [LlamaDocument(text="Ada was a pioneer.", metadata={"title": "Ada", "gender": "female"})],
        embed_model=MockEmbedding(embed_dim=8),
    )
    postprocessor = FairRerankPostprocessor(**EMPTY_POOL, seed=3, top_n=5)
    engine = index.as_query_engine(
        llm=CitingMockLLM(),
        embed_model=MockEmbedding(embed_dim=8),
        node_postprocessors=[postprocessor],
        filters=MetadataFilters(filters=[MetadataFilter(key="gender", value="other")]),
    )
    with FairnessEventHandler.from_postprocessor(postprocessor) as li_handler:
        engine.query(QUESTION)
    _named_ranking(li_handler.records[0], seed)

    # Haystack: a pipeline whose retriever's filter matches nothing
    store = InMemoryDocumentStore()
    store.write_documents([])
    built = Pipeline()
    built.add_component("retriever", InMemoryBM25Retriever(store, top_k=30))
    built.add_component("fair", FairDocumentRanker(**EMPTY_POOL, seed=3, top_k=5))
    built.connect("retriever.documents", "fair.documents")
    result = built.run({"retriever": {"query": QUESTION}, "fair": {"query": QUESTION}})
    _named_ranking(result["fair"]["record"], seed)


def test_a_plain_empty_list_still_describes_itself():
    """No fair ranking ran (a compression retriever does not call its compressor on an empty
    list): ranker null, as before."""
    retriever = ContextualCompressionRetriever(
        base_compressor=FairReranker(**EMPTY_POOL), base_retriever=ListRetriever(documents=[])
    )
    handler = FairnessCallbackHandler.from_retriever(retriever)
    (retriever | RunnableLambda(lambda docs: "nothing")).invoke(
        QUESTION, config={"callbacks": [handler]}
    )
    (record,) = handler.records
    assert record["ranker"] is None and record["query_seed"] is None and record["k"] == 0


def test_async_handlers_hear_the_empty_ranking_on_the_callers_event_loop():
    """The async path sent the event through a sync manager: an AsyncCallbackHandler got it
    on a private loop in a worker thread, and one with a loop-bound queue lost it."""
    import asyncio

    from langchain_core.callbacks import AsyncCallbackHandler

    from fairrag_langchain._fields import EMPTY_RANKING_EVENT

    class Heard(AsyncCallbackHandler):
        def __init__(self) -> None:
            self.events: list[tuple[str, bool]] = []

        async def on_custom_event(self, name, data, *, run_id, **kwargs):
            self.events.append((name, asyncio.get_running_loop() is caller))

    async def ask() -> None:
        nonlocal caller
        caller = asyncio.get_running_loop()
        await _nothing_matches(**EMPTY_POOL, seed=3).ainvoke(
            QUESTION, config={"callbacks": [heard, record]}
        )

    caller = None
    heard = Heard()
    record = FairnessCallbackHandler(group_key="gender", protected="female")
    asyncio.run(ask())
    assert heard.events == [(EMPTY_RANKING_EVENT, True)]
    assert record.records[0]["ranker"] == "representative_stochastic"
