"""CitationOutputParser reports the attributed source set (docs/SPEC.md, "Attribution"): the
core's rule, any citation style and people named without a citation."""

from __future__ import annotations

from langchain_core.documents import Document

from fairrag_langchain import CitationOutputParser

CONTEXT = [
    Document("Ada Lovelace was a mathematician.", metadata={"title": "Ada Lovelace", "g": "f"}),
    Document("Alan Turing was a logician.", metadata={"title": "Alan Turing", "g": "m"}),
    Document("Grace Hopper was an admiral.", metadata={"title": "Grace Hopper", "g": "f"}),
]


def test_numbered_bracketed_and_uncited_bullets_are_attributed():
    text = "- Ada Lovelace [1]\n- Alan Turing [Alan Turing]\n- Grace Hopper: compilers"
    answer = CitationOutputParser(group_key="g").parse_with_context(text, CONTEXT)
    assert answer.citations == []  # the paper's format: nothing parsed
    assert answer.citation_styles == ["numbered", "bracketed_title", "implicit"]
    got = [(a.line_number, a.title, a.style, a.names_person, a.group, a.context_index)
           for a in answer.attributed]  # fmt: skip
    assert got == [
        (1, "Ada Lovelace", "numbered", True, "f", 0),
        (2, "Alan Turing", "bracketed_title", True, "m", 1),
        (3, "Grace Hopper", "implicit", True, "f", 2),
    ]


def test_without_context_nothing_is_attributed():
    answer = CitationOutputParser().parse("- Ada Lovelace [1]")
    assert (answer.citation_styles, answer.attributed) == ([], [])
