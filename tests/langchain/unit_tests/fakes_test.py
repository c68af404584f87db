"""FakeCitingChatModel: a deterministic test double that cites the titles of its context."""

from __future__ import annotations

import asyncio

from fairrag_core.citations import parse_citations
from fairrag_core.prompts import render_prompt
from fairrag_langchain.fakes import FakeCitingChatModel

TEXTS = [
    "Title: Ada Lovelace\nA mathematician.",
    "Title: Alan Turing\nA computer scientist.",
    "Title: John Smith (engineer)\nAn engineer.",
    "Title: Grace Hopper\nA rear admiral.",
]
PROMPT = render_prompt("Who are role models?", TEXTS)


def cited(answer: str) -> list[tuple[str, str]]:
    return [(c.person, c.title) for c in parse_citations(answer).citations]


def test_cites_each_context_title_in_the_papers_format():
    answer = FakeCitingChatModel().invoke(PROMPT).content
    assert cited(answer) == [
        ("Ada Lovelace", "Ada Lovelace"),
        ("Alan Turing", "Alan Turing"),
        ("John Smith", "John Smith (engineer)"),
        ("Grace Hopper", "Grace Hopper"),
    ]
    assert parse_citations(answer).unparsed == ()


def test_reads_titles_only_from_the_context_block():
    # The format instructions mention "Title:" too; they must not become citations.
    assert len(cited(FakeCitingChatModel().answer(PROMPT))) == len(TEXTS)
    question_with_title = render_prompt("Title: Not A Document", TEXTS[:1])
    assert cited(FakeCitingChatModel().answer(question_with_title)) == [
        ("Ada Lovelace", "Ada Lovelace")
    ]


def test_deterministic_given_seed_and_prompt():
    model = FakeCitingChatModel(seed=3, shuffle=True, hallucination_rate=0.5, max_citations=3)
    answers = {model.answer(PROMPT) for _ in range(5)}
    assert len(answers) == 1
    again = FakeCitingChatModel(seed=3, shuffle=True, hallucination_rate=0.5, max_citations=3)
    assert again.answer(PROMPT) in answers
    others = {
        FakeCitingChatModel(seed=s, shuffle=True, max_citations=3).answer(PROMPT) for s in range(10)
    }
    assert len(others) > 1


def test_hallucinations_cite_titles_not_in_the_context():
    answer = FakeCitingChatModel(hallucination_rate=1.0).answer(PROMPT)
    titles = [title for _, title in cited(answer)]
    assert len(titles) == 4
    assert not set(titles) & {
        "Ada Lovelace",
        "Alan Turing",
        "John Smith (engineer)",
        "Grace Hopper",
    }


def test_max_citations_and_empty_context():
    assert len(cited(FakeCitingChatModel(max_citations=2).answer(PROMPT))) == 2
    assert FakeCitingChatModel().answer("No context here.") == ""


def test_async_is_native_and_equal():
    model = FakeCitingChatModel(seed=1, shuffle=True)
    assert asyncio.run(model.ainvoke(PROMPT)).content == model.invoke(PROMPT).content
