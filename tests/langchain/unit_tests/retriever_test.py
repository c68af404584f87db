"""FairRetriever on an in-memory pool: copies, metadata, per-call k and seed, relevance functions,
groups, the async path and tracing params."""

from __future__ import annotations

import asyncio
import copy
import math
import warnings

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

from fairrag_core import FairnessAuditor, make_ranker
from fairrag_langchain import FairReranker, FairRetriever
from fairrag_langchain.retrievers import RELEVANCE_FALLBACK
from tests.langchain.doubles import (
    CosineFixedPoolStore,
    FixedPoolStore,
    imbalanced_pool,
    person_documents,
)


@pytest.fixture
def pool():
    return imbalanced_pool()


@pytest.fixture
def store(pool):
    return FixedPoolStore(*pool)


def fair(store, **params) -> FairRetriever:
    params.setdefault("protected", "female")
    params.setdefault("group_key", "gender")
    return FairRetriever(vectorstore=store, **params)


def titles(documents) -> list[str]:
    return [d.metadata["title"] for d in documents]


def test_returns_copies_and_never_changes_the_stores_documents(store, pool):
    originals = copy.deepcopy(pool[0])
    documents = fair(store, seed=1).invoke("who?")
    assert len(documents) == 5
    shown_ids = {id(d) for d in documents}
    assert not shown_ids & {id(d) for d in pool[0]}
    assert not {id(d.metadata) for d in documents} & {id(d.metadata) for d in pool[0]}
    assert pool[0] == originals  # the store's objects: same content, no added keys
    assert all("fair_rank" not in d.metadata for d in pool[0])


def test_metadata_states_scores_ranks_exposure_and_ranker(store, pool):
    documents = fair(store, ranker="standard").invoke("who?")
    by_title = {d.metadata["title"]: dist for d, dist in zip(*pool, strict=True)}
    for rank, document in enumerate(documents, start=1):
        meta = document.metadata
        assert meta["relevance_score"] == pytest.approx(1.0 - by_title[meta["title"]])
        assert meta["fair_rank"] == rank
        assert meta["pool_rank"] == rank  # standard ranking = pool order
        assert meta["exposure_weight"] == pytest.approx(1.0 / math.log2(rank + 1))
        assert meta["ranker"] == "standard"
        assert meta["relevance_function"] == RELEVANCE_FALLBACK
        assert document.page_content.startswith(f"Title: {meta['title']}")
    assert titles(documents) == titles(pool[0][:5])


def test_fair_ranker_reports_pool_ranks_of_lower_candidates(store):
    documents = fair(store, ranker="forced_exposure").invoke("who?")
    assert sorted(d.metadata["fair_rank"] for d in documents) == [1, 2, 3, 4, 5]
    female = [d for d in documents if d.metadata["gender"] == "female"]
    assert len(female) == 2  # floor(5 * 0.5) slots owed to the protected group
    assert all(d.metadata["pool_rank"] > 30 for d in female)  # they come from the pool's tail


def test_store_relevance_function_used_when_the_store_states_one(pool):
    store = CosineFixedPoolStore(*pool)
    documents = fair(store, ranker="standard").invoke("who?")
    assert documents[0].metadata["relevance_function"] == "store: cosine_relevance_score_fn"
    assert documents[0].metadata["relevance_score"] == pytest.approx(0.9)


def test_relevance_score_fn_replaces_store_and_fallback(pool):
    def halve(distance: float) -> float:
        return -distance / 2

    store = CosineFixedPoolStore(*pool)
    documents = fair(store, ranker="standard", relevance_score_fn=halve).invoke("who?")
    assert documents[0].metadata["relevance_function"] == "given: halve"
    assert documents[0].metadata["relevance_score"] == pytest.approx(-0.05)


def test_in_memory_store_similarities_are_kept_as_relevance():
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    store.add_documents(person_documents(["female", "male"] * 10))
    plain = store.similarity_search_with_score("pioneers", k=5)
    documents = fair(store, ranker="standard").invoke("pioneers")
    assert titles(documents) == [d.metadata["title"] for d, _ in plain]
    assert [d.metadata["relevance_score"] for d in documents] == pytest.approx(
        [score for _, score in plain]
    )
    assert "InMemoryVectorStore" in documents[0].metadata["relevance_function"]


def test_k_per_call_overrides_the_field(store):
    retriever = fair(store, k=4)
    assert len(retriever.invoke("who?")) == 4
    assert len(retriever.invoke("who?", k=2)) == 2
    assert store.calls[-1][2] == 50  # the pool is still pool_size candidates


def test_k_above_pool_size_fetches_k(store):
    documents = fair(store, pool_size=3).invoke("who?", k=8)
    assert len(documents) == 8
    assert store.calls[-1][2] == 8


@pytest.mark.parametrize("bad_k", [0, -1, "3", 2.5])
def test_bad_k_per_call_is_an_error_naming_k(store, bad_k):
    with pytest.raises((TypeError, ValueError), match="k must be"):
        fair(store).invoke("who?", k=bad_k)


def test_bad_fields_fail_at_construction(store):
    with pytest.raises(ValueError, match="pool_size"):
        fair(store, pool_size=0)
    with pytest.raises(ValueError, match=r"unknown ranker 'fairest'.*representative_stochastic"):
        fair(store, ranker="fairest")
    with pytest.raises(ValueError, match="no fairness target"):
        FairRetriever(group_key="gender", vectorstore=store, ranker="representative_stochastic")
    with pytest.raises(ValueError, match="alpha"):
        fair(store, ranker_params={"alpha": 0})


def test_per_call_seed_is_deterministic_and_isolated(store):
    retriever = fair(store, seed=0)
    first = [titles(retriever.invoke("who?", seed=s)) for s in range(8)]
    again = [titles(fair(store, seed=123).invoke("who?", seed=s)) for s in range(8)]
    assert first == again  # the per-call seed alone decides, not the field or earlier calls
    assert len({tuple(t) for t in first}) > 1  # different seeds, different draws
    generator_draws = [titles(retriever.invoke("who?", seed=np.random.default_rng(2)))]
    generator_draws.append(titles(retriever.invoke("who?", seed=np.random.default_rng(2))))
    assert generator_draws[0] == generator_draws[1]


def test_field_seed_gives_the_same_sequence_of_rankings(store):
    a, b = fair(store, seed=5), fair(store, seed=5)
    assert [titles(a.invoke("who?")) for _ in range(5)] == [
        titles(b.invoke("who?")) for _ in range(5)
    ]


def test_ranker_params_reach_the_core_ranker(store):
    retriever = fair(store, ranker="stochastic", ranker_params={"alpha": 64.0}, seed=0)
    assert retriever.core_ranker.alpha == 64.0
    assert retriever.ranker_name == "stochastic"


def test_a_built_core_ranker_is_used_as_is(store):
    ranker = make_ranker("forced_exposure", protected="female")
    retriever = FairRetriever(group_key="gender", vectorstore=store, ranker=ranker)
    assert retriever.core_ranker is ranker
    assert retriever.invoke("who?")[0].metadata["ranker"] == "forced_exposure"
    with pytest.raises(ValueError, match="would be ignored"):
        FairRetriever(group_key="gender", vectorstore=store, ranker=ranker, protected="female")


def test_candidates_without_the_group_field_are_an_unknown_group():
    genders = [None, None, "female", None, "male", None, None, "male", None, None]
    documents = person_documents(genders)
    store = FixedPoolStore(documents, [0.1 * i for i in range(len(documents))])
    shown = fair(store, ranker="standard").invoke("who?")
    assert "gender" not in shown[0].metadata  # nothing is invented for the missing field
    groups = [d.metadata.get("gender") for d in shown]
    assert groups == [None, None, "female", None, "male"]
    # Unknown counts toward "everyone else", never toward the protected group.
    share = FairnessAuditor.create(protected="female").retrieval(groups)["exposure_share"]
    assert share == pytest.approx((1 / math.log2(4)) / sum(1 / math.log2(i + 2) for i in range(5)))
    # The fair ranker still runs on such a pool and treats unknowns as non-protected.
    fair_groups = [
        d.metadata.get("gender") for d in fair(store, ranker="forced_exposure").invoke("who?")
    ]
    assert fair_groups.count("female") == 1  # the pool's only protected candidate


def test_a_group_key_no_candidate_has_is_an_error_naming_key_and_fields(store):
    with pytest.raises(KeyError) as raised:
        fair(store, group_key="gendr").invoke("who?")
    message = str(raised.value)
    assert "'gendr'" in message
    for existing in ("doc_id", "gender", "title", "topics"):
        assert existing in message


def test_search_kwargs_and_per_call_extras_reach_the_store(store):
    retriever = fair(store, search_kwargs={"filter": {"gender": "male"}}, ranker="standard")
    documents = retriever.invoke("who?")
    assert {d.metadata["gender"] for d in documents} == {"male"}
    assert store.calls[-1][3] == {"filter": {"gender": "male"}}
    documents = retriever.invoke("who?", filter={"gender": "female"})
    assert {d.metadata["gender"] for d in documents} == {"female"}


def test_empty_pool_gives_no_documents(store):
    retriever = fair(store, search_kwargs={"filter": {"gender": "nobody"}})
    assert retriever.invoke("who?") == []


async def test_async_path_awaits_the_stores_async_search(store):
    retriever = fair(store, seed=0)
    documents = await retriever.ainvoke("who?", k=3, seed=4)
    assert [mode for mode, *_ in store.calls] == ["async"]
    assert titles(documents) == titles(retriever.invoke("who?", k=3, seed=4))


async def test_async_path_uses_store_relevance_when_stated(pool):
    store = CosineFixedPoolStore(*pool)
    documents = await fair(store, ranker="standard").ainvoke("who?")
    assert documents[0].metadata["relevance_function"] == "store: cosine_relevance_score_fn"
    assert [mode for mode, *_ in store.calls] == ["async"]


def test_batch_matches_single_calls(store):
    # A batch's seed seeds the batch: its inputs rank as a fresh retriever with that seed
    # ranks them one after the other (docs/SPEC.md, "Adapters" → Seeds).
    retriever = fair(store)
    batched = retriever.batch(["a", "b", "c"], seed=9)
    fresh = fair(store, seed=9)
    assert [titles(d) for d in batched] == [titles(fresh.invoke(q)) for q in "abc"]
    seeds = [d[0].metadata["query_seed"] for d in batched]
    assert [titles(d) for d in batched] == [
        titles(retriever.invoke(q, seed=s)) for q, s in zip("abc", seeds, strict=True)
    ]


def test_tracing_params_name_the_vector_store(store):
    params = fair(store)._get_ls_params()
    assert params["ls_retriever_name"] == "fair"
    assert params["ls_vector_store_provider"] == "FixedPoolStore"
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    params = fair(store)._get_ls_params()
    assert params["ls_embedding_provider"] == "DeterministicFakeEmbedding"


@pytest.mark.parametrize("first", [0.1, math.nan])
def test_store_relevance_outside_0_1_warns_as_langchain_does(pool, first):
    # The store's own relevance function, applied here as LangChain's
    # similarity_search_with_relevance_scores applies it: the same warning for a relevance
    # outside [0, 1], whatever comes before it in the pool (a NaN first included).
    documents, distances = pool
    distances = [first, *distances[1:-1], 1.5]  # cosine relevance 1 - 1.5 = -0.5 last
    store = CosineFixedPoolStore(documents, distances)
    with pytest.warns(UserWarning, match="Relevance scores must be between 0 and 1"):
        store.similarity_search_with_relevance_scores("who?", k=len(documents))
    retriever = fair(store, ranker="standard")
    with pytest.warns(UserWarning, match="Relevance scores must be between 0 and 1"):
        if math.isnan(first):  # then refused by the ranking, naming the candidate
            with pytest.raises(ValueError, match="position"):
                retriever.invoke("who?")
        else:
            assert len(retriever.invoke("who?")) == 5


def test_the_relevance_warning_names_the_problem_once_without_the_pool():
    # Issue 32, item 5: on main each call repeated LangChain's warning with the whole pool in
    # it (~25 KB per call on a 300-document pool).
    documents, _ = imbalanced_pool(n=300)
    distances = [0.5 + 0.01 * i for i in range(300)]  # cosine relevance down to -2.49
    retriever = fair(CosineFixedPoolStore(documents, distances), ranker="standard", pool_size=300)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert len(retriever.invoke("who?")) == 5
    [warning] = [w for w in caught if "between 0 and 1" in str(w.message)]
    message = str(warning.message)
    assert len(message) < 500 and "page_content" not in message and "Person" not in message
    assert "249 of the 300 candidates" in message and "from -2.49 to -0.01" in message
    assert "relevance_score_fn=" in message


@pytest.mark.parametrize("query", [None, {"query": "a"}, ["a"], 3])
def test_a_query_that_is_not_text_is_refused_naming_it(query):
    """LangChain passes ``invoke``'s input through untyped: a dict or a list failed inside the
    embedding model with ``AttributeError: 'dict' object has no attribute 'encode'``."""
    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()), group_key="gender", protected="female"
    )
    with pytest.raises(TypeError, match=r"FairRetriever: query must be a string.*got"):
        retriever.invoke(query)
    with pytest.raises(TypeError, match=r"FairRetriever: query must be a string"):
        asyncio.run(retriever.ainvoke(query))
    documents = retriever.invoke("q")
    reranker = FairReranker(group_key="gender", protected="female")
    with pytest.raises(TypeError, match=r"FairReranker: query must be a string"):
        reranker.compress_documents(documents, query)


@pytest.mark.parametrize("documents", [None, "text", [{"page_content": "x"}], {"a": 1}])
def test_documents_that_are_not_langchain_documents_are_refused_naming_them(documents):
    reranker = FairReranker(group_key="gender", protected="female")
    with pytest.raises(TypeError, match=r"FairReranker: documents"):
        reranker.compress_documents(documents, "q")
    with pytest.raises(TypeError, match=r"FairReranker: documents"):
        asyncio.run(reranker.acompress_documents(documents, "q"))


class RepeatingStore(FixedPoolStore):
    """A store whose full answers hold one document twice, as a reopened persistent Chroma
    index answered 3 of 20 queries for 50 (docs/SPEC.md "Pools of distinct documents"): the
    third document again in place of the last one asked for."""

    def _search(self, mode, query, k, kwargs):
        answer = super()._search(mode, query, k, kwargs)
        if len(answer) == k and k > 3:
            answer = [*answer[:-1], answer[2]]
        return answer


@pytest.mark.parametrize("call", ["sync", "async"])
def test_a_store_that_repeats_a_document_is_asked_again_for_a_full_pool(call):
    store = RepeatingStore(*imbalanced_pool())
    retriever = FairRetriever(
        vectorstore=store, group_key="gender", protected="female", pool_size=10, k=5, seed=0
    )
    if call == "sync":
        shown = retriever.invoke("q")
    else:
        shown = asyncio.run(retriever.ainvoke("q"))
    assert [k for _, _, k, _ in store.calls] == [10, 11]  # asked again for the one lacking
    assert {d.metadata["pool_size"] for d in shown} == {10}  # was 9: the repeat dropped
    plain = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()),
        group_key="gender",
        protected="female",
        pool_size=10,
        k=5,
        seed=0,
    )
    same = plain.invoke("q") if call == "sync" else asyncio.run(plain.ainvoke("q"))
    assert [d.id for d in shown] == [d.id for d in same]  # the pool a sound store gives


def test_a_short_answer_is_not_asked_again():
    """Fewer candidates than asked: the store holds no more, whatever it repeats."""
    documents, distances = imbalanced_pool(6)
    store = FixedPoolStore([*documents, documents[0]], [*distances, 0.99])
    retriever = FairRetriever(
        vectorstore=store, group_key="gender", protected="female", pool_size=10, k=5, seed=0
    )
    shown = retriever.invoke("q")
    assert [k for _, _, k, _ in store.calls] == [10]
    assert {d.metadata["pool_size"] for d in shown} == {6}


class _SlowStore(FixedPoolStore):
    """The pool, answered after a wait (a store a client's timeout gives up on)."""

    async def asimilarity_search_with_score(self, query, k=4, **kwargs):
        await asyncio.sleep(30)
        return await super().asimilarity_search_with_score(query, k=k, **kwargs)


async def test_a_cancelled_call_is_recorded_and_leaves_no_run_held(pool):
    """A user trial: ``FairRetriever.ainvoke`` cancelled by ``asyncio.wait_for`` wrote no
    record (LangChain's retriever tells its callbacks of an ``Exception`` only) and the handler
    held every cancelled run for good (1,000 timeouts: 1,000 runs held). It is recorded as
    LangChain records a cancelled chain, ``CancelledError: ``, and nothing stays held."""
    from fairrag_langchain import FairnessCallbackHandler

    handler = FairnessCallbackHandler(group_key="gender", protected="female")
    retriever = fair(_SlowStore(*pool), seed=0)
    for _ in range(3):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(retriever.ainvoke("who?", config={"callbacks": [handler]}), 0.05)
    assert [r["error"] for r in handler.records] == ["CancelledError: "] * 3
    assert not any(getattr(handler, held) for held in ("_parent", "_root_of", "_roots"))
