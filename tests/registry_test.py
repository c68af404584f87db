"""One registry that describes itself (issue 34): a ranker added as CONTRIBUTING.md says (a module
with its class and its declarations, registered) is accepted by the core, the three adapters, the
study and the sweep, with no other file edited; here a test-only ``round_robin`` is registered
for the test's duration."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from llama_index.core.schema import QueryBundle

from fairrag_core import (
    RANKERS,
    Ranker,
    available_rankers,
    default_study_rankers,
    make_ranker,
    register_ranker,
)
from fairrag_core.rankers import knob_defaults
from fairrag_core.ranking import CandidatePool
from fairrag_haystack import FairDocumentRanker
from fairrag_langchain import FairReranker
from fairrag_llamaindex import FairRerankPostprocessor, query_seed
from fairrag_study import options
from fairrag_study.cli import main
from fairrag_study.dataset import TREC_GENDER
from fairrag_study.many_rankings import study_rankers
from fairrag_study.study import StudyConfig
from fairrag_study.sweep import SweepConfig, default_grid
from fairrag_study.sweep_options import grid_flag
from tests.haystack.pools import documents_of_pool
from tests.langchain.doubles import documents_of_pool as langchain_documents
from tests.llamaindex.pools import make_pool

FIELDS = {"group_key": "gender", "protected": "female"}


class RoundRobinRanker(Ranker):
    """The target's groups take turns (in the target's order), each placing its best remaining
    candidate; a group with none left gives its turn to the next. Deterministic. Test-only."""

    name = "round_robin"
    deterministic = True
    knobs = ("step",)
    sweep_grid = {"step": (1.0, 2.0)}  # noqa: RUF012  (a test's class)

    def __init__(self, *, step: float = 1.0, **fairness: object) -> None:
        self.step = step
        super().__init__(**fairness)  # type: ignore[arg-type]

    def _rank(self, pool: CandidatePool, k: int, rng: np.random.Generator) -> np.ndarray:
        assert pool.codes is not None
        order = np.argsort(-pool.scores, kind="stable")
        queues = [list(order[pool.codes[order] == g]) for g in range(int(pool.codes.max()) + 1)]
        chosen: list[int] = []
        while len(chosen) < k:
            for queue in queues:
                if queue and len(chosen) < k:
                    chosen.append(queue.pop(0))
        return np.asarray(chosen, dtype=np.intp)


@pytest.fixture
def round_robin():
    register_ranker(RoundRobinRanker)
    yield "round_robin"
    RANKERS.pop("round_robin")


def test_the_core_builds_it_by_name_and_reads_its_declarations(round_robin):
    assert round_robin in available_rankers()
    ranker = make_ranker(round_robin, protected="female", step=2.0)
    ranking = ranker.rank([0.9, 0.8, 0.7, 0.6], ["male", "male", "female", "female"], k=3)
    assert ranking.tolist() == [2, 0, 3]  # female (protected) first in the target's order
    assert knob_defaults(round_robin) == {"step": 1.0}
    assert round_robin not in default_study_rankers()  # the study's default set does not grow


def test_the_three_adapters_accept_it(round_robin):
    pool = make_pool(20)
    with query_seed(1):
        nodes = FairRerankPostprocessor(
            ranker=round_robin, relevance="similarity", **FIELDS
        ).postprocess_nodes(pool, QueryBundle("q"))
    documents = FairReranker(ranker=round_robin, **FIELDS).compress_documents(
        langchain_documents(pool), "q"
    )
    shown = FairDocumentRanker(ranker=round_robin, **FIELDS).run(documents_of_pool(pool))
    assert [n.node.metadata["ranker"] for n in nodes] == [round_robin] * 5
    assert [d.id for d in documents] == [n.node.node_id for n in nodes]
    assert [d.id for d in shown["documents"]] == [n.node.node_id for n in nodes]


def help_of(command: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_the_study_runs_it_when_named_and_not_by_default(round_robin, capsys):
    assert options.rankers("standard,round_robin") == ("standard", round_robin)
    named, left_out = study_rankers((round_robin,), alpha=4.0, dataset=TREC_GENDER)
    assert named == (round_robin,) and left_out == {}
    default, _ = study_rankers(None, alpha=4.0, dataset=TREC_GENDER)
    assert round_robin not in default
    # the help lists it among the rankers one may name, not among the default set (a user
    # trial: the default set listed every registered ranker)
    default_set, named = help_of("study", capsys).split("; any of ", 1)
    assert round_robin not in default_set.rsplit("default: ", 1)[1]
    assert round_robin in named.split(" when named", 1)[0]


def test_the_sweep_takes_its_knobs_and_grid(round_robin, capsys):
    assert grid_flag("round_robin:step=1,3") == (round_robin, {"step": (1.0, 3.0)})
    with pytest.raises(argparse.ArgumentTypeError, match=r"its knobs: step"):
        grid_flag("round_robin:alpha=1")
    assert default_grid()[round_robin] == {"step": (1.0, 2.0)}
    config = SweepConfig(StudyConfig(llm="none"), rankers=(round_robin,))
    assert [s.label for s in config.settings()] == ["step=1", "step=2"]
    assert "round_robin step" in help_of("sweep", capsys)


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ({"knobs": ("speed",)}, r"knobs names \['speed'\], which are not among its keyword"),
        ({"binary_knobs": ("p",)}, r"binary_knobs names \['p'\]"),
        ({"sweep_grid": {"alpha": (1.0,)}}, r"sweep_grid names \['alpha'\]"),
        ({"name": "standard"}, "a ranker named 'standard' is registered already"),
        ({"name": ""}, "name must be a non-empty string"),
    ],
)
def test_a_wrong_declaration_is_refused_naming_it(declaration, message):
    bad = type("Bad", (RoundRobinRanker,), dict(declaration))
    with pytest.raises(ValueError, match=message):
        register_ranker(bad)
    assert "Bad" not in {cls.__name__ for cls in RANKERS.values()}
