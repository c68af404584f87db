"""Components that travel (docs/SPEC.md, "Adapters" → Copies, pickling and serialisation):
every public component and handler pickles and deep-copies, keeps its configuration, and in
another process ranks as a fresh component with the same fields does; ``to_dict``/``from_dict``
round-trips every way a postprocessor can be built. Tested through a real
``ProcessPoolExecutor`` whose workers are spawned (a fresh interpreter: everything is pickled).
"""

from __future__ import annotations

import copy
import json
import logging
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.schema import QueryBundle

from fairrag_core import make_ranker
from fairrag_core.kit import describe_ranker
from fairrag_langchain import FairnessCallbackHandler, FairReranker, FairRetriever
from fairrag_llamaindex import FairnessEventHandler, FairRerankPostprocessor
from tests.langchain.doubles import documents_of_pool
from tests.llamaindex.pools import make_pool

QUESTION = "Who are influential people in this pool?"
FIELDS = {"group_key": "gender", "protected": "female", "seed": 7}


def _documents(n: int = 20) -> list[Document]:
    return documents_of_pool(make_pool(n, seed=9))


def _components():
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    store.add_documents(_documents())
    return {
        "FairReranker": FairReranker(ranker="stochastic", top_n=4, **FIELDS),
        "FairReranker amortized": FairReranker(ranker="amortized", top_n=4, **FIELDS),
        "FairRetriever": FairRetriever(vectorstore=store, k=4, pool_size=20, **FIELDS),
        "postprocessor": FairRerankPostprocessor(relevance="similarity", top_n=4, **FIELDS),
        "postprocessor with a ready Ranker": FairRerankPostprocessor(
            relevance="similarity",
            group_key="gender",
            ranker=make_ranker("fair", protected="female", target_share=0.4, seed=2),
        ),
    }


def _rank(component) -> tuple[list[str], int]:
    """One ranking of the test pool: the ids shown and the query seed it was drawn with."""
    if isinstance(component, FairRerankPostprocessor):
        nodes = component.postprocess_nodes(make_pool(20, seed=9), QueryBundle(QUESTION))
        return [n.node.node_id for n in nodes], nodes[0].node.metadata["query_seed"]
    if isinstance(component, FairRetriever):
        documents = component.invoke(QUESTION)
    else:
        documents = list(component.compress_documents(_documents(), QUESTION))
    return [d.id for d in documents], documents[0].metadata["query_seed"]


def _travel(component, how: str):
    return pickle.loads(pickle.dumps(component)) if how == "pickle" else copy.deepcopy(component)


def _config(component) -> str:
    dump = component.model_dump(exclude={"vectorstore", "callback_manager"})
    return json.dumps(dump, sort_keys=True, default=str)


@pytest.mark.parametrize("name", list(_components()))
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_component_travels_with_its_configuration_and_ranks_as_a_fresh_one(name, how, caplog):
    fresh, original = _components()[name], _components()[name]
    amortized = original.core_ranker.name == "amortized"
    if not amortized:  # the original has drawn a query seed: the copy does not inherit that
        _rank(original)
    with caplog.at_level(logging.WARNING):
        travelled = (
            pickle.loads(pickle.dumps(original)) if how == "pickle" else copy.deepcopy(original)
        )
    assert not [r for r in caplog.records if "unpickleable" in r.getMessage()]
    assert _config(travelled) == _config(original)
    # the first copy of a component draws its seed's first spawned stream, whatever the
    # original drew before (docs/SPEC.md, "Copies, pickling and serialisation"): it ranks as
    # the first copy of a fresh component does, not as the fresh component itself
    assert _rank(travelled) == _rank(_travel(fresh, how))
    if not amortized:  # a stochastic ranker's copy draws another stream than the original's
        assert _rank(_travel(_components()[name], how)) != _rank(_components()[name])
    if amortized:  # the component's own ledger travels with its stream's totals
        _rank(original)
        moved = pickle.loads(pickle.dumps(original)) if how == "pickle" else copy.deepcopy(original)
        assert moved.ledger.state().as_record() == original.ledger.state().as_record()
        # deepcopy keeps the one stream (like model_copy); a pickle, in another process,
        # carries its totals
        assert (moved.ledger is original.ledger) == (how == "deepcopy")


@pytest.mark.parametrize(
    "handler",
    [
        lambda path: FairnessCallbackHandler(group_key="gender", protected="female", path=path),
        lambda path: FairnessEventHandler(group_key="gender", protected="female", path=path),
    ],
    ids=["langchain", "llamaindex"],
)
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_handler_travels_with_its_records_and_log(handler, how, tmp_path):
    original = handler(tmp_path / "fairness.jsonl")
    original._kept.add([{"schema": 2, "query": "before"}])
    travelled = pickle.loads(pickle.dumps(original)) if how == "pickle" else copy.deepcopy(original)
    assert travelled.records == original.records
    assert travelled.log is not None and travelled.log.path == original.log.path
    assert travelled.auditor.describe() == original.auditor.describe()
    travelled._kept.add([{"schema": 2, "query": "after"}])
    lines = (tmp_path / "fairness.jsonl").read_text().splitlines()
    assert [json.loads(line)["query"] for line in lines] == ["before", "after"]
    assert len(original.records) == 1  # the copy keeps its own records from then on


def _rank_in_worker(component) -> tuple[list[str], int]:
    return _rank(component)


def _answer_in_worker(retriever, handler) -> list[dict]:
    retriever.invoke(QUESTION, config={"callbacks": [handler]})
    return handler.records


def test_components_and_handlers_work_in_a_spawned_process_pool(tmp_path):
    components = _components()
    # each component sent to the pool is its first copy: it draws its seed's first spawned
    # stream, as the first copy of a fresh component does in this process
    expected = {name: _rank(_travel(_components()[name], "pickle")) for name in components}
    context = multiprocessing.get_context("spawn")
    retriever = components["FairRetriever"]
    handler = FairnessCallbackHandler.from_retriever(retriever, path=tmp_path / "log.jsonl")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        ranked = {name: pool.submit(_rank_in_worker, c) for name, c in components.items()}
        records = pool.submit(_answer_in_worker, retriever, handler).result(timeout=300)
        got = {name: future.result(timeout=300) for name, future in ranked.items()}
    assert got == expected
    (record,) = records
    assert record["ranker"] == "representative_stochastic" and len(record["doc_ids"]) == 4
    logged = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert logged == [json.loads(json.dumps(record))]  # the worker wrote to the same file
    assert handler.records == []  # the parent's handler saw no run


@pytest.mark.parametrize(
    "fields",
    [
        {"ranker": "stochastic", "seed": 3, "ranker_params": {"alpha": 2.0}},
        {"ranker": make_ranker("fair", protected="female", target_share=0.4, seed=3)},
        {"ranker": make_ranker("amortized", protected="female", seed=1, exposure="rbp(0.5)")},
        {"ranker": make_ranker("representative_stochastic", target={"a": 0.3, "b": 0.7}, seed=4)},
        {
            "protected": None,
            "target": make_ranker("standard", protected="female").target,
            "seed": 8,
        },
        {"exposure": "uniform", "ranker": "forced_exposure", "seed": 5},
        {"ranker": "amortized", "ledger": "memory", "ledger_key": "tenant", "seed": 6},
    ],
    ids=repr,
)
def test_to_dict_from_dict_round_trips_every_way_a_postprocessor_is_built(fields):
    base = {"group_key": "gender", "protected": "female", "relevance": "similarity"}
    if not isinstance(fields.get("ranker", ""), str):  # a ready Ranker carries its own target
        base.pop("protected")
    original = FairRerankPostprocessor(**{**base, **fields})
    rebuilt = FairRerankPostprocessor.from_dict(json.loads(json.dumps(original.to_dict())))
    assert describe_ranker(rebuilt.core_ranker) == describe_ranker(original.core_ranker)
    assert rebuilt.to_dict() == original.to_dict()
    assert _rank(rebuilt) == _rank(FairRerankPostprocessor(**{**base, **fields}))
