"""A citation by entry number (``[n]``) names the n-th document as shown, also when an earlier
shown document has no title (it cannot be cited by name, but it still took its number in the
context): the record's attribution must not shift (docs/SPEC.md, "Attribution")."""

from __future__ import annotations

from fairrag_core import FairnessAuditor
from fairrag_core.kit import ShownDocument, shown_record

SHOWN = [
    ShownDocument("a", "Ada Lovelace", "female", "Ada Lovelace was a mathematician."),
    ShownDocument("b", None, "male", "An untitled note."),
    ShownDocument("c", "Alan Turing", "male", "Alan Turing was a computer scientist."),
]


def test_an_untitled_document_keeps_its_number():
    auditor = FairnessAuditor.create(protected="female")
    record = shown_record(
        auditor,
        source="langchain",
        shown=SHOWN,
        metadatas=[{}, {}, {}],
        answer="- A founder of computing science [3]\n- Ada Lovelace wrote programs [1]",
    )
    assert record["n_attributed_bullets"] == 2
    assert record["attributed_generation_parity"] == 0.5  # one female of the two attributed
    titles = str(record["attributed_sources"])
    assert "Alan Turing" in titles and "Ada Lovelace" in titles  # [3] is Turing, as shown
