"""The core adapter kit (docs/SPEC.md, "Adapters" and "Records"): the rules both framework
adapters build from, tested without any framework."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fairrag_core import FairnessAuditor, make_ranker, rerank
from fairrag_core.kit import (
    RankerState,
    ShownDocument,
    check_store_order,
    context_entry,
    describe_ranker,
    document_title,
    draw_query_seed,
    hidden_metadata_keys,
    is_verdict,
    placement_metadata,
    ranked_for,
    run_record,
    shown_provenance,
    target_pairs,
    to_relevance,
)
from fairrag_core.kit.component import FairComponent
from fairrag_core.kit.context import title_line

SPEC = Path(__file__).resolve().parents[2] / "docs" / "SPEC.md"


@dataclass
class Component:
    """The six fields every fair component has (what the adapters' pydantic models carry)."""

    ranker: Any = "stochastic"
    protected: Any = "female"
    target_share: float | None = None
    target: Any = None
    seed: int | None = 0
    ranker_params: dict[str, Any] = field(default_factory=dict)


# -- configuration ------------------------------------------------------------------------------


def test_state_is_rebuilt_when_a_field_changes_in_place_or_by_assignment():
    component = Component(ranker_params={"alpha": 2.0})
    state = RankerState.current(None, component)
    assert RankerState.current(state, component) is state
    component.ranker_params["alpha"] = 8.0  # in place
    changed = RankerState.current(state, component)
    assert changed is not state and changed.ranker.alpha == 8.0
    component.ranker, component.ranker_params = "standard", {}
    assert RankerState.current(changed, component).ranker.name == "standard"


def test_a_copy_gets_its_own_generator_from_the_start_of_the_seed():
    original = Component(seed=5)
    state = RankerState.current(None, original)
    first = [state.query_seed() for _ in range(3)]
    twin = copy.copy(original)
    twin_state = RankerState.current(state, twin)  # same fields, another object
    assert twin_state is not state
    assert [twin_state.query_seed() for _ in range(3)] == first
    assert state.query_seed() not in first  # the original goes on with its own sequence


def test_query_seeds_are_json_safe_ints_and_callers_seeds_are_checked():
    generator = np.random.default_rng(0)
    seeds = [draw_query_seed(None, generator) for _ in range(100)]
    assert all(isinstance(s, int) and 0 <= s < 2**53 for s in seeds)
    assert draw_query_seed(2**40, generator) == 2**40
    assert isinstance(draw_query_seed(np.random.default_rng(3), generator), int)
    for bad in (-1, True, "7", 2**64):
        with pytest.raises((TypeError, ValueError), match="seed"):
            draw_query_seed(bad, generator)


def test_same_query_seed_same_ranking():
    ranker = make_ranker("representative_stochastic", protected="f")
    scores = np.linspace(1, 0, 30)
    groups = ["m"] * 20 + ["f"] * 10
    a = rerank(ranker, scores, groups, 5, rng=np.random.default_rng(123))
    ranker.rank(scores, groups, 5)  # whatever the ranker drew in between
    b = rerank(ranker, scores, groups, 5, rng=np.random.default_rng(123))
    assert a.indices == b.indices


def test_a_ready_ranker_is_described_whole_and_refuses_ignored_fields():
    ranker = make_ranker("representative_stochastic", protected="f", target_share=0.3, seed=9)
    described = describe_ranker(ranker)
    assert described["name"] == "representative_stochastic" and described["seed"] == 9
    assert described["target"] == {"f": 0.3, "OTHERS": 0.7}
    assert {"alpha", "gain", "tolerance"} <= set(described["params"])
    with pytest.raises(ValueError, match="seed would be ignored"):
        RankerState.current(None, Component(ranker=ranker, protected=None, seed=1))


def test_unknown_ranker_params_name_the_accepted_ones():
    with pytest.raises(ValueError, match="takes no parameter 'alhpa'; accepted: alpha"):
        RankerState.current(None, Component(ranker_params={"alhpa": 1.0}))


# -- relevance ------------------------------------------------------------------------------


def test_conversions():
    assert to_relevance([0.2], "cosine_distance").tolist() == pytest.approx([0.8])
    assert to_relevance([np.exp(-0.2)], "chroma_cosine").tolist() == pytest.approx([0.8])
    assert to_relevance([3.0], "l2_distance").tolist() == [-3.0]
    assert to_relevance([np.exp(-3.0)], "chroma_l2").tolist() == pytest.approx([-3.0])
    with pytest.raises(ValueError, match="known conversions"):
        to_relevance([1.0], "cosine")
    for name in ("chroma_cosine", "chroma_l2"):
        with pytest.raises(ValueError, match="exp\\(-distance\\) > 0"):
            to_relevance([0.0], name)


def test_relevance_rising_along_the_store_order_is_refused_with_the_fix():
    similarities = np.array([0.9, 0.8, 0.8, 0.5])  # a store's best-first similarities
    read_as_distances = to_relevance(similarities, "cosine_distance")
    with pytest.raises(ValueError, match="relevance='similarity'"):
        check_store_order(read_as_distances, "cosine_distance", "SomeStore")
    check_store_order(to_relevance(similarities, "similarity"), "similarity", "SomeStore")
    check_store_order(np.array([0.5, 0.9, 0.7]), "similarity", "merged")  # unsorted: accepted
    check_store_order(np.array([0.5, 0.5]), "similarity", "ties")
    check_store_order(np.array([0.5]), "similarity", "one")


# -- title and context --------------------------------------------------------------------------


def test_title_rule_first_line_only():
    assert document_title({"title": " Ada "}, "Title: Other\n") == "Ada"
    assert document_title({}, "\n\n  Title: Ada Lovelace  \nText") == "Ada Lovelace"
    assert document_title({"title": ""}, "Ada was\nTitle: Marie Curie") is None  # injected
    assert document_title(None, "Title:   \nx") is None


def test_title_search_reads_one_line_of_a_megabyte_of_blank_lines():
    text = " \n" * 500_000 + "Title: Late\nbody"
    assert title_line(text) == "Late"  # the first non-blank line, found in one pass
    assert title_line("\n" * 1_000_000) is None


def test_context_entry_numbers_and_adds_the_title_line_once():
    assert context_entry(1, "Ada", "Title: Ada\nAda was.") == "[1]\nTitle: Ada\nAda was."
    assert context_entry(2, "Ada", "Ada was.") == "[2]\nTitle: Ada\nAda was."
    assert context_entry(3, None, "  text  ") == "[3]\ntext"


def test_hidden_keys_cover_group_and_placement_unless_shown():
    hidden = hidden_metadata_keys("gender", ["title", "gender", "topic"], shown=["topic"])
    assert "gender" in hidden and "title" in hidden and "topic" not in hidden
    assert "exposure_weight" in hidden and "query_seed" in hidden


# -- provenance and records ----------------------------------------------------------------------


def placed(ranker="fair", seed=1, ranks=(1, 2, 3), k=3) -> list[dict[str, Any]]:
    return [{"fair_rank": r, "ranker": ranker, "query_seed": seed, "fair_k": k} for r in ranks]


def test_provenance_of_the_shown_list():
    assert shown_provenance(placed())["ranker"] == "fair"
    assert shown_provenance(placed(ranks=(3, 1, 2)))["reordered_after_ranking"] is True
    assert shown_provenance(placed(ranks=(1, 2), k=3))["dropped_after_ranking"] == 1
    mixed = shown_provenance([*placed(ranks=(1,)), {"title": "plain"}])
    assert mixed["ranker"] is None and mixed["mixed_after_ranking"] is True
    assert shown_provenance([{"title": "plain"}])["ranker"] is None


def test_provenance_of_an_empty_or_replaced_list_after_a_known_fair_ranking():
    # The adapter saw the run's fair list: an empty shown list had all of it dropped, a list
    # of other documents replaced it; without that list both describe themselves.
    emptied = shown_provenance([], ranked=placed(ranker="fair", k=3))
    assert emptied["ranker"] == "fair" and emptied["k"] == 3 and emptied["query_seed"] == 1
    assert emptied["dropped_after_ranking"] == 3 and emptied["reordered_after_ranking"] is False
    replaced = shown_provenance([{"title": "plain"}], ranked=placed())
    assert replaced["ranker"] is None and replaced["mixed_after_ranking"] is True
    assert shown_provenance([], ranked=[{"title": "plain"}]) == shown_provenance([])
    assert shown_provenance([])["ranker"] is None
    # A shown list with placed documents is described by them alone.
    assert shown_provenance(placed(ranks=(1, 2)), ranked=placed())["dropped_after_ranking"] == 1
    with pytest.warns(UserWarning, match="had every document removed"):
        amortized = shown_provenance(
            [], ranked=[{**m, "ledger_state": {}} for m in placed(ranker="amortized")]
        )
    assert amortized["ranker"] == "amortized" and amortized["ledger_state"] == {}


def test_provenance_of_a_fair_ranking_that_placed_nothing():
    # An empty pool: no document carries the ranking's keys; the adapter hands them over.
    ranking = {"ranker": "fair", "query_seed": 9, "pool_size": 0, "fair_k": 0}
    empty = shown_provenance([], ranking=ranking)
    assert (empty["ranker"], empty["query_seed"], empty["pool_size"], empty["k"]) == (
        "fair",
        9,
        0,
        0,
    )
    assert empty["dropped_after_ranking"] == 0 and empty["reordered_after_ranking"] is False
    other = shown_provenance([{"title": "plain"}], ranking=ranking)
    assert other["ranker"] is None and other["mixed_after_ranking"] is True
    # the documents, or a fair list the adapter saw, say more than the ranking's keys
    assert shown_provenance(placed(), ranking=ranking)["query_seed"] == 1
    assert shown_provenance([], ranked=placed(), ranking=ranking)["dropped_after_ranking"] == 3
    assert shown_provenance([], ranking={"ranker": None}) == shown_provenance([])


def test_ranking_metadata_is_what_every_placed_document_shares():
    component = FairComponent(ranker="amortized", group_key="g", protected="f", seed=0)
    placed_pool = component.place([{"g": "f"}, {"g": "m"}, {"g": "m"}], [0.9, 0.8, 0.7], 2)
    shared = placed_pool.ranking
    assert shared["fair_k"] == 2 and shared["pool_size"] == 3 and "ledger_state" in shared
    for metadata in placed_pool.metadatas:
        assert {key: metadata[key] for key in shared} == shared
    empty = component.place([], [], 2).ranking
    assert empty["ranker"] == "amortized" and empty["fair_k"] == 0 and empty["pool_size"] == 0


def test_a_changed_amortized_list_warns_that_its_ledger_counted_another_one():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unchanged lists, and other rankers' lists: no warning
        shown_provenance(placed(ranker="amortized"))
        shown_provenance(placed(ranks=(3, 1, 2)))
        shown_provenance([*placed(ranks=(1,)), {"title": "plain"}])
    for changed in (
        placed(ranker="amortized", ranks=(3, 1, 2)),
        placed(ranker="amortized", ranks=(1, 2), k=3),
        [*placed(ranker="amortized", ranks=(1,)), {"title": "plain"}],
    ):
        with pytest.warns(UserWarning, match="its ledger counted the ranking as served"):
            shown_provenance(changed)


def test_placement_metadata_keys():
    reranking = rerank(make_ranker("standard"), [0.9, 0.1], ["a", "b"], 2)
    metadata = placement_metadata(
        reranking.placements[0], "standard", 4, 0.1, pool_size=2, fair_k=2
    )
    assert metadata["relevance_score"] == 0.9 and metadata["retrieval_score"] == 0.1
    assert metadata["query_seed"] == 4 and metadata["fair_k"] == 2


def test_record_has_every_field_the_spec_lists():
    auditor = FairnessAuditor.create(protected="female", target_share=0.3)
    shown = [
        ShownDocument("1", "Ada Lovelace", "female", "Title: Ada Lovelace\nAda was a pioneer."),
        ShownDocument("2", "Alan Turing", "male", "Alan was a pioneer."),
    ]
    record = run_record(
        auditor,
        source="test",
        shown=shown,
        query="q",
        answer="- Ada Lovelace (DocTitle: Ada Lovelace)",
        model="FakeModel",
        tags=["t"],
        metadata={"tenant": object()},
    )
    table = SPEC.read_text().split("## Records", 1)[1]
    fields = {
        f for cell in re.findall(r"^\| (.+?) \|", table, re.M) for f in re.findall(r"`(\w+)`", cell)
    }
    missing = fields - set(record) - {"error", "ledger_state"}  # error: failed runs only
    assert not missing, f"record lacks the spec's fields {sorted(missing)}"
    assert record["target"] == {"female": 0.3, "OTHERS": 0.7}
    assert record["exposure_by_group"]["female"] == pytest.approx(record["exposure_share"])
    assert isinstance(record["metadata"]["tenant"], str)
    amortized = shown_provenance(  # ledger_state: the amortized ranker's records only
        [{"fair_rank": 1, "ranker": "amortized", "query_seed": 1, "fair_k": 1, "ledger_state": {}}]
    )
    assert "ledger_state" in amortized and "ledger_state" not in shown_provenance(placed())
    failed = run_record(auditor, source="test", shown=None, query="q", error="Boom: x")
    assert failed["error"] == "Boom: x" and "exposure_share" not in failed


def test_a_ready_rankers_seed_seeds_the_query_seeds():
    ranker = make_ranker("stochastic", seed=21)
    a = RankerState.current(None, Component(ranker=ranker, protected=None, seed=None))
    b = RankerState.current(None, Component(ranker="stochastic", protected=None, seed=21))
    assert [a.query_seed() for _ in range(3)] == [b.query_seed() for _ in range(3)]


def test_deep_and_shallow_copies_of_a_component_get_their_own_state():
    original = Component(seed=5)
    state = RankerState.current(None, original)
    first = state.query_seed()
    for duplicate in (copy.deepcopy(original), copy.copy(original)):
        duplicate_state = RankerState.current(copy.deepcopy(state), duplicate)
        assert duplicate_state is not state
        assert duplicate_state.query_seed() == first  # a fresh generator, not the original's
    assert state.query_seed() != first  # the original's own sequence went on


def test_a_list_is_audited_against_the_target_it_was_ranked_for():
    import json

    from fairrag_core import FairnessAuditor, make_target

    numbered = make_target(target={1: 0.3, 2: 0.7})  # int labels survive the JSON round trip
    pairs = json.loads(json.dumps(target_pairs(numbered)))
    assert pairs == [[1, 0.3], [2, 0.7], ["OTHERS", 0.0]]
    parity = FairnessAuditor.create(target={1: 0.5, 2: 0.5})
    shown = [{**m, "fair_target": pairs} for m in placed()]
    audited = ranked_for(parity, shown)
    assert audited.target.as_dict() == numbered.as_dict()
    assert audited.exposure is parity.exposure
    assert (
        ranked_for(parity, [{**m, "fair_target": target_pairs(parity.target)} for m in placed()])
        is parity
    )
    assert ranked_for(parity, placed()) is parity  # no fair_target: the auditor's own
    assert ranked_for(parity, [{**m, "fair_target": [[1, 2.0]]} for m in placed()]) is parity
    assert ranked_for(parity, [{"title": "plain"}]) is parity
    binary = FairnessAuditor.create(protected="female")
    ranked = make_target(protected="female", target_share=0.8)
    audited = ranked_for(binary, [{**m, "fair_target": target_pairs(ranked)} for m in placed()])
    assert audited.target.protected == "female"
    assert audited.target.protected_share == pytest.approx(0.8)


def test_copies_of_a_fair_component_draw_the_seeds_spawned_streams():
    import pickle

    from fairrag_core.kit.component import FairComponent

    def first_seeds(component: FairComponent) -> list[int]:
        return [component.ranker_state.query_seed() for _ in range(3)]

    original = FairComponent(ranker="stochastic", group_key="gender", protected="female", seed=3)
    copies = [copy.copy(original), copy.deepcopy(original), pickle.loads(pickle.dumps(original))]
    grandchild = pickle.loads(pickle.dumps(copies[0]))
    drawn = [first_seeds(each) for each in [original, *copies, grandchild]]
    # copy i: SeedSequence(3).spawn(i + 1)[i]; a copy of copy 0: its own spawn, key (0, 0)
    root = np.random.SeedSequence(3)
    children = root.spawn(3)
    expected = [np.random.default_rng(3), *map(np.random.default_rng, children)]
    expected.append(np.random.default_rng(children[0].spawn(1)[0]))
    assert drawn == [[int(g.integers(2**53)) for _ in range(3)] for g in expected]
    assert len({tuple(d) for d in drawn}) == 5


def _langchain_inner_product(s: float) -> float:
    """LangChain's ``_max_inner_product_relevance_score_fn``, written out."""
    return 1.0 - s if s > 0 else -s


def test_a_conversion_not_monotone_over_the_pool_is_refused():
    inner_products = np.linspace(0.6, -0.4, 11)  # a store's best-first pool spanning 0
    relevance = np.array([_langchain_inner_product(s) for s in inner_products])
    with pytest.raises(ValueError, match=r"not monotone over this pool from FAISS.*rises.*falls"):
        check_store_order(relevance, None, "FAISS", described="store: inner product")
    with pytest.raises(ValueError, match=r"store values 0\.1 → .*relevance_score_fn"):
        check_store_order(
            relevance, None, "FAISS", own_function="relevance_score_fn", raw=inner_products
        )
    # the same conversion over a pool on one side of 0 is monotone (the direction check's case)
    positive = inner_products[inner_products > 0.05]
    with pytest.raises(ValueError, match="rises along FAISS's best-first order"):
        check_store_order(np.array([_langchain_inner_product(s) for s in positive]), None, "FAISS")


def test_monotone_conversions_of_merged_pools_and_ties_are_accepted():
    merged = np.array([0.9, 0.4, 0.8, 0.3, 0.7])  # two stores' lists merged: not sorted
    for name in ("similarity", "negated", "cosine_distance", "l2_distance"):
        check_store_order(to_relevance(merged, name), name, "fusion")  # named: monotone
        check_store_order(to_relevance(merged, name), None, "fusion", raw=merged)
    check_store_order(np.array([0.5, 0.5, 0.4, 0.4, 0.1]), "similarity", "a store")


@pytest.mark.parametrize(
    "text",
    [
        "yes",
        "No.",
        "**Yes**",
        ' "no" ',
        "Score: yes",
        "binary_score: NO",
        "ambiguous",
        "Score: 7/10",
        "grade: 0.8",
        '{"score": "no"}',
        '{"binary_score": true}',
        '```json\n{"score": "yes"}\n```',
        '{"score": "yes", "explanation": "relevant"}',
    ],
)
def test_a_grade_in_text_is_a_verdict(text):
    assert is_verdict(text)


@pytest.mark.parametrize(
    "text",
    [
        "- Ada Lovelace [1]",
        "Yes, Ada Lovelace [1] was the first programmer.",
        "no idea",
        "",
        "Nobody in the context.",
        '{"answer": "Ada Lovelace"}',
        '{"a": 1, "b": 2, "c": 3}',
        "1. Ada Lovelace",
        "yes " * 60,
        None,
        '{"score": "yes"',
        # answers a review found taken for grades by the first rule: a bare number, JSON
        # under an answer key
        "3",
        "0.8",
        '{"answer": "no", "confidence": 0.9}',
        '{"score": "yes", "answer": "Ada Lovelace [1]"}',
    ],
)
def test_an_answer_is_not_a_verdict(text):
    assert not is_verdict(text)
