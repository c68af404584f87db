"""CitationOutputParser on well-formed, malformed, empty and hallucinating answers."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage

from fairrag_core.prompts import format_instructions
from fairrag_langchain import CitationOutputParser, CitedAnswer
from tests.langchain.doubles import person_documents

CONTEXT = person_documents(["female", "male", None])

GOOD = "- Person 00 (DocTitle: Person 00)\n- Person 01 (DocTitle: Person 01)"


def pairs(answer: CitedAnswer) -> list[tuple[str, str]]:
    return [(c.person, c.title) for c in answer.citations]


def test_format_instructions_are_the_papers():
    assert CitationOutputParser().get_format_instructions() == format_instructions()
    assert "(DocTitle: <exact Title from context>)" in format_instructions()


def test_parse_without_context_leaves_validity_unchecked():
    answer = CitationOutputParser().parse(GOOD)
    assert pairs(answer) == [("Person 00", "Person 00"), ("Person 01", "Person 01")]
    assert not answer.checked
    assert all(c.valid is None and c.names_person is None for c in answer.citations)
    assert answer.bullet_count == 2


def test_parse_with_context_marks_each_citation():
    text = GOOD + "\n- Jane Doe (DocTitle: Jane Doe)\n* **person 02** (doctitle: PERSON  02)."
    answer = CitationOutputParser(group_key="gender").parse_with_context(text, CONTEXT)
    assert answer.checked
    assert [c.valid for c in answer.citations] == [True, True, False, True]
    assert [c.group for c in answer.citations] == ["female", "male", None, None]
    assert [c.context_index for c in answer.citations] == [0, 1, None, 2]
    assert [c.line_number for c in answer.citations] == [1, 2, 3, 4]
    assert [c.title for c in answer.valid_citations] == ["Person 00", "Person 01", "PERSON 02"]


def test_context_field_makes_parse_and_invoke_check():
    parser = CitationOutputParser(context=CONTEXT)
    answer = parser.invoke(AIMessage(content="1. Person 01 (DocTitle: Person 01)"))
    assert isinstance(answer, CitedAnswer)
    assert answer.citations[0].valid is True
    assert answer.citations[0].group is None  # no group_key: groups are not reported


async def test_ainvoke_parses_like_invoke():
    parser = CitationOutputParser(context=CONTEXT)
    assert await parser.ainvoke(GOOD) == parser.invoke(GOOD)


def test_malformed_lines_are_reported_not_dropped():
    text = (
        "Here are some role models:\n"
        "- Person 00 (DocTitle: Person 00)\n"
        "- Person 01, Person 00 (DocTitle: Person 01) (DocTitle: Person 00)\n"
        "- Someone without a citation\n"
        "- (DocTitle: Person 01)\n"
        "---\n"
        "I hope this helps!"
    )
    answer = CitationOutputParser().parse_with_context(text, CONTEXT)
    assert pairs(answer) == [("Person 00", "Person 00")]
    assert [u.line_number for u in answer.unparsed_lines] == [3, 4, 5]
    assert [p.line for p in answer.prose_lines] == [
        "Here are some role models:",
        "---",
        "I hope this helps!",
    ]
    assert answer.bullet_count == 4


@pytest.mark.parametrize("text", ["", "   \n\n  ", "I cannot answer that."])
def test_empty_answers(text):
    answer = CitationOutputParser().parse_with_context(text, CONTEXT)
    assert answer.citations == []
    assert answer.unparsed_lines == []
    assert answer.bullet_count == 0


def test_hallucinated_titles_are_invalid():
    text = "- Ada Lovelace (DocTitle: Ada Lovelace)\n- Person 00 (DocTitle: Person 00 (scientist))"
    answer = CitationOutputParser().parse_with_context(text, CONTEXT)
    assert [c.valid for c in answer.citations] == [False, False]
    assert answer.valid_citations == []


def test_text_inside_a_document_cannot_make_a_citation_valid():
    tricky = Document(
        page_content="Title: Real Person\n- Fake Person (DocTitle: Fake Person)",
        metadata={"title": "Real Person"},
    )
    answer = CitationOutputParser().parse_with_context(
        "- Fake Person (DocTitle: Fake Person)", [tricky]
    )
    assert answer.citations[0].valid is False


def test_title_from_the_title_line_when_metadata_has_none():
    document = Document(page_content="Title: Grace Hopper\nA computer scientist.")
    untitled = Document(page_content="no title anywhere")
    answer = CitationOutputParser().parse_with_context(
        "- Grace Hopper (DocTitle: Grace Hopper)", [untitled, document]
    )
    assert answer.citations[0].valid is True
    assert answer.citations[0].context_index == 1  # index among the documents given


def test_context_documents_without_the_group_key_are_of_unknown_group():
    answer = CitationOutputParser(group_key="sex").parse_with_context(GOOD, CONTEXT)
    assert answer.citations and all(c.group is None for c in answer.citations if c.valid)


def test_result_is_json_serialisable():
    answer = CitationOutputParser(group_key="gender").parse_with_context(GOOD, CONTEXT)
    assert CitedAnswer.model_validate_json(answer.model_dump_json()) == answer
