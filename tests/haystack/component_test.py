"""FairDocumentRanker in Haystack's idiom: a real ``Pipeline`` of an ``InMemoryDocumentStore``'s
BM25 retriever feeding the component; the ranking is the core's for the same pool and seed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from pydantic import ValidationError

import fairrag_haystack
from fairrag_core import make_ranker, rerank, scores_from_order
from fairrag_core.kit import PLACEMENT_KEYS
from fairrag_haystack import FairDocumentRanker

QUERY = "pioneer of computing"


def biographies(n: int = 40) -> list[Document]:
    """``n`` biographies, every fifth one female, all matching the query's words."""
    documents = []
    for i in range(n):
        gender = "female" if i % 5 == 4 else "male"
        words = " ".join(["computing"] * (1 + (n - i) // 8))
        documents.append(
            Document(
                id=f"d{i}",
                content=f"Person {i} is a pioneer of {words}.",
                meta={"title": f"Person {i}", "gender": gender},
            )
        )
    return documents


def pipeline(**fields) -> Pipeline:
    store = InMemoryDocumentStore()
    store.write_documents(biographies())
    fields.setdefault("protected", "female")
    built = Pipeline()
    built.add_component("retriever", InMemoryBM25Retriever(store, top_k=30))
    built.add_component("fair", FairDocumentRanker(group_key="gender", top_k=5, **fields))
    built.connect("retriever.documents", "fair.documents")
    return built


def test_all_names_the_public_api():
    assert fairrag_haystack.__all__ == [
        "ContextText",
        "FairAnswerRecorder",
        "FairDocumentRanker",
        "context_text",
    ]
    for name in fairrag_haystack.__all__:
        assert getattr(fairrag_haystack, name) is not None


def test_a_pipeline_ranks_the_retrievers_pool_as_the_core_does():
    built = pipeline()
    result = built.run(
        {"retriever": {"query": QUERY}, "fair": {"query": QUERY, "seed": 7}},
        include_outputs_from={"retriever"},
    )
    pool = result["retriever"]["documents"]
    shown = result["fair"]["documents"]
    expected = rerank(
        make_ranker("representative_stochastic", protected="female"),
        [d.score for d in pool],
        [d.meta["gender"] for d in pool],
        5,
        rng=np.random.default_rng(7),
        ids=[d.id for d in pool],
    )
    assert [d.id for d in shown] == [pool[i].id for i in expected.indices]
    assert [d.meta["fair_rank"] for d in shown] == [1, 2, 3, 4, 5]
    assert all(d.meta["query_seed"] == 7 and set(PLACEMENT_KEYS) <= set(d.meta) for d in shown)
    assert [d.score for d in shown] == [p.score for p in expected.placements]
    assert all("fair_rank" not in d.meta for d in pool)  # the retriever's Documents untouched
    record = result["fair"]["record"]
    assert record["source"] == "haystack" and record["query"] == QUERY
    assert record["doc_ids"] == [d.id for d in shown] and record["k"] == 5
    assert record["pool_size"] == 30 and record["query_seed"] == 7
    fair = built.get_component("fair")
    assert fair.records == [record]


@pytest.mark.parametrize("ledger", [None, "sqlite"])
def test_run_async_ranks_as_run_and_waits_on_a_ledger_in_the_ledger_pool(ledger, tmp_path):
    """``Pipeline.run_async``: the same ranking as ``run``; with a SQLite ledger in a thread of
    the ledger pool (whose deadline counts the wait), not in the loop's default executor, where
    a component without ``run_async`` ran (6 threads here: a hung ledger queued requests)."""
    import asyncio
    import threading

    fields = {} if ledger is None else {"ranker": "amortized", "ledger": str(tmp_path / "l.db")}
    built = pipeline(**fields)
    fair = built.get_component("fair")
    threads: list[str] = []
    run = fair.run

    def spied(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return run(*args, **kwargs)

    fair.run = spied
    inputs = {"retriever": {"query": QUERY}, "fair": {"query": QUERY, "seed": 5}}
    shown = asyncio.run(built.run_async(inputs))["fair"]["documents"]
    in_loop = threads.pop()
    if ledger is None:
        assert in_loop == threading.current_thread().name  # pure computation: in place
    else:
        assert in_loop.startswith("fairrag-ledger")
    again = built.run(inputs)["fair"]["documents"]
    assert len(fair.records) == 2
    if ledger is None:
        assert [d.id for d in shown] == [d.id for d in again]
    else:  # the amortized ranker draws from what the ledger holds: both rankings in it
        assert fair.fair.core_ranker.ledger.state().rankings == 2


def test_the_same_seed_redraws_the_same_ranking_and_others_differ():
    built = pipeline()

    def ids(seed):
        out = built.run({"retriever": {"query": QUERY}, "fair": {"query": QUERY, "seed": seed}})
        return [d.id for d in out["fair"]["documents"]]

    assert ids(3) == ids(3)
    assert len({tuple(ids(seed)) for seed in range(8)}) > 1


def test_the_pipeline_serialises_and_loads_with_its_configuration(tmp_path):
    built = pipeline(ranker="stochastic", ranker_params={"alpha": 2.0}, seed=11)
    loaded = Pipeline.loads(built.dumps(), allowed_modules=["fairrag_haystack"])
    fair = loaded.get_component("fair")
    assert fair.fair.ranker == "stochastic" and fair.fair.ranker_params == {"alpha": 2.0}
    assert fair.fair.seed == 11 and fair.top_k == 5
    first = built.run({"retriever": {"query": QUERY}, "fair": {"seed": 2}})
    again = loaded.run({"retriever": {"query": QUERY}, "fair": {"seed": 2}})
    assert [d.id for d in first["fair"]["documents"]] == [d.id for d in again["fair"]["documents"]]


@pytest.mark.parametrize("ranker", ["representative_stochastic", "amortized", "forced_exposure"])
def test_a_yaml_round_trip_that_sorts_the_target_draws_the_same_rankings(ranker):
    """YAML sorts the target's keys ({female, OTHERS} is loaded as {OTHERS, female}): the loaded
    pipeline draws what the built one does, seed by seed (a target is a mapping)."""
    target = {"female": 0.4, "OTHERS": 0.6}
    built = pipeline(ranker=ranker, protected=None, target=target)
    loaded = Pipeline.loads(built.dumps(), allowed_modules=["fairrag_haystack"])
    assert list(loaded.get_component("fair").to_dict()["init_parameters"]["target"]) == [
        "OTHERS",
        "female",
    ]

    def ids(pipe, seed):
        out = pipe.run({"retriever": {"query": QUERY}, "fair": {"query": QUERY, "seed": seed}})
        return [d.id for d in out["fair"]["documents"]]

    assert [ids(built, seed) for seed in range(20)] == [ids(loaded, seed) for seed in range(20)]


@pytest.mark.parametrize(
    "fields",
    [
        {"protected": None, "target": {0: 0.5, 1: 0.5}},
        {"protected": None, "target": make_ranker("forced_exposure", protected=0).target},
        {"protected": None, "ranker": make_ranker("forced_exposure", protected=0)},
        {"protected": 0, "ranker": "amortized", "ranker_params": {"alpha": np.float64(2.0)}},
    ],
    ids=["int mapping", "int Target", "ready Ranker", "numpy alpha"],
)
def test_a_pipeline_whose_groups_are_numbers_saves_and_loads_its_target(fields):
    """A Haystack trial: 0/1 group codes (common in metadata) could not be saved (a target
    mapping: "non-string key"), or were saved as "0"/"1": the loaded pipeline failed or ranked
    for groups no document has. It draws what the built one does, seed by seed."""
    store = InMemoryDocumentStore()
    store.write_documents(
        [
            Document(id=d.id, content=d.content, meta={**d.meta, "gender": int(i % 5 == 4)})
            for i, d in enumerate(biographies())
        ]
    )
    built = Pipeline()
    built.add_component("retriever", InMemoryBM25Retriever(store, top_k=30))
    built.add_component("fair", FairDocumentRanker(group_key="gender", top_k=5, **fields))
    built.connect("retriever.documents", "fair.documents")
    loaded = Pipeline.loads(built.dumps(), allowed_modules=["fairrag_haystack"])
    before = built.get_component("fair").fair.fairness_target
    after = loaded.get_component("fair").fair.fairness_target
    assert after.as_dict() == before.as_dict() and after.protected == before.protected

    def ids(pipe, seed):
        out = pipe.run({"retriever": {"query": QUERY}, "fair": {"query": QUERY, "seed": seed}})
        return [d.id for d in out["fair"]["documents"]]

    if fields.get("ranker") != "amortized":  # a ledger's stream goes on: not redrawn
        assert [ids(built, seed) for seed in range(10)] == [ids(loaded, seed) for seed in range(10)]


def test_records_are_appended_to_the_log(tmp_path):
    log = tmp_path / "fairness.jsonl"
    built = pipeline(log_path=str(log))
    built.run({"retriever": {"query": QUERY}, "fair": {"query": QUERY}})
    (line,) = log.read_text().splitlines()
    assert json.loads(line)["source"] == "haystack"


def test_an_unscored_pool_is_ranked_by_its_incoming_order():
    documents = biographies(12)
    out = FairDocumentRanker(group_key="gender", protected="female").run(documents, seed=4)
    expected = rerank(
        make_ranker("representative_stochastic", protected="female"),
        scores_from_order(12),
        [d.meta["gender"] for d in documents],
        5,
        rng=np.random.default_rng(4),
        ids=[d.id for d in documents],
    )
    assert [d.id for d in out["documents"]] == [documents[i].id for i in expected.indices]
    assert all(d.score is None and d.meta["relevance_score"] is None for d in out["documents"])


def test_a_ranker_without_a_target_returns_no_record():
    out = FairDocumentRanker(group_key="gender", ranker="standard").run(biographies(8))
    assert out["record"] is None and len(out["documents"]) == 5


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"relevance": "cosine"}, "relevance 'cosine' is unknown"),
        ({"top_k": 0}, "top_k must be an int >= 1"),
        ({"bogus": 1}, "bogus"),
        ({"ranker": "best"}, "unknown ranker 'best'"),
        ({"group_key": " "}, "group_key must name"),
    ],
)
def test_bad_configuration_fails_at_construction_naming_it(fields, message):
    fields = {"group_key": "gender", "protected": "female", **fields}
    with pytest.raises(ValueError, match=message):
        FairDocumentRanker(**fields)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        (
            {"top_n": 3},
            "unknown argument 'top_n' \\(did you mean 'top_k'\\?\\); accepted: group_key, top_k, ",
        ),
        ({"bogus": 1}, "unknown argument 'bogus'; accepted: .*title_key.*ranker, protected"),
        ({"k": 3}, "FairDocumentRanker got an unknown argument 'k'"),
    ],
)
def test_an_unknown_argument_is_named_with_what_is_accepted(fields, named):
    """A user trial: ``FairDocumentRanker(top_n=3)`` raised pydantic's bare "Extra inputs are
    not permitted" under the name of the contract it holds (FairComponent), listing nothing."""
    with pytest.raises(ValueError, match=named) as refused:
        FairDocumentRanker(group_key="gender", protected="female", **fields)
    assert "FairComponent" not in str(refused.value)
    assert "max_records" in str(refused.value) and "ledger_key" in str(refused.value)


def test_a_record_changed_by_the_pipeline_or_the_user_leaves_the_kept_one_as_logged(tmp_path):
    """A user trial: the record a run returned, and each of ``records``, was the kept record
    itself: a step adding the answer to it (Haystack records carry none) rewrote the kept
    record, which then no longer matched the log."""
    pool = [
        Document(content=f"Title: P{i}\nx", meta={"gender": g}, score=1.0 - i / 10)
        for i, g in enumerate(["male", "female", "male", "female", "male"])
    ]
    log = tmp_path / "fair.jsonl"
    ranker = FairDocumentRanker(group_key="gender", protected="female", top_k=4, log_path=log)
    record = ranker.run(documents=pool, query="q", seed=1)["record"]
    record["answer"] = "- P1 [1]"
    record["titles"].append("Not Shown")
    ranker.records[0]["query"] = "edited"
    kept = ranker.records[0]
    logged = json.loads(log.read_text(encoding="utf-8"))
    assert "answer" not in kept and kept["query"] == "q" and len(kept["titles"]) == 4
    assert {key: kept[key] for key in logged} == logged


def test_a_refused_contract_field_names_the_ranker_not_the_contract():
    with pytest.raises(ValidationError, match="for FairDocumentRanker") as refused:
        FairDocumentRanker(group_key="gender", protected="female", target_share="0.3")
    assert "FairComponent" not in str(refused.value)
    assert "target_share must be a number" in str(refused.value)


@pytest.mark.parametrize("protected", [["female"], {"female"}, {"g": "female"}, slice(1)])
def test_an_unhashable_protected_label_is_refused_naming_it(protected):
    """A user trial: pydantic's ``is_hashable`` error, raised again under this class's name,
    raised ``KeyError: "Invalid error type: 'is_hashable'"`` instead (LangChain's FairReranker
    refused it as it should)."""
    with pytest.raises(ValidationError, match="for FairDocumentRanker") as refused:
        FairDocumentRanker(group_key="gender", protected=protected)
    assert "protected" in str(refused.value) and "hashable" in str(refused.value)
    assert refused.value.errors()[0]["type"] == "is_hashable"


@pytest.mark.parametrize("title_key", [None, 3, "", "  "])
def test_a_title_key_that_names_no_field_is_refused(title_key):
    """A user trial: ``title_key=None`` (or 3) was accepted, then every recorded title was null."""
    with pytest.raises(ValueError, match="title_key must name the metadata field"):
        FairDocumentRanker(group_key="gender", protected="female", title_key=title_key)
    fair = FairDocumentRanker(group_key="gender", protected="female", title_key="name")
    with pytest.raises(ValueError, match="title_key must name the metadata field"):
        fair.title_key = title_key
    assert fair.title_key == "name"  # the refused value is not kept


@pytest.mark.parametrize(
    ("name", "value", "refused"),
    [
        ("top_k", 0, "top_k must be an int >= 1"),
        ("top_k", "3", "top_k must be an int >= 1"),
        ("relevance", "cosine", "relevance 'cosine' is unknown; accepted: "),
    ],
)
def test_a_field_assigned_later_is_checked_as_when_built(name, value, refused):
    """A user trial: ``top_k = 0`` and ``relevance = "cosine"`` were kept, saved by
    ``to_dict`` and then refused by ``Pipeline.loads`` with an error naming neither."""
    fair = FairDocumentRanker(group_key="gender", protected="female", top_k=3)
    with pytest.raises(ValueError, match=refused):
        setattr(fair, name, value)
    assert (fair.top_k, fair.relevance) == (3, "similarity")  # the refused value is not kept
    fair.top_k, fair.relevance = 4, "cosine_distance"
    saved = fair.to_dict()["init_parameters"]
    assert (saved["top_k"], saved["relevance"]) == (4, "cosine_distance")
    shown = fair.run(biographies(), query="q")["documents"]
    assert len(shown) == 4


@pytest.mark.parametrize("name", ["log_path", "max_records"])
def test_the_log_and_its_size_are_set_when_built_not_later(name, tmp_path):
    """A user trial: ``log_path`` or ``max_records`` assigned after building was ignored by
    every run (no file written, every record kept) but saved by ``to_dict``, so the loaded
    pipeline behaved otherwise; it is refused, as the LlamaIndex handler refuses it."""
    log = tmp_path / "fair.jsonl"
    fair = FairDocumentRanker(group_key="gender", protected="female", top_k=3, max_records=2)
    with pytest.raises(AttributeError, match=f"{name} is set when the component is built"):
        setattr(fair, name, str(log) if name == "log_path" else 1)
    assert fair.log_path is None and fair.max_records == 2
    saved = fair.to_dict()["init_parameters"]
    assert saved["log_path"] is None and saved["max_records"] == 2
    for _ in range(3):
        fair.run(biographies(), query="q")
    assert len(fair.records) == 2 and not log.exists()
    logged = FairDocumentRanker(group_key="gender", protected="female", log_path=str(log))
    logged.run(biographies(), query="q")
    assert logged.log_path == str(log) and len(log.read_text().splitlines()) == 1


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ({"documents": None}, "documents must be a list of haystack Documents"),
        ({"documents": ["a"]}, "got a str among them"),
        ({"documents": [{"content": "x"}]}, "got a dict among them"),
        ({"documents": [], "query": 5}, "query must be"),
    ],
)
def test_bad_run_input_is_an_error_naming_the_argument(call, named):
    """A Haystack trial: ``run(documents=None)`` raised "'NoneType' object is not iterable",
    a list of strings "'str' object has no attribute 'score'", a query of 5 was recorded."""
    with pytest.raises(TypeError, match=named):
        FairDocumentRanker(group_key="gender", protected="female").run(**call)


def test_a_top_k_set_after_construction_and_a_log_path_are_checked():
    fair = FairDocumentRanker(group_key="gender", protected="female")
    with pytest.raises(ValueError, match="top_k must be an int >= 1"):
        fair.top_k = 0  # refused when assigned (a run's own top_k input is checked too)
    with pytest.raises(ValueError, match="top_k must be an int >= 1"):
        fair.run(documents=biographies(), top_k=0)
    with pytest.raises(TypeError, match="log_path must be a file path"):
        FairDocumentRanker(group_key="gender", protected="female", log_path=5)


def test_a_log_path_given_as_a_path_saves_as_text(tmp_path):
    """A review: ``log_path=Path(...)`` was accepted, then ``Pipeline.dumps()`` refused the
    ``PosixPath``."""
    built = pipeline(log_path=tmp_path / "fair.jsonl")
    loaded = Pipeline.loads(built.dumps(), allowed_modules=["fairrag_haystack"])
    assert loaded.get_component("fair").log_path == str(tmp_path / "fair.jsonl")
