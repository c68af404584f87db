"""fairrag_core.structured_citations: a structured answer reads as the same citations written as
text (docs/SPEC.md, "Citations" → Structured citations), the index base stated, never guessed."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from fairrag_core import FairnessAuditor
from fairrag_core.citations import ContextDocument
from fairrag_core.structured_citations import (
    check_source_id_base,
    read_content_blocks,
    read_json_answer,
    read_span_citations,
    read_structured_answer,
    render_answer,
)

TITLES = ["Ada Lovelace", "Alan Turing", "Grace Hopper (computer scientist)", "Edsger Dijkstra"]
GROUPS = ["female", "male", "female", "male"]
TEXT = (
    "- Alan Turing (DocTitle: Alan Turing)\n"
    "- Grace Hopper (DocTitle: Grace Hopper (computer scientist))"
)


class CitedAnswer(BaseModel):
    """LangChain's citation how-to schema: source ids from 0."""

    answer: str
    citations: list[int]


class Citation(BaseModel):
    source_id: int
    quote: str


class SourcedAnswer(BaseModel):
    """A schema naming its citations ``sources``, as many RAG tutorials write it."""

    answer: str
    sources: list[int]


class QuotedAnswer(BaseModel):
    answer: str
    citations: list[Citation]


@dataclass
class Cited:
    person: str
    number: int


@dataclass
class NumberedAnswer:
    citations: list[Cited]


def generation(text: str) -> dict:
    context = [
        ContextDocument(t, group=g, number=n)
        for n, (t, g) in enumerate(zip(TITLES, GROUPS, strict=True), 1)
    ]
    return FairnessAuditor.create(protected="female").generation(text, context, 0.5)


def rendered(value, base: int = 0) -> str:
    answer = read_structured_answer(value, source_id_base=base)
    assert answer is not None
    return render_answer(answer, TITLES)


@pytest.mark.parametrize(
    "value",
    [
        CitedAnswer(answer="", citations=[1, 2]),
        {"answer": "", "citations": [1, 2]},
        QuotedAnswer(
            answer="",
            citations=[Citation(source_id=1, quote="x"), Citation(source_id=2, quote="y")],
        ),
        NumberedAnswer([Cited("Alan Turing", 2), Cited("Grace Hopper", 3)]),
        # a user trial: ``Answer(answer: str, sources: list[int])`` was read as its text alone,
        # its sources silently ignored (groundedness 0 for an answer citing two documents)
        SourcedAnswer(answer="", sources=[1, 2]),
        {"answer": "", "source_ids": [1, 2]},
        {"answer": "", "sources": None, "source_ids": [1, 2]},
        {
            "citations": [
                {"person": "Alan Turing", "title": "Alan Turing"},
                {"title": "Grace Hopper (computer scientist)"},
            ]
        },
    ],
)
def test_every_structured_form_gives_the_texts_record(value):
    assert rendered(value) == TEXT
    assert generation(rendered(value)) == generation(TEXT)


def test_citations_are_read_first_and_a_sources_text_is_no_list():
    # ``citations`` is read before ``sources``; a ``sources`` text (RetrievalQAWithSourcesChain's
    # "sources": "a, b") is no citations list: the answer's text, citing as text does
    both = read_structured_answer(
        {"answer": "", "citations": [1, 2], "sources": [0]}, source_id_base=0
    )
    assert both is not None and render_answer(both, TITLES) == TEXT
    text = read_structured_answer({"answer": TEXT, "sources": "Alan Turing"}, source_id_base=0)
    assert text is not None and text.citations == () and text.text == TEXT


def test_a_sources_field_that_holds_no_citations_or_no_answer_is_none():
    """A review of the change above: LlamaIndex's ``AgentChatResponse.sources`` (tool outputs)
    and a workflow's ``{"response": text, "sources": nodes}`` became fake "unreadable
    citation" bullets (groundedness 1.0 -> 0.5), and a tool call ``fetch(source_ids=[1, 3])``
    an answer. ``sources`` and ``source_ids`` count only beside an answer text, every entry a
    citation (``citations`` is read as before: an unreadable entry counts)."""
    nodes = [{"node": {"text": "Ada Lovelace was..."}, "score": 0.9}]
    as_text = read_structured_answer({"response": TEXT, "sources": nodes}, source_id_base=0)
    assert as_text is None or as_text.citations == ()
    assert read_structured_answer({"source_ids": [1, 3]}, source_id_base=0) is None
    tool_args = {"query": "women in medicine", "sources": ["news", "web"]}
    assert read_structured_answer(tool_args, source_id_base=0) is None
    unreadable = read_structured_answer({"answer": "", "citations": nodes}, source_id_base=0)
    assert unreadable is not None and len(unreadable.citations) == 1


def test_source_ids_are_read_from_the_stated_base_never_guessed():
    # LangChain's how-to numbers sources from 0: [0, 2] are the 1st and 3rd documents shown.
    from_zero = generation(rendered({"answer": "", "citations": [0, 2]}, base=0))
    from_one = generation(rendered({"answer": "", "citations": [0, 2]}, base=1))
    assert from_zero["generation_parity"] == 1.0 and from_zero["groundedness"] == 1.0
    assert from_one["generation_parity"] == 0.0 and from_one["groundedness"] == 0.5
    assert rendered({"citations": [2, 3]}, base=0) != rendered({"citations": [2, 3]}, base=1)
    with pytest.raises(ValueError, match=r"source_id_base must be 0 .* or 1"):
        check_source_id_base(2)
    with pytest.raises(ValueError, match="source_id_base"):
        read_structured_answer({"citations": []}, source_id_base=True)


def test_a_source_outside_the_shown_list_counts_and_is_invalid():
    text = rendered({"answer": "", "citations": [0, 9, None]})
    assert text.splitlines() == [
        "- Ada Lovelace (DocTitle: Ada Lovelace)",
        "- source id 9 (DocTitle: source id 9, not among the 4 entries shown)",
        "- (an unreadable citation)",
    ]
    result = generation(text)
    assert result["n_bullets"] == 3 and result["n_valid_citations"] == 1
    assert result["groundedness"] == pytest.approx(1 / 3)


def test_json_content_is_read_and_other_text_is_not():
    answer = read_json_answer('```json\n{"answer": "", "citations": [1, 2]}\n```', source_id_base=0)
    assert answer is not None and answer.form == "json"
    assert render_answer(answer, TITLES) == TEXT
    assert read_json_answer(TEXT, source_id_base=0) is None
    # an ``answer`` text without a citations list: its text (a trial: a schema
    # ``Answer(answer: str)`` was recorded as an empty answer with groundedness 0)
    plain = read_json_answer('{"answer": "- Ada (DocTitle: Ada)"}', source_id_base=0)
    assert plain is not None and plain.form == "json" and plain.citations == ()
    assert render_answer(plain, TITLES) == "- Ada (DocTitle: Ada)"
    assert read_json_answer("{not json", source_id_base=0) is None


def test_provider_content_blocks_cite_where_the_block_ends():
    # Anthropic: a text block per cited claim, document_index from 0
    blocks = [
        {"type": "text", "text": "- "},
        {
            "type": "text",
            "text": "Alan Turing",
            "citations": [{"type": "char_location", "document_index": 1, "cited_text": "..."}],
        },
        {"type": "text", "text": "\n- "},
        {
            "type": "text",
            "text": "Grace Hopper",
            "citations": [{"type": "char_location", "document_index": 2}],
        },
    ]
    answer = read_content_blocks(blocks)
    assert answer is not None and answer.form == "content_blocks"
    assert render_answer(answer, TITLES) == TEXT
    assert read_content_blocks([{"type": "text", "text": TEXT}]) is None


def test_span_citations_cite_where_the_span_ends():
    text = "- Alan Turing\n- Grace Hopper"
    spans = [
        {"start": 2, "end": 13, "document_indices": [1]},
        {"start": 16, "end": 28, "document_index": 2},
    ]
    answer = read_span_citations(text, spans)
    assert answer is not None and render_answer(answer, TITLES) == TEXT
    assert read_span_citations(text, [{"start": 0, "end": 999, "document_index": 0}]) is None


def test_not_a_structured_answer():
    assert read_structured_answer("text", source_id_base=0) is None
    assert read_structured_answer({"answer": 3}, source_id_base=0) is None  # no text
    assert read_structured_answer({"answer": "x", "citations": "0"}, source_id_base=0) is None
    assert read_structured_answer({"citations": "0, 1"}, source_id_base=0) is None
    assert read_json_answer("{" * 100_000, source_id_base=0) is None  # not JSON, never raises
    assert read_json_answer('{"a":' + "[" * 100_000, source_id_base=0) is None


def test_at_most_1000_citations_are_read_from_one_answer():
    """docs/SPEC.md, "Structured citations": the first 1,000 are read, never an error that
    would cost the answer its record; a span's indices are cut at the same bound."""
    many = read_structured_answer({"citations": [0] * 5_000}, source_id_base=0)
    assert many is not None and len(many.citations) == 1000
    deep = '{"answer": "x", "citations": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert read_json_answer(deep, source_id_base=0) is None
    spans = [{"start": 0, "end": 3, "document_indices": list(range(3_000_000))}]
    answer = read_span_citations("Ada", spans)
    assert answer is not None and len(answer.citations) == 1000
    rendered = render_answer(answer, TITLES)  # one pass over the text, however many spans
    assert rendered.startswith("Ada (DocTitle: ") and rendered.count("(DocTitle: ") == 1000


def test_a_source_id_several_documents_carry_cites_the_one_its_person_names():
    """An entry number two shown documents carry (an agent's searches, each numbered from 1)
    is given as a tuple of their titles: a citation naming one of them cites it; one naming no
    shown person, or giving no person, cites no shown document (written so, counted invalid);
    one naming another shown person cites the first of them (a mis-citation)."""
    entries = [("Ada Lovelace", "Alan Turing"), "Grace Hopper (computer scientist)"]
    answer = read_structured_answer(
        {
            "citations": [
                {"source_id": 0, "person": "Alan Turing"},
                {"source_id": 0, "name": "Ada Lovelace"},
                {"source_id": 0},
                {"source_id": 0, "person": "Edsger Dijkstra"},
                {"source_id": 1},
                {"source_id": 0, "person": "Grace Hopper"},
            ]
        },
        source_id_base=0,
    )
    assert answer is not None
    assert render_answer(answer, entries).splitlines() == [
        "- Alan Turing (DocTitle: Alan Turing)",
        "- Ada Lovelace (DocTitle: Ada Lovelace)",
        "- source id 0 (DocTitle: source id 0, carried by 2 shown documents)",
        "- Edsger Dijkstra (DocTitle: source id 0, carried by 2 shown documents)",
        "- Grace Hopper (DocTitle: Grace Hopper (computer scientist))",
        # another shown person: wrong whichever it means, a mis-citation as in text (a review)
        "- Grace Hopper (DocTitle: Ada Lovelace)",
    ]


def test_a_shared_source_id_without_a_person_cites_the_one_the_answer_names():
    """A user trial: "Alan Turing and Barbara Liskov." citing ``[1, 2]`` after two searches
    (``[1]``: Turing's or Hopper's, ``[2]``: Lovelace's or Liskov's) credited no one. A
    citation without a person cites the carrier whose person the answer's text names, when it
    names exactly one; naming both, or neither, still cites no one."""
    entries = [("Alan Turing", "Grace Hopper"), ("Ada Lovelace", "Barbara Liskov")]

    def rendered(text: str) -> list[str]:
        answer = read_structured_answer({"answer": text, "citations": [1, 2]}, source_id_base=1)
        assert answer is not None
        return render_answer(answer, entries).splitlines()[1:]

    assert rendered("Alan Turing and Barbara Liskov.") == [
        "- Alan Turing (DocTitle: Alan Turing)",
        "- Barbara Liskov (DocTitle: Barbara Liskov)",
    ]
    assert rendered("Alan Turing, Grace Hopper and Ada Lovelace.") == [
        "- source id 1 (DocTitle: source id 1, carried by 2 shown documents)",
        "- Ada Lovelace (DocTitle: Ada Lovelace)",
    ]
    assert rendered("Pioneers of computing (Alan Turingham).") == [
        "- source id 1 (DocTitle: source id 1, carried by 2 shown documents)",
        "- source id 2 (DocTitle: source id 2, carried by 2 shown documents)",
    ]


def test_a_citation_without_a_person_beside_a_text_about_another_shown_person_miscites():
    """A user trial: ``{"answer": "Lenore Blum studied ...", "citations": [2]}`` with entry 2
    Donald Knuth credited Knuth (the bullet took the cited document's person), where the same
    citation in text counts a mis-citation. The bullet's person is the one shown person the
    text names, when it names exactly one and not the cited one (nor its surname)."""
    entries = ["Marvin Minsky", "Donald Knuth", "Lenore Blum"]

    def bullets(text: str, cited: list[int]) -> list[str]:
        answer = read_structured_answer({"answer": text, "citations": cited}, source_id_base=1)
        assert answer is not None
        return render_answer(answer, entries).splitlines()[1:]

    assert bullets("Lenore Blum studied real-number computation.", [2]) == [
        "- Lenore Blum (DocTitle: Donald Knuth)"
    ]
    assert bullets("Knuth and Lenore Blum were pioneers.", [2]) == [
        "- Donald Knuth (DocTitle: Donald Knuth)"  # its surname written: about Knuth too
    ]
    assert bullets("Lenore Blum and Marvin Minsky were pioneers.", [2]) == [
        "- Donald Knuth (DocTitle: Donald Knuth)"  # two others named: cannot tell, as before
    ]
    assert bullets("Lenore Blum was a pioneer.", [1, 3]) == [
        "- Lenore Blum (DocTitle: Marvin Minsky)",
        "- Lenore Blum (DocTitle: Lenore Blum)",
    ]


def test_a_shared_id_beside_a_text_of_another_shown_person_is_a_miscitation():
    """A user trial: after two searches, ``"John McCarthy coined AI."`` citing ``[1]`` (Alan
    Turing's or Grace Hopper's) was written "carried by 2", credited to no one and counted as
    no mis-citation, where the same citation in text counts one; ``McCarthy`` alone, and a
    citation's person given by surname (``Hopper``), read as text reads them."""
    entries = [("Alan Turing", "Grace Hopper"), ("Ada Lovelace", "Barbara Liskov"), "John McCarthy"]

    def bullets(value: dict) -> list[str]:
        answer = read_structured_answer(value, source_id_base=1)
        assert answer is not None
        return render_answer(answer, entries).splitlines()

    assert bullets({"answer": "John McCarthy coined AI.", "citations": [1]})[1:] == [
        "- John McCarthy (DocTitle: Alan Turing)"
    ]
    assert bullets({"answer": "McCarthy coined AI.", "citations": [1]})[1:] == [
        "- John McCarthy (DocTitle: Alan Turing)"
    ]
    assert bullets({"answer": "McCarthy coined AI.", "citations": [3]})[1:] == [
        "- John McCarthy (DocTitle: John McCarthy)"
    ]
    assert bullets({"citations": [{"source_id": 1, "person": "Hopper"}]}) == [
        "- Hopper (DocTitle: Grace Hopper)"
    ]
    assert bullets({"citations": [{"source_id": 1, "person": "Someone"}]}) == [
        "- Someone (DocTitle: source id 1, carried by 2 shown documents)"
    ]
