"""The trial plan: a smaller --trials is a prefix of a larger one, so a pilot's answers are reused
(docs/SPEC.md, "The study" → Trials)."""

from __future__ import annotations

import pytest

from fairrag_study.data import load_documents, study_topics
from fairrag_study.dataset import TREC_GENDER
from fairrag_study.plan import plan_trials
from tests.chroma_pool import data_path_or_skip

TOPICS = [f"topic {i:02d}" for i in range(48)]


def _pairs(trials):
    return [(t.index, t.scenario, t.topic, t.question, t.seed) for t in trials]


@pytest.mark.parametrize("small", [1, 3, 10, 20, 40, 79])
def test_a_smaller_plan_is_a_prefix_of_the_80_trial_plan(small):
    full = plan_trials(TOPICS, 80, 2026)
    assert _pairs(plan_trials(TOPICS, small, 2026)) == _pairs(full[:small])


def test_plans_beyond_80_extend_the_80_trial_plan_and_use_every_topic_once():
    full = plan_trials(TOPICS, 80, 2026)
    every = plan_trials(TOPICS, 48 * 4, 2026)
    assert _pairs(every[:80]) == _pairs(full)
    assert sorted({t.topic for t in every}) == TOPICS
    assert len({(t.topic, t.scenario) for t in every}) == 48 * 4
    assert _pairs(plan_trials(TOPICS, 100, 2026)) == _pairs(every[:100])


def test_other_templates_and_few_topics_keep_the_prefix_rule():
    templates = ("Q1 {topic}", "Q2 {topic}", "Q3 {topic}")
    full = plan_trials(TOPICS[:5], 15, 7, templates)
    for n in range(1, 15):
        assert _pairs(plan_trials(TOPICS[:5], n, 7, templates)) == _pairs(full[:n])
    with pytest.raises(ValueError, match="ask for at most 15 trials"):
        plan_trials(TOPICS[:5], 16, 7, templates)


def test_the_papers_80_trials_are_unchanged_on_the_trec_data():
    """The published 80-trial plan (README figures) is the same 80 (scenario, topic, seed) as
    before the prefix rule, and --trials 20 now shares all of its 20 with it (it shared 0)."""
    documents = load_documents(data_path_or_skip(), TREC_GENDER)
    topics = study_topics(documents, None, TREC_GENDER.groups)
    full = plan_trials(topics, 80, 2026)
    assert [t.topic for t in full[::4]][:6] == [
        "Television",
        "Jewish history",
        "Japan",
        "Geography",
        "Languages",
        "Agriculture",
    ]
    assert [t.seed for t in full[:3]] == [2727543821, 2351327623, 4291099476]
    assert full[79].seed == 2862248061
    for small in (10, 20, 40):
        assert _pairs(plan_trials(topics, small, 2026)) == _pairs(full[:small])
