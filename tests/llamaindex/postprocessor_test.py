"""FairRerankPostprocessor on synthetic pools: a thin translation of the core, LlamaIndex-style."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers.base import BaseEventHandler
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from pydantic import PrivateAttr

from fairrag_core import available_rankers, group_labels, make_ranker, rerank, scores_from_order
from fairrag_core.exposure import position_weights
from fairrag_core.kit import PLACEMENT_KEYS
from fairrag_llamaindex import FairRerankPostprocessor, query_seed
from tests.llamaindex.pools import make_pool

QUERY = QueryBundle("Who are influential people in computer science?")


def fair(**fields: Any) -> FairRerankPostprocessor:
    fields.setdefault("group_key", "gender")
    fields.setdefault("protected", "female")
    fields.setdefault("relevance", "similarity")  # direct calls: no engine tells the store
    return FairRerankPostprocessor(**fields)


class EventRecorder(BaseEventHandler):
    """Collects every ReRank event the dispatcher hands out."""

    _events: list = PrivateAttr(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "EventRecorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, (ReRankStartEvent, ReRankEndEvent)):
            self._events.append(event)

    @property
    def events(self) -> list:
        return list(self._events)


@pytest.fixture
def rerank_events():
    root = get_dispatcher()
    recorder = EventRecorder()
    root.add_event_handler(recorder)
    try:
        yield recorder
    finally:
        root.event_handlers = [h for h in root.event_handlers if h is not recorder]


# -- the translation ------------------------------------------------------------------------


@pytest.mark.parametrize("ranker", available_rankers())
def test_ranking_is_the_cores_for_the_same_query_seed(ranker):
    pool = make_pool(50)
    with query_seed(11):
        out = fair(ranker=ranker, seed=3).postprocess_nodes(pool, QUERY)

    expected = rerank(
        make_ranker(ranker, protected="female"),
        [n.score for n in pool],
        group_labels([n.node.metadata for n in pool], "gender"),
        5,
        rng=np.random.default_rng(11),
    )
    assert [n.node.node_id for n in out] == [pool[i].node.node_id for i in expected.indices]
    for node, placement in zip(out, expected.placements, strict=True):
        meta = node.node.metadata
        assert meta["fair_rank"] == placement.fair_rank
        assert meta["pool_rank"] == placement.pool_rank
        assert meta["exposure_weight"] == placement.exposure_weight
        assert meta["relevance_score"] == placement.score
        assert meta["ranker"] == ranker


def test_new_nodes_carry_the_placement_and_inputs_are_untouched():
    pool = make_pool(50)
    before = [n.model_dump() for n in pool]
    out = fair(seed=1).postprocess_nodes(pool, QUERY)

    assert [n.model_dump() for n in pool] == before
    by_id = {n.node.node_id: n for n in pool}
    assert len(out) == 5
    weights = position_weights(5)
    for rank, node in enumerate(out, start=1):
        original = by_id[node.node.node_id]
        assert node is not original and node.node is not original.node
        assert node.node.metadata is not original.node.metadata
        assert node.node.get_content(MetadataMode.NONE) == original.node.get_content(
            MetadataMode.NONE
        )
        meta = node.node.metadata
        assert meta["relevance_score"] == meta["retrieval_score"] == original.score
        assert meta["fair_rank"] == rank
        assert meta["exposure_weight"] == pytest.approx(weights[rank - 1])
        assert meta["ranker"] == "representative_stochastic"
        # the score is the relevance ranked on, as LlamaIndex's rerankers do
        assert node.score == meta["relevance_score"]
        assert {k: meta[k] for k in original.node.metadata} == original.node.metadata


def test_fair_metadata_stays_out_of_llm_and_embedding_text():
    out = fair(seed=1).postprocess_nodes(make_pool(20), QUERY)
    for node in out:
        for mode in (MetadataMode.LLM, MetadataMode.EMBED):
            text = node.node.get_content(mode)
            assert not any(f"{key}:" in text for key in PLACEMENT_KEYS), text


def test_protected_exposure_moves_toward_target_on_an_imbalanced_pool():
    pool = make_pool(50, female_every=5)  # 20% female, every one below four men
    postprocessor = fair(seed=0)
    weights = position_weights(5)
    shares = []
    for _ in range(200):
        out = postprocessor.postprocess_nodes(pool, QUERY)
        female = [n.node.metadata["gender"] == "female" for n in out]
        shares.append(float(weights[female].sum() / weights.sum()))
    standard = fair(ranker="standard").postprocess_nodes(pool, QUERY)
    assert [n.node.metadata["gender"] for n in standard].count("female") == 1
    assert np.mean(shares) == pytest.approx(0.5, abs=0.05)


def test_same_seed_replays_the_same_sequence():
    pool = make_pool(50)
    first, second = fair(seed=5), fair(seed=5)
    for _ in range(3):
        a = [n.node.node_id for n in first.postprocess_nodes(pool, query_str=QUERY.query_str)]
        b = [n.node.node_id for n in second.postprocess_nodes(pool, QUERY)]
        assert a == b


async def test_apostprocess_nodes_matches_postprocess_nodes():
    pool = make_pool(50)
    sync, asynchronous = fair(seed=9), fair(seed=9)
    for _ in range(3):
        expected = sync.postprocess_nodes(pool, QUERY)
        got = await asynchronous.apostprocess_nodes(pool, QUERY)
        assert [n.node.node_id for n in got] == [n.node.node_id for n in expected]
        assert [n.node.metadata for n in got] == [n.node.metadata for n in expected]


def test_ranker_params_reach_make_ranker_and_a_ready_ranker_is_used_as_is():
    assert fair(ranker="stochastic", ranker_params={"alpha": 8.0}).core_ranker.alpha == 8.0
    params = fair(ranker_params={"alpha": 1.0, "gain": 3.0, "tolerance": 0.1}).core_ranker
    assert (params.alpha, params.gain, params.tolerance) == (1.0, 3.0, 0.1)

    ready = make_ranker("forced_exposure", protected="female")
    postprocessor = FairRerankPostprocessor(
        ranker=ready, group_key="gender", relevance="similarity"
    )
    assert postprocessor.core_ranker is ready
    out = postprocessor.postprocess_nodes(make_pool(50), QUERY)
    assert [n.node.metadata["gender"] for n in out].count("female") == 2  # floor(5 x 0.5)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_top_n_and_a_pool_smaller_than_top_n(k):
    assert len(fair(top_n=k, seed=0).postprocess_nodes(make_pool(50), QUERY)) == k
    small = make_pool(3)
    with pytest.warns(UserWarning, match="nothing to re-rank"):
        out = fair(top_n=5, seed=0).postprocess_nodes(small, QUERY)
    assert sorted(n.node.node_id for n in out) == sorted(n.node.node_id for n in small)


# -- events ---------------------------------------------------------------------------------


def test_rerank_start_and_end_events_go_through_the_dispatcher(rerank_events):
    pool = make_pool(30)
    postprocessor = fair(seed=2, top_n=4)
    out = postprocessor.postprocess_nodes(pool, QUERY)

    start, end = rerank_events.events
    assert isinstance(start, ReRankStartEvent) and isinstance(end, ReRankEndEvent)
    assert start.query.query_str == QUERY.query_str
    assert start.top_n == 4
    assert start.model_name == "fairrag:representative_stochastic"
    assert [n.node.node_id for n in start.nodes] == [n.node.node_id for n in pool]
    assert [n.node.node_id for n in end.nodes] == [n.node.node_id for n in out]
    # both inside the postprocessor's own span
    assert start.span_id == end.span_id
    assert start.span_id.startswith("FairRerankPostprocessor._postprocess_nodes-")


async def test_async_events_have_their_own_span(rerank_events):
    await fair(seed=2).apostprocess_nodes(make_pool(10), QUERY)
    start, end = rerank_events.events
    assert start.span_id == end.span_id
    assert start.span_id.startswith("FairRerankPostprocessor._apostprocess_nodes-")


# -- edge cases -----------------------------------------------------------------------------


def test_missing_query_bundle_is_a_value_error(rerank_events):
    with pytest.raises(ValueError, match="needs the query"):
        fair().postprocess_nodes(make_pool(10))
    assert rerank_events.events == []


async def test_missing_query_bundle_is_a_value_error_async():
    with pytest.raises(ValueError, match="needs the query"):
        await fair().apostprocess_nodes(make_pool(10))


def test_a_node_not_wrapped_with_its_score_is_a_type_error_naming_it(rerank_events):
    """A user trial: a ``TextNode`` in the pool raised ``AttributeError: 'TextNode' object
    has no attribute 'node'``."""
    pool = make_pool(3)
    with pytest.raises(
        TypeError, match=r"ranks NodeWithScore objects.*position 1 holds a TextNode"
    ):
        fair().postprocess_nodes([pool[0], pool[1].node, pool[2]], QUERY)
    assert rerank_events.events == []


def test_empty_pool_returns_an_empty_list(rerank_events):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty result is no reason to warn
        assert fair().postprocess_nodes([], QUERY) == []
    start, end = rerank_events.events
    assert start.nodes == [] and end.nodes == []


def test_group_key_on_no_node_is_an_error_naming_it(rerank_events):
    with pytest.raises(KeyError, match="'sex'") as info:
        fair(group_key="sex").postprocess_nodes(make_pool(10), QUERY)
    assert "gender" in str(info.value)  # the fields that do exist are listed
    assert rerank_events.events == []  # nothing started


def test_nodes_missing_the_group_key_are_of_unknown_group():
    pool = make_pool(20)
    for n in pool[:10]:
        n.node.metadata.pop("gender")
    out = fair(seed=0).postprocess_nodes(pool, QUERY)
    assert len(out) == 5
    assert all(n.node.metadata.get("gender") in (None, "female", "male") for n in out)


def test_pool_without_scores_is_ranked_by_incoming_order():
    pool = make_pool(20, scored=False)
    out = fair(ranker="standard").postprocess_nodes(pool, QUERY)
    assert [n.node.node_id for n in out] == [n.node.node_id for n in pool[:5]]
    assert [n.node.metadata["pool_rank"] for n in out] == [1, 2, 3, 4, 5]
    assert all(n.node.metadata["relevance_score"] is None for n in out)

    # the fair ranker sees the core's order-derived scores, exactly
    expected = rerank(
        make_ranker("representative_stochastic", protected="female"),
        scores_from_order(20),
        [n.node.metadata["gender"] for n in pool],
        5,
        rng=np.random.default_rng(4),
    )
    with query_seed(4):
        got = FairRerankPostprocessor(group_key="gender", protected="female").postprocess_nodes(
            pool, QUERY
        )  # an unscored pool needs no relevance conversion, not even under 'auto'
    assert [n.node.node_id for n in got] == [pool[i].node.node_id for i in expected.indices]


def test_pool_with_some_scores_missing_is_an_error_naming_the_positions():
    pool = make_pool(10)
    pool[3] = NodeWithScore(node=pool[3].node, score=None)
    pool[7] = NodeWithScore(node=pool[7].node, score=None)
    with pytest.raises(ValueError, match=r"positions \[3, 7\]"):
        fair().postprocess_nodes(pool, QUERY)


def test_non_finite_scores_are_rejected_by_the_core():
    pool = make_pool(10)
    pool[2] = NodeWithScore(node=pool[2].node, score=math.nan)
    with pytest.raises(ValueError, match="finite"):
        fair().postprocess_nodes(pool, QUERY)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ranker": "fastest"}, "known rankers"),
        ({"protected": None}, "no fairness target"),
        ({"target_share": 1.5}, "target share"),
        ({"ranker_params": {"alpha": 0}}, "alpha"),
        ({"ranker_params": {"seed": 1}, "seed": 2}, "ranker params repeat"),
    ],
)
def test_bad_configuration_fails_at_construction(fields, message):
    with pytest.raises(ValueError, match=message):
        fair(**fields)


def test_parameters_on_a_ready_ranker_are_refused():
    with pytest.raises(ValueError, match="would be ignored"):
        FairRerankPostprocessor(
            ranker=make_ranker("standard"), group_key="gender", protected="female"
        )


def test_standard_ranker_needs_no_target():
    pool = make_pool(20)
    out = FairRerankPostprocessor(
        ranker="standard", group_key="gender", relevance="similarity"
    ).postprocess_nodes(pool, QUERY)
    assert [n.node.node_id for n in out] == [n.node.node_id for n in pool[:5]]


def test_a_full_target_with_several_groups():
    pool = [
        NodeWithScore(node=TextNode(id_=f"n{i}", text="x", metadata={"g": "abc"[i % 3]}), score=s)
        for i, s in enumerate(np.linspace(1.0, 0.1, 30))
    ]
    postprocessor = FairRerankPostprocessor(
        ranker="forced_exposure",
        group_key="g",
        target={"a": 0.4, "b": 0.4, "c": 0.2},
        top_n=5,
        relevance="similarity",
    )
    groups = [n.node.metadata["g"] for n in postprocessor.postprocess_nodes(pool, QUERY)]
    assert groups.count("a") >= 2 and groups.count("b") >= 2


def test_chroma_cosine_relevance_undoes_exp_minus_distance():
    distances = np.linspace(0.2, 0.9, 12)
    pool = make_pool(12)
    pool = [
        NodeWithScore(node=n.node, score=float(math.exp(-d)))
        for n, d in zip(pool, distances, strict=True)
    ]
    groups = [n.node.metadata["gender"] for n in pool]
    for seed in range(3):
        with query_seed(seed):
            got = fair(relevance="chroma_cosine").postprocess_nodes(pool, QUERY)
        expected = rerank(
            make_ranker("representative_stochastic", protected="female"),
            1.0 - distances,
            groups,
            5,
            rng=np.random.default_rng(seed),
        )
        assert [n.node.node_id for n in got] == [pool[i].node.node_id for i in expected.indices]
    # relevance_score is what was ranked on (1 - d); retrieval_score keeps the node's own score
    best = expected.indices[0]
    assert got[0].node.metadata["relevance_score"] == pytest.approx(1.0 - distances[best])
    assert got[0].node.metadata["retrieval_score"] == pytest.approx(pool[best].score)
    with pytest.raises(ValueError, match="exp\\(-distance\\) > 0"):
        fair(relevance="chroma_cosine").postprocess_nodes(
            [NodeWithScore(node=pool[0].node, score=0.0)], QUERY
        )


def test_the_default_ledger_survives_field_changes_and_copies_and_is_shared_by_engines():
    import copy

    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever

    from fairrag_core.ledger import MemoryLedger

    post = fair(ranker="amortized", seed=0)
    ledger = post.ledger  # the ranker's in-memory ledger is the component's
    assert isinstance(ledger, MemoryLedger) and post.core_ranker.ledger is ledger
    assert post.model_dump()["ledger"] == "memory"

    def served(nodes) -> float:
        return sum(n.node.metadata["exposure_weight"] for n in nodes)

    total = sum(served(post.postprocess_nodes(make_pool(30, seed=i), QUERY)) for i in range(4))
    post.seed = 5  # a field change rebuilds the ranker on the same stream
    post.ranker_params = {"gain": 40.0}
    total += served(post.postprocess_nodes(make_pool(30, seed=9), QUERY))
    twin = post.model_copy(update={"top_n": 3})
    total += served(twin.postprocess_nodes(make_pool(30, seed=10), QUERY))
    total += served(copy.deepcopy(post).postprocess_nodes(make_pool(30, seed=11), QUERY))

    class PoolRetriever(BaseRetriever):
        def _retrieve(self, query_bundle):
            return make_pool(30, seed=12)

    engines = [
        RetrieverQueryEngine.from_args(PoolRetriever(), node_postprocessors=[post], llm=MockLLM())
        for _ in range(2)
    ]
    for engine in engines:  # one postprocessor in two engines: one stream
        response = engine.query("q")
        total += served(response.source_nodes)
    assert twin.core_ranker.ledger is ledger and post.core_ranker.ledger is ledger
    state = ledger.state()
    assert state.rankings == 4 + 1 + 1 + 1 + 2
    assert sum(state.totals.values()) == pytest.approx(total, rel=1e-12)
    # Another ranker ignores the ledger it made (it takes none); back to amortized, same stream.
    post.ranker_params = {}  # gain is amortized's: the others refuse it
    assert post.model_copy(update={"ranker": "standard"}).core_ranker.name == "standard"
    post.ranker = "representative_stochastic"
    post.postprocess_nodes(make_pool(30, seed=13), QUERY)
    post.ranker = "amortized"
    assert post.core_ranker.ledger is ledger and ledger.state().rankings == 9


@pytest.mark.parametrize(
    "field", [{"target_share": True}, {"seed": True}, {"top_n": True}, {"seed": np.bool_(False)}]
)
def test_bools_are_not_numbers(field):
    from pydantic import ValidationError

    from fairrag_llamaindex import FairnessEventHandler

    name = next(iter(field))
    with pytest.raises(ValidationError, match=f"{name} must be (a number, not the bool|an int)"):
        fair(**field)
    with pytest.raises(ValidationError, match="shares must be numbers"):
        fair(protected=None, target={"female": True, "male": 0.0})
    post = fair()
    with pytest.raises(ValidationError, match=f"{name} must be (a number|an int)"):
        setattr(post, name, next(iter(field.values())))  # validate_assignment: assignment too
    if name == "target_share":
        with pytest.raises(ValidationError, match="target_share must be a number"):
            FairnessEventHandler(group_key="gender", protected="female", target_share=True)
        with pytest.raises(ValidationError, match="shares must be numbers"):
            FairnessEventHandler(group_key="gender", target={"female": 1, "male": False})


def test_the_own_ledger_survives_to_dict_pickle_and_ranker_switches():
    import pickle

    post = fair(ranker="amortized", seed=0)
    post.postprocess_nodes(make_pool(30), QUERY)
    post.ranker = "representative_stochastic"
    restored = FairRerankPostprocessor.from_dict(post.to_dict())
    assert restored.to_dict()["ledger"] == "memory"
    restored.postprocess_nodes(make_pool(30), QUERY)  # a ranker without a ledger: fine
    restored.ranker = "amortized"
    restored.postprocess_nodes(make_pool(30), QUERY)
    own = restored.ledger
    restored.seed = 9  # a field change keeps the ledger the restored component adopted
    restored.postprocess_nodes(make_pool(30), QUERY)
    assert restored.core_ranker.ledger is own and own.state().rankings == 2
    unpickled = pickle.loads(pickle.dumps(restored))
    assert unpickled.ledger.state().rankings == 2  # the totals travel with it
    unpickled.ranker = "standard"
    assert len(unpickled.postprocess_nodes(make_pool(30), QUERY)) == 5


@pytest.mark.parametrize("top_n", [0, True, 2.5])
def test_a_bad_top_n_given_through_model_copy_is_refused_naming_it(top_n):
    # pydantic's model_copy(update=...) skips validators (LlamaIndex's own idiom for a
    # variant); the component contract validates the update like an assignment
    with pytest.raises(ValueError, match=rf"top_n must be an int >= 1, got {top_n!r}"):
        fair(relevance="similarity").model_copy(update={"top_n": top_n})


@pytest.mark.parametrize("seed", [-1, "7", 1.5, 2**64, True])
def test_query_seed_refuses_a_bad_seed_when_the_block_is_entered(seed):
    """It used to enter, and fail only at the block's first query, inside the engine."""
    error = ValueError if isinstance(seed, int) and not isinstance(seed, bool) else TypeError
    with pytest.raises(error, match=r"query_seed\(seed\) must be an int in \[0, 2\*\*64\)"):
        with query_seed(seed):
            pytest.fail("the block was entered")
